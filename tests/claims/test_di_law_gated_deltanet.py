"""The verdict rule of cfka.di-law-gated-deltanet (``claims/papers/cfka_di_rules.py``) on hand-made records."""

from cfka_jax.claims.papers import cfka_di_rules as di
from cfka_jax.claims.results import PRODUCED_KEYS, Record

PROVENANCE = {k: "x" for k in PRODUCED_KEYS}


def _rec(linear, full, sfta=0.8, width=0.05):
    rows = []
    for kind, values in (("linear_attention", linear), ("full_attention", full)):
        for seed, p in [*enumerate(values), ("mean", sum(values) / len(values))]:
            rows.append({"seed": seed, "kind": kind, "layer": "pooled", "ports": "trained", "pearson": p,
                         "pearson_lo": p - width, "pearson_hi": p + width})
        rows.append({"seed": "mean", "kind": kind, "layer": "pooled", "ports": "untrained", "pearson": 0.1,
                     "pearson_lo": 0.0, "pearson_hi": 0.2})
    rows += [{"summary": "held-out", "seed": s, "heldout_sfta": sfta} for s in range(len(linear))]
    return {di.DI_QWEN35: Record(di.DI_QWEN35, "produced", PROVENANCE, {}, tuple(rows))}


def test_each_kind_is_judged_apart():
    j = di.di_law_gated_deltanet(_rec([-0.9, -0.85, -0.95], [0.3, 0.4, 0.2]))
    assert j.verdict == "partly"
    assert "Gated DeltaNet layers: holds" in j.reason and "full-attention layers: refuted" in j.reason
    assert "opposite sign" in j.reason and "held-out sFTA 0.80" in j.ours


def test_mixed_seeds_and_both_refuted():
    j = di.di_law_gated_deltanet(_rec([-0.9, -0.5, -0.95], [-0.5, -0.6, -0.4]))
    assert "Gated DeltaNet layers: not reproduced" in j.reason and "full-attention layers: refuted" in j.reason
    assert di.di_law_gated_deltanet(_rec([0.2, 0.1, 0.3], [-0.5, -0.6, -0.4])).verdict == "refuted"


def test_off_regime_or_few_seeds_decide_nothing():
    assert di.di_law_gated_deltanet(_rec([-0.9] * 3, [-0.9] * 3, sfta=0.3)).verdict == "not tested"
    j = di.di_law_gated_deltanet(_rec([-0.9] * 2, [-0.9] * 2))
    assert j.verdict == "not tested" and "fewer than 3" in j.reason
    assert di.di_law_gated_deltanet(_rec([-0.9] * 3, [-0.9] * 3)).verdict == "holds"
