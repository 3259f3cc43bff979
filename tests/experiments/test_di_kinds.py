"""experiments/di_kinds.py: the per-layer-kind rows keep linear and full-attention layers apart."""

import numpy as np
import pytest

from cfka_jax.experiments import di_kinds as dk
from cfka_jax.lm_theory.stats import pearson


def _arrays(rng, e=3, l=3, n=2, m=40):
    di = rng.normal(size=m)
    z = rng.random((e, l, n, m))
    z[:, 0] = -di[None, None, :] + 0.01 * rng.normal(size=(e, n, m))  # layer 0 (linear) follows −DI
    return {"z_context_ELNM": z, "z_init_context_ELNM": rng.random((e, l, n, m)),
            "context_eligible": np.arange(m) % 5 != 0, "context_di_centred_cooccur": di}


def test_rows_per_seed_kind_and_layer():
    a = _arrays(np.random.default_rng(0))
    kinds = ("linear_attention", "linear_attention", "full_attention")
    held = [{"seed": s, "Original/sFTA": 0.5, "Original/hFTA": 0.4, "Original/EM": 0.1} for s in (0, 1, 2)]
    rows = dk.kind_rows(a, kinds, (0, 1, 2), held, num_boot=20)
    keep = a["context_eligible"]
    layer0 = [r for r in rows if r.get("layer") == 0]
    assert [r["seed"] for r in layer0] == [0, 1, 2] and all(r["kind"] == "linear_attention" for r in layer0)
    assert layer0[0]["pearson"] == pytest.approx(pearson(a["context_di_centred_cooccur"][keep],
                                                         a["z_context_ELNM"][0, 0].mean(0)[keep]))
    assert layer0[0]["pearson"] < -0.99
    full = [r for r in rows if r.get("kind") == "full_attention" and r["layer"] == "pooled" and r["seed"] == 1]
    want = pearson(a["context_di_centred_cooccur"][keep], a["z_context_ELNM"][1, 2].mean(0)[keep])
    assert len(full) == 1 and full[0]["pearson"] == pytest.approx(want)  # the full layer alone, no linear mixed in
    lin = [r for r in rows if r.get("kind") == "linear_attention" and r["seed"] == "mean"]
    assert {r["ports"] for r in lin} == {"trained", "untrained"}
    assert all(r["token_types"] == keep.sum() for r in rows if "kind" in r)
    assert [r["heldout_sfta"] for r in rows if r.get("summary") == "held-out"] == [0.5] * 3
    assert "| linear_attention | trained | 0 | 0 |" in dk.table(rows)


def test_layer_count_must_match_the_kinds():
    with pytest.raises(ValueError, match="layer kinds"):
        dk.kind_rows(_arrays(np.random.default_rng(1)), ("full_attention",) * 2, (0, 1, 2), [], num_boot=5)


def test_record_needs_the_context_measure():
    from cfka_jax.experiments import di_attention as da
    with pytest.raises(ValueError, match="context"):
        da.Config(record="results", measures=("fact",))
    assert da.parse(["--out", "o", "--record", "results", "--arch", "qwen3_5"]).record == "results"
