"""Result records: the measured values behind every verdict, with how they were made.

A record is one small JSON file under the checkout's ``results/`` folder, named by its path without ``.json``
(``results/cfka/stoc_names600.json`` is the record ``cfka/stoc_names600``). It holds:

* ``schema`` — :data:`SCHEMA`;
* ``origin`` — ``"produced"`` (written by the experiment that measured it, :func:`write_record`) or
  ``"transcribed"`` (a number that existed only in the docs, entered by hand with the docs commit and the command
  that made it; replaced when its experiment runs again);
* ``provenance`` — for a produced record: the commit, the exact command, the config, the seeds, the PT replicates,
  the machine, the date, wall and CPU seconds (:data:`PRODUCED_KEYS`); for a transcribed one: the docs file and
  commit it was read from, the command that made the number, the date it was measured, seeds and PT replicates
  (:data:`TRANSCRIBED_KEYS`); optionally ``unit`` (:data:`UNITS`): ``pt-model`` for a record of PT models' own
  quality (its replicate axis is the PT models), ``timing`` for a cost measured by repeated runs of one computation;
  neither counts toward a claim's seeds;
* ``regime`` — what was run here: model and parameter count, the PT model's held-out quality, world, dose, ...
  (free keys; shown in the verdict table);
* ``rows`` — one object per run (or per measured unit): the factors that tell runs apart (``seed``, ``pt``,
  ``kind``, ``alpha`` ...) and the measured values. A verdict rule selects rows by their factors
  (:meth:`Record.values`) and reads the spread over seeds and PT replicates from them.

Reading is strict: every problem names the file and the key (:func:`load_records`); writing is atomic.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import pathlib
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from cfka_jax import jsonio

SCHEMA = "cfka-result/1"
ORIGINS = ("produced", "transcribed")
PRODUCED_KEYS = ("commit", "command", "config", "seeds", "pt_replicates", "machine", "date", "wall_s", "cpu_s")
"""Provenance every produced record carries."""
TRANSCRIBED_KEYS = ("docs_file", "docs_commit", "command", "date", "seeds", "pt_replicates")
"""Provenance every transcribed record carries (the commit of the docs it was read from, the command that made
the number then)."""
UNITS = ("run", "pt-model", "timing")
"""What a record's row measures (:attr:`Record.unit`)."""
RESULTS = "results"
"""The folder of the records, relative to the checkout's root (``cfka claims --results`` overrides it)."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One result record (see the module docstring).

    Attributes:
      name: the record's path under ``results/`` without ``.json`` (``cfka/stoc_names600``).
      origin: ``"produced"`` or ``"transcribed"``.
      provenance: how it was made (:data:`PRODUCED_KEYS` / :data:`TRANSCRIBED_KEYS`, more keys allowed).
      regime: what was run here (model, parameters, PT quality, world, dose ...).
      rows: one mapping per run: factors and measured values.
      path: the file it was read from (``None`` when built in memory).
    """

    name: str
    origin: str
    provenance: Mapping[str, Any]
    regime: Mapping[str, Any]
    rows: tuple[Mapping[str, Any], ...]
    path: pathlib.Path | None = None

    def __post_init__(self):
        where = str(self.path or self.name)
        if self.origin not in ORIGINS:
            raise ValueError(f"{where}: key 'origin' must be one of {ORIGINS}, got {self.origin!r}")
        keys = PRODUCED_KEYS if self.origin == "produced" else TRANSCRIBED_KEYS
        missing = [k for k in keys if k not in self.provenance]
        if missing:
            raise ValueError(f"{where}: key 'provenance' lacks " + ", ".join(repr(k) for k in missing)
                             + f" (a {self.origin} record needs {', '.join(keys)})")
        if not isinstance(self.provenance["command"], str) or not self.provenance["command"].strip():
            raise ValueError(f"{where}: key 'provenance.command' must name the command that made the numbers "
                             "(a number no command backs is not a result)")
        if self.provenance.get("unit", "run") not in UNITS:
            raise ValueError(f"{where}: key 'provenance.unit' must be one of {UNITS}, got "
                             f"{self.provenance['unit']!r}")
        if not self.rows:
            raise ValueError(f"{where}: key 'rows' is empty: a record holds at least one measured row")
        for i, row in enumerate(self.rows):
            if not isinstance(row, Mapping) or not row:
                raise ValueError(f"{where}: rows[{i}] must be a non-empty object")
            for k, v in row.items():
                if isinstance(v, float) and not math.isfinite(v):
                    raise ValueError(f"{where}: rows[{i}].{k} is {v}: a record holds finite numbers only "
                                     "(write null for a value that was not measured)")

    def select(self, **where) -> list[Mapping[str, Any]]:
        """The rows whose factors equal ``where`` (``kind="stoc", pt="B"``); a list value matches any of it."""
        def ok(row):
            return all(row.get(k) in v if isinstance(v, (list, tuple, set)) else row.get(k) == v
                       for k, v in where.items())
        return [r for r in self.rows if ok(r)]

    def values(self, metric: str, **where) -> list[float]:
        """``metric`` of every selected row that has it (non-null), as floats.

        Raises:
          KeyError: no selected row has ``metric`` (names the record, the metric and the selection).
        """
        rows = self.select(**where)
        out = [float(r[metric]) for r in rows if r.get(metric) is not None]
        if not out:
            raise KeyError(f"record {self.name}: no row with {metric!r} where {where or 'any'} "
                           f"({len(rows)} rows selected)")
        return out

    def count(self, factor: str, **where) -> int:
        """How many distinct values ``factor`` takes over the selected rows (seeds, PT replicates ...)."""
        return len({r.get(factor) for r in self.select(**where) if r.get(factor) is not None})

    @property
    def seeds(self) -> int:
        """The number of seeds the record's provenance names."""
        return len(self.provenance.get("seeds") or ())

    @property
    def unit(self) -> str:
        """What one row measures (provenance key ``unit``, :data:`UNITS`): ``run`` (a seeded training run, the
        default), ``pt-model`` (a PT model's own quality: its replicates are its PT replicates, it has no CPT seed)
        or ``timing`` (a cost measured by repeating one deterministic computation: its rows are repeats, not
        seeds). A claim's seed count reads the ``run`` records only (:func:`cfka_jax.claims.table.judge`)."""
        return self.provenance.get("unit", "run")

    @property
    def pt_replicates(self) -> int:
        """The number of PT replicates (PT models) the record's provenance names (0 where no PT model is used)."""
        return len(self.provenance.get("pt_replicates") or ())

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "name": self.name, "origin": self.origin, "provenance": dict(self.provenance),
                "regime": dict(self.regime), "rows": [dict(r) for r in self.rows]}


def record_from_json(obj: Any, where: str, name: str, path: pathlib.Path | None = None) -> Record:
    """A :class:`Record` from its decoded JSON, checked key by key (errors start with ``where``)."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object")
    jsonio.require_keys(obj, ("schema", "name", "origin", "provenance", "regime", "rows"), where)
    if obj["schema"] != SCHEMA:
        raise ValueError(f"{where}: key 'schema' is {obj['schema']!r}, expected {SCHEMA!r}")
    if obj["name"] != name:
        raise ValueError(f"{where}: key 'name' is {obj['name']!r} but the file's place under results/ names it "
                         f"{name!r}")
    for key in ("provenance", "regime"):
        if not isinstance(obj[key], dict):
            raise ValueError(f"{where}: key {key!r} must be an object")
    if not isinstance(obj["rows"], list):
        raise ValueError(f"{where}: key 'rows' must be a list of objects")
    for key in ("seeds", "pt_replicates"):
        if key in obj["provenance"] and not isinstance(obj["provenance"][key], list):
            raise ValueError(f"{where}: key 'provenance.{key}' must be a list")
    return Record(name, obj["origin"], obj["provenance"], obj["regime"], tuple(obj["rows"]), path)


def load_records(root: str | os.PathLike = RESULTS) -> dict[str, Record]:
    """Every record under ``root`` (``**/*.json``), keyed by name.

    Raises:
      ValueError: a malformed record (names the file and the key), or ``root`` is not a folder.
    """
    root = pathlib.Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: no results folder here (run from the checkout's root, or pass --results DIR)")
    out = {}
    for path in sorted(root.rglob("*.json")):
        name = path.relative_to(root).with_suffix("").as_posix()
        out[name] = record_from_json(jsonio.read_json(path), str(path), name, path)
    return out


CODE_PATHS = ("cfka_jax", "experiments", "proofs_check", "setup.py", "pyproject.toml")
"""What decides a result: ``+dirty`` marks a commit whose code here differed from it (docs and records do not count)."""


def git_commit(cwd: str | os.PathLike | None = None) -> str:
    """The checkout's HEAD commit, with ``+dirty`` when tracked code (:data:`CODE_PATHS`) differs from it
    ("unknown" outside git)."""
    cwd = cwd or pathlib.Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS],
                               cwd=cwd, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def machine() -> str:
    """What ran it: the accelerator kind JAX sees and the host (processor, cores)."""
    import jax

    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", dev.platform)
    return f"{dev.platform}:{kind} x{jax.device_count()}; {platform.machine()} {os.cpu_count()} cores"


class Clock:
    """Wall and CPU seconds since it was made (the CPU time of this process and its finished children), and the
    commit of the code when it was made (``commit``): a study makes its clock when it starts, so a record written
    hours later names the code that ran, not a HEAD that moved on while it ran."""

    def __init__(self):
        self.wall0, self.cpu0 = time.perf_counter(), self._cpu()
        self.commit = git_commit()

    @staticmethod
    def _cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def elapsed(self) -> dict[str, float]:
        return {"wall_s": round(time.perf_counter() - self.wall0, 2), "cpu_s": round(self._cpu() - self.cpu0, 2)}


def provenance(*, config: Mapping[str, Any], seeds: Iterable[int], pt_replicates: Iterable[str] = (),
               clock: Clock, command: str | None = None) -> dict[str, Any]:
    """The provenance of a produced record: commit (the code when ``clock`` started; ``commit_at_write`` adds
    the checkout's commit now where it moved on since), command (default: this process's command line), config,
    seeds, PT replicates, machine, date (UTC), wall and CPU seconds since ``clock`` started."""
    now = git_commit()
    moved = {} if now == clock.commit else {"commit_at_write": now}
    return {"commit": clock.commit, **moved, "command": command or " ".join(["cfka" if sys.argv[0].endswith("cfka")
                                                                    else sys.argv[0], *sys.argv[1:]]),
            "config": dict(config), "seeds": list(seeds), "pt_replicates": list(pt_replicates),
            "machine": machine(), "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **clock.elapsed()}


def write_record(root: str | os.PathLike, name: str, *, rows: Iterable[Mapping[str, Any]],
                 regime: Mapping[str, Any], provenance: Mapping[str, Any], origin: str = "produced") -> pathlib.Path:
    """Checks and writes the record ``name`` atomically to ``root/name.json``; returns the path.

    Raises:
      ValueError: the record would not load back (missing provenance, no rows, a non-finite value).
    """
    if not name or name.startswith("/") or ".." in pathlib.PurePosixPath(name).parts:
        raise ValueError(f"record name {name!r}: a relative path under results/ without '..'")
    path = pathlib.Path(root) / f"{name}.json"
    record = Record(name, origin, dict(provenance), dict(regime), tuple(dict(r) for r in rows), path)
    jsonio.write_json_atomic(path, record.to_json(), allow_nan=False, indent=1, ensure_ascii=False)
    return path
