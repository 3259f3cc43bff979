"""TemporalWiki (spec taalm.md §8): loaders for the real files and a synthetic multi-period analogue.

Real data (downloaded by the user; nothing is fetched here):

* diffsets ``TWiki_Diffsets/wikipedia_{0910,1011,1112}_gpt2.csv``: column 0 of every row after the header; a row is
  dropped when its raw length is < 50 characters or its share of ASCII letters is < 0.3, and kept stripped
  (the reference's ``preprocess_temporalwiki_dataset.py``). :func:`read_diffset_csv`.
* probes ``{0901-1001,1001-1101,1101-1201}_{changed,unchanged}.jsonl`` with records ``{subject, relation,
  object}`` (:func:`read_probes`); Train-Attention rows ``{text, subject, relation, object}`` (:func:`read_ta_rows`).
  Bad records raise ``ValueError`` naming the file and line. Probes are scored in the schematic form (§4.1).

Synthetic analogue (:func:`synthetic_periods`): the ``twiki_pool`` people of a ``ckl_world.SyntheticWorld`` are
split over the periods; in period k some people's employer or residence changes (an evidence paragraph each,
the period's stream), the changed probes ask for the new objects, the unchanged probes for facts of people
that never change (their PT values). θ is carried across periods, the optimiser is fresh each period
(``continual.ckl.run_temporalwiki``); the metric is the mean object-token NLL before and after each period.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from cfka_jax.data.io import iter_jsonl
from cfka_jax.jsonio import read_csv_rows
from cfka_jax.data.lama_ckl import schematic_probe

PERIODS = ("0910", "1011", "1112")
PROBE_PERIODS = ("0901-1001", "1001-1101", "1101-1201")
MIN_CHARS, MIN_ASCII_LETTER_RATIO = 50, 0.3


def keep_diffset_text(raw: str) -> str | None:
    """The stripped text, or None when the reference's filter drops it (length < 50 or letters < 30 %)."""
    if len(raw) < MIN_CHARS:
        return None
    letters = sum(1 for c in raw if ("a" <= c <= "z") or ("A" <= c <= "Z"))
    return raw.strip() if letters / len(raw) >= MIN_ASCII_LETTER_RATIO else None


def read_diffset_csv(path: str | os.PathLike) -> list[str]:
    """The filtered texts of a diffset CSV (column 0, header skipped).

    Raises:
        ValueError: invalid UTF-8 or CSV (a binary file), an empty file, a row without columns, naming the file and
            line, or a file none of whose rows passes the filter (nothing to train on).
    """
    path = os.fspath(path)
    rows = read_csv_rows(path)
    if next(rows, None) is None:
        raise ValueError(f"{path}: empty file (expected a header row)")
    out = []
    for where, row in rows:
        if not row:
            raise ValueError(f"{where}: row without columns")
        text = keep_diffset_text(row[0])
        if text is not None:
            out.append(text)
    if not out:
        raise ValueError(f"{path}: no row passes the diffset filter (>= {MIN_CHARS} characters, >= "
                         f"{MIN_ASCII_LETTER_RATIO:.0%} ASCII letters); nothing to train on")
    return out


@dataclasses.dataclass(frozen=True)
class Probe:
    """A TemporalWiki probe (a fact)."""

    subject: str
    relation: str
    object: str

    def text(self) -> str:
        """The schematic form the benchmark scores (§4.1, §8)."""
        return schematic_probe(self.subject, self.relation, self.object)


def _strings(rec: dict, keys: tuple[str, ...], where: str) -> dict:
    for k in keys:
        if k not in rec:
            raise ValueError(f"{where}: missing field {k!r}")
        if not isinstance(rec[k], str) or not rec[k].strip():
            raise ValueError(f"{where}: field {k!r} must be a non-empty string, got {rec[k]!r}")
    return {k: rec[k] for k in keys}


def read_probes(path: str | os.PathLike) -> tuple[Probe, ...]:
    """Probe records ``{subject, relation, object}`` (extra fields ignored).

    Raises:
        ValueError: a bad record (file and line named) or a file without records (an empty probe set).
    """
    out = tuple(Probe(**_strings(rec, ("subject", "relation", "object"), where)) for where, rec in iter_jsonl(path))
    if not out:
        raise ValueError(f"{os.fspath(path)}: no probe records (an empty file); a probe set with nothing to score "
                         f"is refused")
    return out


def read_ta_rows(path: str | os.PathLike) -> tuple[dict, ...]:
    """Train-Attention rows ``{text, subject, relation, object}``; the object must occur in the text."""
    out = []
    for where, rec in iter_jsonl(path):
        row = _strings(rec, ("text", "subject", "relation", "object"), where)
        if row["object"] not in row["text"]:
            raise ValueError(f"{where}: the object {row['object']!r} does not occur in 'text'")
        out.append(row)
    if not out:
        raise ValueError(f"{os.fspath(path)}: no Train-Attention rows (an empty file)")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class SyntheticPeriod:
    """One period of the synthetic analogue: its stream (with each document's object) and its probes."""

    name: str
    docs: tuple[str, ...]
    objects: tuple[str, ...]
    changed: tuple[Probe, ...]
    unchanged: tuple[Probe, ...]


def synthetic_periods(world, *, unchanged_per_period: int = 100, seed: int = 0) -> list[SyntheticPeriod]:
    """The periods of a ``ckl_world.SyntheticWorld`` (module docstring); unchanged probes are drawn without
    replacement per period from the facts of people who never change."""
    rng = np.random.default_rng(seed)
    pool = world.unchanged_candidates
    out = []
    for k, changes in enumerate(world.twiki_changes):
        pick = rng.choice(len(pool), size=min(unchanged_per_period, len(pool)), replace=False)
        unchanged = tuple(Probe(pool[i].subject, pool[i].relation_label, pool[i].object) for i in sorted(pick))
        out.append(SyntheticPeriod(f"period{k + 1}", tuple(r.evidence for r in changes),
                                   tuple(r.object for r in changes),
                                   tuple(Probe(r.subject, r.relation_label, r.object) for r in changes), unchanged))
    return out
