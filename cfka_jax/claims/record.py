"""The claim record: one row of a proofs table, and the three verdicts that make one.

A claim compares one measured number with a bound fixed in advance:

* PASS    — a claim the project (or you) makes, measured within its tolerance;
* FAIL    — such a claim, measured outside its tolerance;
* REFUTED — a formula *as quoted* elsewhere, measured to be off by more than the tolerance one would need to
            accept it. A REFUTED row is a claim too ("the quoted form does not hold"): should the quoted form hold
            after all, the row turns FAIL, because the text that calls it wrong would then be wrong.

``holds`` (measured ≤ tolerance), ``at_least`` (measured ≥ bound) and ``refuted`` (measured > tolerance) are the
only constructors a check needs; the helpers in ``claims/checks.py`` measure the recurring shapes and call them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import jax

Status = Literal["PASS", "FAIL", "REFUTED"]
STATUSES: tuple[Status, ...] = ("PASS", "FAIL", "REFUTED")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One row of the proofs table.

    Attributes:
      lemma: short name of the lemma (e.g. 'conservation'); rows of one lemma share it.
      statement: what is asserted, in words (the table's 'claim' column).
      measured: the measured error or statistic.
      tolerance: the bound ``measured`` is compared with (fixed before measuring, with its reason in the check).
      status: 'PASS', 'FAIL' or 'REFUTED'.
      detail: numbers that explain the row (free text).
      quoted: the quoted form this row replaces or refutes, when there is one (free text).
      id: a stable identifier, '<lemma>.<n>' unless the check sets one (assigned by ``Registry.run``).
      check: the name of the check that produced the row (assigned by ``Registry.run``).
    """

    lemma: str
    statement: str
    measured: float
    tolerance: float
    status: Status
    detail: str = ""
    quoted: str = ""
    id: str = ""
    check: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"claim {self.statement!r}: status must be one of {STATUSES}, got {self.status!r}")
        if not self.lemma or not self.statement:
            raise ValueError(f"a claim needs a lemma and a statement, got {self.lemma!r}, {self.statement!r}")
        if self.status != "FAIL" and not (math.isfinite(self.measured) and math.isfinite(self.tolerance)):
            raise ValueError(f"claim {self.statement!r}: status {self.status} with measured {self.measured} and "
                             f"tolerance {self.tolerance}: a non-finite measurement or bound can only FAIL")

    @property
    def claim(self) -> str:
        """The statement (the name of the table column)."""
        return self.statement


def _number(measured) -> float:
    """float(measured); a NaN compares False both ways, so a NaN measurement is FAIL in every verdict."""
    return float(measured)


def holds(lemma: str, statement: str, measured, tolerance: float, detail: str = "", *, quoted: str = "",
          id: str = "") -> Claim:
    """A claim of the form measured ≤ tolerance: PASS iff it holds."""
    m = _number(measured)
    return Claim(lemma, statement, m, float(tolerance), "PASS" if m <= tolerance else "FAIL", detail, quoted, id)


def at_least(lemma: str, statement: str, measured, bound: float, detail: str = "", *, quoted: str = "",
             id: str = "") -> Claim:
    """A claim of the form measured ≥ bound (reported with tolerance = bound): PASS iff it holds."""
    m = _number(measured)
    return Claim(lemma, statement, m, float(bound), "PASS" if m >= bound else "FAIL", detail, quoted, id)


def refuted(lemma: str, statement: str, measured, tolerance: float, detail: str = "", *, quoted: str = "",
            id: str = "") -> Claim:
    """A quoted form said not to hold: REFUTED iff its error exceeds ``tolerance`` (else FAIL)."""
    m = _number(measured)
    status = "REFUTED" if m > tolerance else "FAIL"
    return Claim(lemma, statement, m, float(tolerance), status, detail, quoted or statement, id)


def counts(claims: list[Claim]) -> dict[str, int]:
    """{'claims': N, 'PASS': ..., 'REFUTED': ..., 'FAIL': ...}."""
    out = {"claims": len(claims)}
    out.update({s: sum(c.status == s for c in claims) for s in STATUSES})
    return out


def summary(claims: list[Claim]) -> str:
    """'70 claims: 59 PASS, 11 REFUTED (quoted forms that do not hold), 0 FAIL'."""
    n = counts(claims)
    return (f"{n['claims']} claims: {n['PASS']} PASS, {n['REFUTED']} REFUTED (quoted forms that do not hold), "
            f"{n['FAIL']} FAIL")


def require_x64() -> None:
    """Claims separate maths from rounding: they are measured in float64 only."""
    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError("proof checks need float64: run with JAX_ENABLE_X64=1, inside `jax.enable_x64(True)`, "
                           "or through `cfka proofs`")
