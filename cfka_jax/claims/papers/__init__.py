"""The registry of the three papers' claims: each a statement, its regime, the experiment here and a verdict rule.

One :class:`PaperClaim` per headline claim, in ``cfka.py`` (the cFKA/STOC paper: Biography, KnowEdit, LMs),
``cfka_theory.py`` (its continual claims judged in the theory model: replay, EWC, oscillation),
``taalm.py`` (TAALM: LAMA-CKL, TemporalWiki, ablations) and ``token_force.py`` (attribution, energy,
collision/erosion, format isolation, transmission, resets, cold start); the lemma rows come from the record
``cfka proofs --record`` writes (``lemmas.py``). A claim's verdict is a pure function of the result records it names
(``rule(records) -> Judgement``, ``claims/verdicts.py``), so the table is re-derived, never typed.

Adding a claim: one ``PaperClaim(...)`` in its paper's tuple, with the records it reads and a rule built from the
helpers in ``claims/verdicts.py``; a claim nothing here measures has ``records=()`` and a rule returning
``not_tested("what it would take")``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Literal

from cfka_jax.claims.results import Record
from cfka_jax.claims.verdicts import Judgement

Paper = Literal["cfka", "taalm", "token-force"]
PAPERS: tuple[Paper, ...] = ("cfka", "taalm", "token-force")
PAPER_TITLES = {"cfka": "cFKA / STOC (Wang et al., ICML 2026)", "taalm": "TAALM / Train-Attention",
                "token-force": "Token force: one-step influence, attribution, forgetting"}
Kind = Literal["lemma", "empirical"]


@dataclasses.dataclass(frozen=True)
class PaperClaim:
    """One claim of a paper and how this project judges it.

    Attributes:
      id: stable identifier, ``<paper>.<short-name>`` (``cfka.stoc-vs-random``).
      paper: ``cfka`` / ``taalm`` / ``token-force``.
      section: where the paper states it (section, table or figure).
      statement: the paper's statement, in its own terms (not a paraphrase that is easier to test).
      paper_value: the paper's numbers ("STOC 71.6 vs Random 37.8 Original sFTA"), "" when it gives none.
      paper_regime: the paper's model, size, data and dose.
      command: the exact command here that produces the records ("" when not tested).
      records: names of the records the rule reads (``results/<name>.json``).
      rule: ``rule(records) -> Judgement``; receives exactly the records named in ``records``.
      kind: ``empirical`` or ``lemma``.
      headline: one of the findings the README's summary lists.
      explanation: where we differ from the paper and which experiment shows why (a docs link or a sentence).
      accelerator: for a claim whose records hold fewer than three seeds because the runs that would add them
        do not fit the project's CPU machine: the command that adds them on an accelerator ("" otherwise). The
        verdict table shows it beside the seed count; a claim on one seed must name it.
      context: names of records the rule also receives to show beside its verdict (a study outside the paper's
        regime, or on too few seeds to decide) but which do not decide it: they count toward neither the claim's
        seeds and PT replicates nor its origin and regime. The rule must not let them change the verdict.
    """

    id: str
    paper: Paper
    section: str
    statement: str
    paper_value: str
    paper_regime: str
    command: str
    records: tuple[str, ...]
    rule: Callable[[Mapping[str, Record]], Judgement]
    kind: Kind = "empirical"
    headline: bool = False
    explanation: str = ""
    accelerator: str = ""
    context: tuple[str, ...] = ()

    def __post_init__(self):
        if self.paper not in PAPERS:
            raise ValueError(f"claim {self.id}: paper must be one of {PAPERS}, got {self.paper!r}")
        if not self.id.startswith(("cfka.", "taalm.", "token-force.")):
            raise ValueError(f"claim id {self.id!r} must start with its paper ('cfka.', 'taalm.', 'token-force.')")
        if self.records and not self.command:
            raise ValueError(f"claim {self.id}: a claim that reads records names the command that makes them")
        if set(self.context) & set(self.records):
            raise ValueError(f"claim {self.id}: a record is either read for the verdict or shown as context, not "
                             f"both: {sorted(set(self.context) & set(self.records))}")
        if not self.statement or not self.section:
            raise ValueError(f"claim {self.id}: a statement and the paper's section are required")


def paper_claims() -> tuple[PaperClaim, ...]:
    """Every registered empirical claim of the three papers, in paper order; ids are unique."""
    from cfka_jax.claims.papers import cfka, cfka_theory, taalm, token_force

    claims = (*cfka.CLAIMS, *cfka_theory.CLAIMS, *taalm.CLAIMS, *token_force.CLAIMS)
    seen = set()
    for c in claims:
        if c.id in seen:
            raise ValueError(f"claim id {c.id!r} registered twice")
        seen.add(c.id)
    return claims
