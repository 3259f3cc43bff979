"""The cFKA / STOC paper's empirical claims: Biography replay (STOC, LAMOL, Random), EWC, LoRA/freeze, KnowEdit,
the DI–attention link on trained LMs.

Paper: Wang et al., ICML 2026 (spec: shared/spec/cfka_stoc.md; §9 lists the reported results). Each rule reads the
records it names (``results/cfka/*.json``) and judges the paper's own statement under the spread rule of
``claims/verdicts.py``.
"""

from __future__ import annotations

from cfka_jax.claims.papers import PaperClaim
from cfka_jax.claims.verdicts import Judgement, ordered, paired

STOC_REGIME = "python -m cfka_jax.experiments.stoc_regime --train --no-progress"


def _stoc_vs_random(records) -> Judgement:
    rec = records["cfka/stoc_names600"]
    pair = paired(rec.rows, "original_sfta", {"kind": "stoc"}, {"kind": "random"})
    j = ordered(pair, claim="STOC above Random on every PT model and seed", size=33.8)
    return Judgement(j.verdict, j.reason + " (paper 51.5 vs 17.7; Random keeps 2.7× naive here)", j.ours)


CLAIMS: tuple[PaperClaim, ...] = (
    PaperClaim(
        id="cfka.stoc-vs-random", paper="cfka", section="§5, Table 2 (Biography, replay kinds)",
        statement="STOC replay retains far more of the old (Original) knowledge than Random replay",
        paper_value="Original sFTA: STOC 51.5, Random 17.7 (LAMOL 19.9)",
        paper_regime="Pythia-160M, 100k PT + 20k CPT people, α = 0.5, full update",
        command=f"cfka pt --preset names600 --out PT600; {STOC_REGIME} --sources 400 --preset names600 "
                "--pt-dir PT600 --out REG600 --seeds 0,1 --kinds stoc_j1,random,lamol --naive",
        records=("cfka/stoc_names600",), rule=_stoc_vs_random, headline=True,
        explanation="docs/stoc.md: the gap replicates on three PT models but is 13–20× smaller; Random keeps "
                    "2.7× what naive keeps (21.4–21.6), so the paper's Random collapse is absent here."),
)
