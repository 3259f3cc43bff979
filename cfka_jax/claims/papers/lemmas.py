"""The lemma rows of the verdict table, read from the record ``cfka proofs --record results`` writes.

Every row of ``cfka proofs`` (closed form vs simulation in float64) becomes one claim of kind ``lemma``: PASS is
``holds``; REFUTED (a formula as quoted by the paper or the spec, measured not to hold, next to the form that does)
is ``refuted``; FAIL (a claim of ours outside its tolerance) is ``not reproduced``. The checks of token-force
geometry (``check_geometry_*``) belong to the token-force paper, the others to the cFKA paper.
"""

from __future__ import annotations

from cfka_jax.claims.papers import PaperClaim
from cfka_jax.claims.results import Record
from cfka_jax.claims.verdicts import Judgement

RECORD = "lemmas/proofs"
"""The record's name (``results/lemmas/proofs.json``)."""
COMMAND = "cfka proofs --out runs/proofs --record results"
VERDICT = {"PASS": "holds", "REFUTED": "refuted", "FAIL": "not reproduced"}


def _paper(check: str) -> str:
    return "token-force" if check.startswith("check_geometry") else "cfka"


def _rule(row):
    def rule(records) -> Judgement:
        measured = float(row["measured"])
        relation = "≤" if row["status"] != "REFUTED" else ">"
        reason = {"PASS": "closed form vs simulation within its tolerance",
                  "REFUTED": "the form as quoted is off by more than any tolerance that would accept it",
                  "FAIL": "outside its tolerance"}[row["status"]]
        return Judgement(VERDICT[row["status"]], f"{reason} ({row['check']})",
                         f"{measured:.3g} {relation} {float(row['tolerance']):.1g}")
    return rule


def lemma_claims(record: Record | None) -> tuple[PaperClaim, ...]:
    """One ``lemma`` claim per row of the proofs record (none when the record is absent)."""
    if record is None:
        return ()
    out = []
    for row in record.rows:
        for key in ("id", "check", "lemma", "statement", "measured", "tolerance", "status"):
            if key not in row:
                raise ValueError(f"{record.path or record.name}: a lemma row lacks {key!r}: {row}")
        paper = _paper(row["check"])
        out.append(PaperClaim(
            id=f"{paper}.lemma.{row['id']}", paper=paper, section=f"lemma {row['lemma']}",
            statement=row["statement"], paper_value=row.get("quoted", "") or "", paper_regime="theory",
            command=COMMAND, records=(RECORD,), rule=_rule(row), kind="lemma"))
    return tuple(out)
