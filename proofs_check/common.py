"""The proof checks' shared entry point; the claim record and verdicts live in the public ``cfka_jax.claims``.

A check script exposes ``run(out_dir: pathlib.Path) -> list[Claim]`` and a ``__main__`` that prints its rows and
exits non-zero on any FAIL. Statuses (``cfka_jax/claims/record.py``):

* PASS    — a claim the project makes, measured within tolerance;
* FAIL    — a claim the project makes, not within tolerance;
* REFUTED — a formula *as quoted* by the spec, measured to be off by more than the tolerance the project
            would need to accept it. REFUTED rows are claims too ("the quoted form does not hold"): if the
            quoted form were to hold after all, the row becomes FAIL, because the docs would then be wrong.
"""

from __future__ import annotations

import pathlib
import sys

import jax

from cfka_jax.claims import Claim, at_least, format_table, holds, refuted, require_x64, save_figure

__all__ = ["Claim", "at_least", "format_table", "holds", "main_for", "refuted", "require_x64", "save_figure"]


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
