"""Shared result type and helpers for the proof checks.

A check script exposes ``run(out_dir: pathlib.Path) -> list[Claim]`` and a ``__main__`` that prints its rows and
exits non-zero on any FAIL. Statuses:

* PASS    — a claim the project makes, measured within tolerance;
* FAIL    — a claim the project makes, not within tolerance;
* REFUTED — a formula *as quoted* by the spec, measured to be off by more than the tolerance the project
            would need to accept it. REFUTED rows are claims too ("the quoted form does not hold"): if the
            quoted form were to hold after all, the row becomes FAIL, because the docs would then be wrong.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import jax


@dataclasses.dataclass(frozen=True)
class Claim:
    """One row of the proofs table.

    Attributes:
      lemma: short id of the lemma (e.g. 'conservation').
      claim: what is asserted, in words.
      measured: the measured error (or statistic).
      tolerance: the bound the measured value is compared with.
      status: 'PASS', 'FAIL' or 'REFUTED'.
      detail: numbers that explain the row (free text).
    """

    lemma: str
    claim: str
    measured: float
    tolerance: float
    status: str
    detail: str = ""


def holds(lemma: str, claim: str, measured, tolerance: float, detail: str = "") -> Claim:
    """A project claim: PASS iff measured ≤ tolerance."""
    m = float(measured)
    return Claim(lemma, claim, m, tolerance, "PASS" if m <= tolerance else "FAIL", detail)


def refuted(lemma: str, claim: str, measured, tolerance: float, detail: str = "") -> Claim:
    """A quoted formula the project says does not hold: REFUTED iff its error exceeds ``tolerance``."""
    m = float(measured)
    return Claim(lemma, claim, m, tolerance, "REFUTED" if m > tolerance else "FAIL", detail)


def at_least(lemma: str, claim: str, measured, bound: float, detail: str = "") -> Claim:
    """A project claim of the form measured ≥ bound (reported with tolerance = bound)."""
    m = float(measured)
    return Claim(lemma, claim, m, bound, "PASS" if m >= bound else "FAIL", detail)


def require_x64() -> None:
    """Proof checks separate maths from rounding: they run in float64 only."""
    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError("proof checks need float64: run with JAX_ENABLE_X64=1 (or through `cfka proofs`)")


def format_table(claims: list[Claim]) -> str:
    """Plain-text table: lemma | claim | measured | tolerance | status."""
    rows = [("lemma", "claim", "measured", "tolerance", "status")]
    rows += [(c.lemma, c.claim, f"{c.measured:.3e}", f"{c.tolerance:.1e}", c.status) for c in claims]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main_for(run, default_out: str) -> None:
    """Entry point body shared by the check scripts: run, print the table, exit 1 on FAIL."""
    jax.config.update("jax_enable_x64", True)
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else default_out)
    out.mkdir(parents=True, exist_ok=True)
    claims = run(out)
    print(format_table(claims))
    for c in claims:
        if c.detail:
            print(f"[{c.lemma}] {c.detail}")
    sys.exit(1 if any(c.status == "FAIL" for c in claims) else 0)


def save_figure(fig, out_dir: pathlib.Path, name: str) -> pathlib.Path:
    """Writes ``fig`` as ``out_dir/name.png`` and closes it."""
    import matplotlib.pyplot as plt

    path = pathlib.Path(out_dir) / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
