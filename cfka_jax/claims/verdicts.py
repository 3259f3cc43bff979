"""Verdicts on the papers' claims, and the spread rule every verdict rule uses.

A paper's claim gets one of five verdicts (:data:`VERDICTS`):

* ``holds``          — the paper's statement, in its own terms, is what we measure, beyond the seed spread;
* ``partly``         — its direction holds but not its size, or it holds in some of the regimes it names, or it
                       holds on a spread that cannot yet separate it from no effect (one seed);
* ``not reproduced`` — the effect is absent here: the difference is inside the spread, or its sign is the other;
* ``refuted``        — the statement is wrong as written, measured beyond the spread (or, for a lemma, a quoted
                       form that does not hold);
* ``not tested``     — nothing here measures it (the reason says what it would take).

**The spread rule.** A difference between two sets of runs counts only when the runs are apart: with at least two
runs on each side (seeds, PT replicates, or both), every run of one side is above every run of the other
(:func:`gap`: the ranges do not overlap). With one run on a side the spread is unknown: a rule may call the
direction ``partly`` at best, never ``holds``. The rule is deliberately a range test, not a t-test: with 2–3 runs
per side a range that does not overlap is the least a reader would accept as "different", and it needs no
distributional assumption.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

Verdict = Literal["holds", "partly", "not reproduced", "refuted", "not tested"]
VERDICTS: tuple[Verdict, ...] = ("holds", "partly", "not reproduced", "refuted", "not tested")


@dataclasses.dataclass(frozen=True)
class Judgement:
    """What a verdict rule returns.

    Attributes:
      verdict: one of :data:`VERDICTS`.
      reason: one line: why, with the numbers that decide it.
      ours: our number(s) with their spread, as the table shows them ("" for not tested).
    """

    verdict: Verdict
    reason: str
    ours: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not self.reason or "\n" in self.reason:
            raise ValueError(f"a verdict needs a one-line reason, got {self.reason!r}")


@dataclasses.dataclass(frozen=True)
class Spread:
    """The values of one side of a comparison: their mean, range and count."""

    values: tuple[float, ...]

    def __post_init__(self):
        if not self.values:
            raise ValueError("a spread of no values")
        if not all(math.isfinite(v) for v in self.values):
            raise ValueError(f"a spread of non-finite values {self.values}")

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def lo(self) -> float:
        return min(self.values)

    @property
    def hi(self) -> float:
        return max(self.values)

    def show(self, digits: int = 1) -> str:
        """'58.8 (58.2–59.4, n=2)', or '47.0 (n=1)'."""
        if self.n == 1:
            return f"{self.mean:.{digits}f} (n=1)"
        return f"{self.mean:.{digits}f} ({self.lo:.{digits}f}–{self.hi:.{digits}f}, n={self.n})"


def spread(values: Sequence[float]) -> Spread:
    return Spread(tuple(float(v) for v in values))


@dataclasses.dataclass(frozen=True)
class Cell:
    """One metric of one cell of replicated runs: ``runs`` over every run (row) of the cell, ``by_pt`` each PT
    model's runs (keyed by the rows' ``pt``, ``None`` where a row names none, in first-seen order), ``seeds`` the
    number of distinct seeds."""

    factors: dict
    metric: str
    runs: Spread
    by_pt: dict
    seeds: int


def cells(rows: Sequence[Mapping[str, Any]], factors: Sequence[str], metrics: Sequence[str]) -> list[Cell]:
    """Rows grouped by their values of ``factors`` (first-seen order), one :class:`Cell` per group and metric.
    Rows lacking a metric are left out of it; a group without it has no cell for it. The one grouping behind a
    replicate study's summary (``experiments/replicates.summary``) and a record's docs table
    (``claims/table.record_markdown``)."""
    def key(r):
        return tuple(r.get(f) for f in factors)

    out = []
    for value in dict.fromkeys(key(r) for r in rows):
        members = [r for r in rows if key(r) == value]
        for metric in metrics:
            have = [r for r in members if r.get(metric) is not None]
            if not have:
                continue
            by_pt: dict[Any, list[float]] = {}
            for r in have:
                by_pt.setdefault(r.get("pt"), []).append(float(r[metric]))
            out.append(Cell(dict(zip(factors, value)), metric, spread([r[metric] for r in have]),
                            {pt: spread(vals) for pt, vals in by_pt.items()},
                            len({r.get("seed") for r in have} - {None})))
    return out


class _Comparison:
    """What :func:`ordered` reads of a comparison: ``diff`` (a − b) and ``apart`` (True / False / None)."""

    diff: float
    apart: bool | None

    @property
    def a_above(self) -> bool:
        """``a`` above ``b`` beyond the spread."""
        return bool(self.apart) and self.diff > 0

    @property
    def b_above(self) -> bool:
        """``b`` above ``a`` beyond the spread."""
        return bool(self.apart) and self.diff < 0


@dataclasses.dataclass(frozen=True)
class Gap(_Comparison):
    """``a`` against ``b`` under the spread rule.

    Attributes:
      a, b: the two sides.
      diff: mean(a) − mean(b).
      apart: True when both sides have ≥ 2 runs and their ranges do not overlap; False when both have ≥ 2 runs
        and the ranges overlap; None when a side has one run (the spread is unknown).
    """

    a: Spread
    b: Spread
    diff: float
    apart: bool | None

    def show(self, digits: int = 1) -> str:
        where = {True: "apart", False: "ranges overlap", None: "one run: spread unknown"}[self.apart]
        return f"{self.a.show(digits)} vs {self.b.show(digits)}, {self.diff:+.{digits}f}, {where}"


def gap(a: Sequence[float] | Spread, b: Sequence[float] | Spread) -> Gap:
    """``a`` against ``b`` (see :class:`Gap`)."""
    a = a if isinstance(a, Spread) else spread(a)
    b = b if isinstance(b, Spread) else spread(b)
    apart = None if min(a.n, b.n) < 2 else (a.lo > b.hi or b.lo > a.hi)
    return Gap(a, b, a.mean - b.mean, apart)


@dataclasses.dataclass(frozen=True)
class Paired(_Comparison):
    """``a`` against ``b`` run by run: the differences of matched runs (same PT model, same seed).

    The between-PT spread of one method can exceed the difference between methods while every PT model orders
    them the same way; pairing removes what the two sides share. ``apart`` is True when there are ≥ 2 pairs and
    every difference has the same sign, None with one pair, False otherwise.
    """

    diffs: Spread
    keys: tuple

    @property
    def diff(self) -> float:
        return self.diffs.mean

    @property
    def apart(self) -> bool | None:
        if self.diffs.n < 2:
            return None
        return self.diffs.lo > 0 or self.diffs.hi < 0

    def show(self, digits: int = 1) -> str:
        where = {True: "every pair the same sign", False: "pairs of both signs", None: "one pair"}[self.apart]
        return (f"paired difference {self.diff:+.{digits}f} ({self.diffs.lo:+.{digits}f} … {self.diffs.hi:+.{digits}f}, "
                f"{self.diffs.n} pairs: {where})")


def paired(rows, metric: str, a: dict, b: dict, by: tuple[str, ...] = ("pt", "seed")) -> Paired:
    """The run-by-run differences ``metric(a) − metric(b)`` over the rows (mappings) matched on ``by``.

    Raises:
      ValueError: no run of ``a`` has a matching run of ``b``.
    """
    def pick(sel):
        out = {}
        for r in rows:
            if all(r.get(k) == v for k, v in sel.items()) and r.get(metric) is not None:
                out[tuple(r.get(k) for k in by)] = float(r[metric])
        return out
    xa, xb = pick(a), pick(b)
    keys = tuple(sorted(set(xa) & set(xb), key=str))
    if not keys:
        raise ValueError(f"no run of {a} matches a run of {b} on {by} for {metric!r}")
    return Paired(spread([xa[k] - xb[k] for k in keys]), keys)


def ordered(g: Gap | Paired, *, claim: str, size: float | None = None, digits: int = 1) -> Judgement:
    """The verdict on "a is above b" (by at least ``size`` for ``holds`` when given) under the spread rule.

    * a above b beyond the spread (and by ≥ ``size``): holds; beyond the spread but smaller than ``size``: partly;
    * a above b with one run on a side: partly (direction only);
    * ranges overlap: not reproduced; b above a beyond the spread: refuted.
    """
    shown = g.show(digits)
    if g.a_above:
        if size is not None and g.diff < size:
            return Judgement("partly", f"{claim}: apart, but {g.diff:.{digits}f} < the paper's {size:.{digits}f}",
                             shown)
        return Judgement("holds", f"{claim}: beyond the spread", shown)
    if g.apart is None:
        if g.diff > 0:
            return Judgement("partly", f"{claim}: in the direction the paper states, on one run (spread unknown)",
                             shown)
        return Judgement("not reproduced", f"{claim}: the other way round, on one run (spread unknown)", shown)
    if g.b_above:
        return Judgement("refuted", f"{claim}: the other way round, beyond the spread", shown)
    return Judgement("not reproduced", f"{claim}: the difference is inside the spread", shown)


def not_tested(reason: str) -> Judgement:
    """The verdict of a row nothing here measures; ``reason`` says what it would take."""
    return Judgement("not tested", reason)
