"""Seeds and produced records of the ``cfka geometry`` studies (``--seeds``, ``--record NAME``, ``--results DIR``).

A study with ``--seeds 0,1,2`` runs seed by seed, each into ``<out>/seed<k>/`` (its usual tables and plots), and
leaves a ``<study>_rows.json`` there when the seed is finished: the rows it adds to the record, its config, the
regime its scale resolved to and its wall and CPU seconds. A seed whose folder already holds that file for the same
config and regime is not run again, so a killed
run loses only the seed it was in, and the same command resumes it. Without ``--seeds`` a study runs seed 0 into
``<out>`` itself, as before.

With ``--record NAME`` the produced record ``token-force/NAME`` (``cfka_jax.claims.results.write_record``) is
rewritten under ``--results`` (default ``results``) after every finished seed, from the rows of every finished seed
of the run's list: one row per (seed, arm), the study's regime, the seeds, and the command that makes it (the full
seed list). ``wall_s`` / ``cpu_s`` are the sums over the seeds (per seed in ``seed_seconds``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record

PAPER = "token-force"
"""The folder under ``results/`` the geometry records go to (the token-force paper)."""
RUN_FIELDS = ("seeds", "record", "results", "out")
"""Config fields that say where and how often a study runs, not what it measures (left out of the resume check)."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_record_name(name: str | None) -> None:
    """``--record``: a plain file name (letters, digits, ``_ . -``), the record ``token-force/NAME``.

    Raises:
      ValueError: names the bad value.
    """
    if name is not None and not _NAME.fullmatch(name):
        raise ValueError(f"--record must be a plain name (letters, digits, '_', '.', '-'; it becomes "
                         f"results/{PAPER}/NAME.json), got {name!r}")


def check_seeds(seeds: Sequence[int]) -> None:
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds must be distinct integers >= 0, got {','.join(map(str, seeds))}")


def run_seeds(cfg) -> tuple[int, ...]:
    """The seeds a config runs: ``cfg.seeds``, or seed 0 alone."""
    return tuple(cfg.seeds) or (0,)


def seed_out(cfg, seed: int) -> pathlib.Path:
    """Where seed ``seed`` writes: ``<out>/seed<k>`` with ``--seeds``, else ``<out>``."""
    return pathlib.Path(cfg.out) / f"seed{seed}" if cfg.seeds else pathlib.Path(cfg.out)


def _clean(v):
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return "inf" if isinstance(v, float) and math.isinf(v) else v


def _what(cfg) -> dict[str, Any]:
    """The config fields that decide the numbers (JSON-ready: ∞ as "inf")."""
    return {k: _clean(v) for k, v in dataclasses.asdict(cfg).items() if k not in RUN_FIELDS}


def same_config(stored: Mapping[str, Any], cfg) -> bool:
    """Whether a finished seed's stored config is ``cfg``'s: equal, where a field the stored config lacks (added to
    the study after that seed ran) counts as equal when ``cfg`` holds its default, which is what the seed ran with."""
    now = _what(cfg)
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    missing = set(now) - set(stored)
    return (all(defaults[k] is not dataclasses.MISSING and now[k] == _clean(defaults[k]) for k in missing)
            and {k: v for k, v in now.items() if k not in missing} == dict(stored))


def command_line(study: str, cfg) -> str:
    """The ``cfka geometry`` command that makes ``cfg``'s record: the scale and every field that differs from its
    default."""
    parts = ["cfka", "geometry", study]
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if (value == f.default and f.name != "scale") or value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join("inf" if isinstance(v, float) and math.isinf(v) else f"{v:g}" if isinstance(v, float)
                             else str(v) for v in value)
        parts += [f"--{f.name.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    return " ".join(parts)


def _json(value: Mapping[str, Any]) -> Any:
    """``value`` as it reads back from a JSON file (tuples become lists), so a stored regime compares equal."""
    return json.loads(json.dumps(value, allow_nan=False))


def _rows_file(cfg, study: str, seed: int) -> pathlib.Path:
    return seed_out(cfg, seed) / f"{study}_rows.json"


def _finished(cfg, study: str, seed: int, regime: Mapping[str, Any]) -> dict | None:
    """The rows file of a finished seed of the same config and regime, else None. The regime is what the study
    resolved from its scale (sizes, steps, subsets): a scale whose contents changed under the same name makes the
    seed run again. A rows file written before the regime was kept is judged by its config alone, one written before
    a field was added by :func:`same_config`."""
    path = _rows_file(cfg, study, seed)
    if not path.exists():
        return None
    data = jsonio.read_json_object(path, f"a finished {study} seed")
    jsonio.require_keys(data, ("config", "seed", "rows", "wall_s", "cpu_s"), str(path))
    same_regime = data.get("regime", _json(regime)) == _json(regime)
    return data if same_config(data["config"], cfg) and data["seed"] == seed and same_regime else None


def run_study(study: str, cfg, run_seed: Callable[[int, pathlib.Path], list[Mapping[str, Any]]],
              regime: Mapping[str, Any], *, pt_per_seed: bool = False) -> list[dict]:
    """Runs ``run_seed(seed, out_dir) -> rows`` for every seed not finished yet, in order; after each seed writes
    its rows file and, with ``cfg.record``, the record (``pt_per_seed``: every seed pre-trains its own base model,
    see :func:`write_study_record`). Returns every finished seed's rows file (seed order)."""
    start = Clock()  # the record names the code this study started with
    done = []
    for seed in run_seeds(cfg):
        data = _finished(cfg, study, seed, regime)
        if data is None:
            clock = Clock()
            rows = [dict(r) for r in run_seed(seed, seed_out(cfg, seed))]
            data = {"config": _what(cfg), "seed": seed, "regime": _json(regime), "rows": rows, **clock.elapsed()}
            jsonio.write_json_atomic(_rows_file(cfg, study, seed), data, allow_nan=False, indent=1)
        done.append(data)
        if cfg.record:
            write_study_record(study, cfg, done, regime, pt_per_seed=pt_per_seed, clock=start)
    return done


def write_study_record(study: str, cfg, done: Sequence[Mapping[str, Any]], regime: Mapping[str, Any],
                       planned: Sequence[int] | None = None, *, pt_per_seed: bool = False,
                       clock: Clock | None = None) -> pathlib.Path:
    """The record ``token-force/<cfg.record>`` from the finished seeds ``done`` (their rows, summed seconds; a seed
    run before its seconds were kept counts as null in ``seed_seconds`` and 0 in the sums). ``pt_per_seed``: each
    seed pre-trains its own base model (world, initialisation and batches drawn by the seed), so the record names
    one PT replicate per seed (``base-s<k>``); ``clock``: the study's, made when it started (its commit is the
    record's; default: now)."""
    seeds = [d["seed"] for d in done]
    prov = provenance(config=_what(cfg), seeds=seeds, clock=clock or Clock(), command=command_line(study, cfg),
                      pt_replicates=[f"base-s{k}" for k in seeds] if pt_per_seed else ())
    total = lambda key: round(sum(d.get(key) or 0.0 for d in done), 2)  # noqa: E731
    prov.update(wall_s=total("wall_s"), cpu_s=total("cpu_s"),
                seed_seconds={str(d["seed"]): {"wall_s": d.get("wall_s"), "cpu_s": d.get("cpu_s")} for d in done},
                seeds_planned=list(planned if planned is not None else run_seeds(cfg)))
    rows = [row for d in done for row in d["rows"]]
    return write_record(cfg.results, f"{PAPER}/{cfg.record}", rows=rows, regime=regime, provenance=prov)


def rounded(x: float | None, digits: int = 4) -> float | None:
    """A finite float rounded for a record (None stays None, a non-finite value becomes None)."""
    if x is None or not math.isfinite(float(x)):
        return None
    return round(float(x), digits)


def significant(x: float | None, digits: int = 6) -> float | None:
    """A float kept to ``digits`` significant digits for a record (None stays None, a non-finite value becomes
    None): small values such as R ≈ 0.02 keep their precision, unlike :func:`rounded`'s fixed decimals."""
    if x is None or not math.isfinite(float(x)):
        return None
    return float(f"{float(x):.{digits}g}")
