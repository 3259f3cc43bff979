"""The learning-rate selection rule of the TAALM lr study (``experiments/taalm_lr.py``) and the verdict of claim
``taalm.lr-selection`` built on it.

The rule, the same for every method: each method's lr is the argmax over the swept lrs of the seeds' mean
**selection** metric (Total Knowledge, Top Acc + NF Acc at the epoch of Top Acc, spec §5.6, measured on the
selection split: every ``k``-th TO-LEARN and NOT-TO-FORGET fact, scored in the same runs but never reported); only
the seeds every lr of that method has count, and a tie (equal means to 1e-9) goes to the smaller lr. The reported
table is the **test** split (the other facts) at each method's chosen lr.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

SELECTION, TEST = "selection", "test"
SELECT_METRIC = "total"
"""The selection metric: Total Knowledge on the selection split."""


@dataclasses.dataclass(frozen=True)
class LRChoice:
    """One method's chosen lr, the mean selection metric of every swept lr, and the seeds behind the means."""

    lr: float
    means: Mapping[float, float]
    seeds: tuple[int, ...]


def select_lr(rows: Iterable[Mapping], *, metric: str = SELECT_METRIC, split: str = SELECTION
              ) -> dict[str, LRChoice]:
    """Each method's lr by the one rule (module docstring) from rows carrying ``method``, ``lr``, ``seed``,
    ``split`` and ``metric``.

    Raises:
      ValueError: a (method, lr, seed) of the split given twice, or a method whose lrs share no seed.
    """
    table: dict[str, dict[float, dict[int, float]]] = {}
    for row in rows:
        if row.get("split") != split or row.get(metric) is None:
            continue
        cell = table.setdefault(row["method"], {}).setdefault(float(row["lr"]), {})
        if row["seed"] in cell:
            raise ValueError(f"{row['method']} lr {row['lr']} seed {row['seed']}: two {split} rows")
        cell[row["seed"]] = float(row[metric])
    out = {}
    for method, by_lr in table.items():
        seeds = set.intersection(*(set(v) for v in by_lr.values()))
        if not seeds:
            raise ValueError(f"{method}: its lrs share no seed ({ {lr: sorted(v) for lr, v in by_lr.items()} })")
        means = {lr: sum(v[s] for s in seeds) / len(seeds) for lr, v in sorted(by_lr.items())}
        best = max(means.values())
        lr = min(lr for lr, m in means.items() if m >= best - 1e-9)
        out[method] = LRChoice(lr, means, tuple(sorted(seeds)))
    return out


def at_chosen(rows: Iterable[Mapping], chosen: Mapping[str, LRChoice], *, split: str = TEST) -> list[dict]:
    """The ``split`` rows of each method at its chosen lr and seeds (the reported table)."""
    return [dict(r) for r in rows if r.get("split") == split and r["method"] in chosen
            and float(r["lr"]) == chosen[r["method"]].lr and r["seed"] in chosen[r["method"]].seeds]


def describe(chosen: Mapping[str, LRChoice], methods: Iterable[str] | None = None) -> str:
    """``"Finetune 1e-02, TAALM 3e-03"``: the chosen lr of ``methods`` (default: all)."""
    names = [m for m in (methods or chosen) if m in chosen]
    return ", ".join(f"{m} {chosen[m].lr:.0e}" for m in names)
