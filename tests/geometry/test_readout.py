"""The readout accessor W ``[V, d]`` for tied and untied heads, Wᵀg and readout transmission R (§2, §7.1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry.force import force
from cfka_jax.geometry.readout import (
    R_CLAMP,
    probe_transmission,
    ratio,
    readout_matrix,
    readout_projection,
    summarize,
    transmission_evaluator,
    transmission_tokens,
)
from cfka_jax.geometry.tiny import build, qwen_cfg
from tests.tolerances import F32, F64


def _logits_from_w(model, params, net, tokens):
    out = model(tokens)
    w = readout_matrix(params, net.cfg)
    return out.logits, jnp.einsum("bsd,vd->bsv", out.final_hidden, w), w


def test_tied_qwen_readout_is_the_embedding(qwen, tokens):
    model, net, params = qwen
    logits, from_w, w = _logits_from_w(model, params, net, tokens)
    assert w.shape == (37, 24)
    np.testing.assert_array_equal(w, params["embed_tokens"]["embedding"][...])
    np.testing.assert_allclose(from_w, logits, rtol=F32.exact_rtol, atol=F32.op_atol)


def test_untied_heads_return_the_kernel_transposed(pythia, tokens):
    for model in (pythia[0], build(qwen_cfg(tied=False))):
        from cfka_jax.geometry.net import Net

        net, params = Net.split(model)
        logits, from_w, w = _logits_from_w(model, params, net, tokens)
        assert w.shape == (net.cfg.vocab_size, net.cfg.hidden_size)
        np.testing.assert_allclose(from_w, logits, rtol=F32.exact_rtol, atol=F32.op_atol)


def test_projection_is_target_row_minus_mean_row(key):
    w = jax.random.normal(key, (7, 5))
    logits = jax.random.normal(jax.random.fold_in(key, 1), (1, 4, 7))
    tokens = jnp.asarray([[0, 3, 6, 2]], jnp.int32)
    g = force(logits, tokens)[0, 1:]
    pi = jax.nn.softmax(logits[0, :-1], axis=-1)
    np.testing.assert_allclose(readout_projection(w, g), w[tokens[0, 1:]] - pi @ w, rtol=F32.exact_rtol,
                               atol=F32.op_atol)


@pytest.mark.slow  # a float64 property (x64 recompiles every op)
def test_transmission_ignores_a_common_row_shift_and_is_bounded(x64, key):
    """Σ_v g_v = 0, so R is invariant to W + 1cᵀ and R ≤ σ_max(W − 1μᵀ)² (float64 identity)."""
    w = jax.random.normal(key, (11, 6), jnp.float64)
    logits = 3.0 * jax.random.normal(jax.random.fold_in(key, 1), (2, 5, 11), jnp.float64)
    tokens = jax.random.randint(jax.random.fold_in(key, 2), (2, 5), 0, 11)
    g = force(logits, tokens)[:, 1:]
    def r_of(m):
        return ratio(jnp.sum(readout_projection(m, g) ** 2, -1), jnp.sum(g * g, -1))
    shifted = w + 10.0 * jax.random.normal(jax.random.fold_in(key, 3), (1, 6), jnp.float64)
    np.testing.assert_allclose(r_of(shifted), r_of(w), rtol=F64.exact_rtol)
    sigma = jnp.linalg.svd(w - w.mean(axis=0, keepdims=True), compute_uv=False)[0]
    assert bool(jnp.all(r_of(w) <= sigma**2 * (1 + F64.exact_rtol)))
    assert float(jnp.max(r_of(w))) > 0.1 * float(sigma**2)  # the bound is not vacuous here


def test_summary_is_the_mean_of_ratios_and_clamps_zero_force():
    per_token = {"R": np.asarray([1.0, 3.0, 100.0]), "g2": np.asarray([1.0, 1.0, 0.01]),
                 "wtg2": np.asarray([1.0, 3.0, 1.0])}
    out = summarize(per_token, np.asarray([1, 1, 0]))
    assert out["R_mean"] == 2.0 and out["tokens"] == 2.0 and out["g2_mean"] == 1.0  # the masked token is dropped
    assert float(ratio(jnp.asarray(0.0), jnp.asarray(0.0))) == 0.0 and R_CLAMP == 1e-12
    mean_of_ratios = summarize({"R": np.asarray([1.0, 4.0]), "g2": np.asarray([1.0, 0.5]),
                                "wtg2": np.asarray([1.0, 2.0])}, np.ones(2))["R_mean"]
    assert mean_of_ratios == 2.5 and mean_of_ratios != 3.0 / 1.5  # not the ratio of means (pitfall 14)


def test_transmission_tokens_and_the_evaluator(qwen, tokens):
    model, net, params = qwen
    per = jax.jit(lambda p, b: transmission_tokens(p, b, net=net))(params, {"tokens": tokens})
    g = force(model(tokens).logits, tokens)
    wtg = readout_projection(readout_matrix(params, net.cfg), g)
    np.testing.assert_allclose(per["wtg2"], jnp.sum(wtg**2, -1), rtol=F32.exact_rtol, atol=F32.op_atol)
    mask = jnp.zeros_like(tokens, jnp.float32).at[:, 4:].set(1.0)
    batches = [{"tokens": tokens, "target_mask": mask}]
    direct = probe_transmission(params, batches, net=net)
    evaluate = transmission_evaluator({"probe": batches})(net.graphdef, net.rest)
    out = evaluate(params, 0)
    assert set(out) == {f"probe/{k}" for k in ("R_mean", "R_p95", "g2_mean", "wtg2_mean", "tokens")}
    assert out["probe/tokens"] == 15.0 and out["probe/R_mean"] == direct["R_mean"]
    keep = np.asarray(mask) > 0
    np.testing.assert_allclose(out["probe/R_mean"], np.asarray(per["R"])[keep].mean(), rtol=F32.exact_rtol)


def test_readout_geometry_of_a_support_set(x64):
    from cfka_jax.geometry.readout import readout_geometry

    w = np.zeros((6, 3))
    w[1], w[4] = [2.0, 0.0, 0.0], [0.0, 1.0, 0.0]  # W_S W_Sᵀ = diag(4, 1) on S = {1, 4}
    out = readout_geometry(w, [4, 1, 4])
    assert out["trace"] == 5.0 and out["lambda_max"] == 4.0
    p = np.asarray([0.8, 0.2])
    np.testing.assert_allclose(out["effective_rank"], np.exp(-(p * np.log(p)).sum()), rtol=F64.exact_rtol)


def test_normalised_transmission_is_raw_r_over_the_readout_size():
    """Hand-built W: s(W) = ‖W − 1μᵀ‖_F² / (V − 1) by hand, and R / s on a probe's summary."""
    from cfka_jax.geometry.readout import normalized_transmission, readout_size

    w = np.asarray([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0], [0.0, 1.0]], np.float32)  # μ = (1, 1)
    centred = np.asarray([[0.0, -1.0], [-1.0, 1.0], [2.0, 0.0], [-1.0, 0.0]])
    assert readout_size(w) == pytest.approx(float((centred**2).sum()) / 3.0, rel=F32.exact_rtol)  # 8 / 3
    assert readout_size(w + 5.0) == pytest.approx(readout_size(w), rel=F32.exact_rtol)  # a common row shift
    assert readout_size(3.0 * w) == pytest.approx(9.0 * readout_size(w), rel=F32.exact_rtol)
    per_token = {"R": np.asarray([2.0, 6.0, 50.0]), "g2": np.ones(3), "wtg2": np.asarray([2.0, 6.0, 50.0])}
    out = normalized_transmission(summarize(per_token, np.asarray([1, 1, 0])), 8.0 / 3.0)
    assert out["R_norm_mean"] == pytest.approx(4.0 / (8.0 / 3.0)) and out["readout_size"] == 8.0 / 3.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="readout size"):
            normalized_transmission({"R_mean": 1.0, "R_p95": 1.0}, bad)
    with pytest.raises(ValueError, match="at least 2 rows"):
        readout_size(np.ones((1, 3), np.float32))


def test_readout_size_is_the_mean_r_of_an_isotropic_sum_zero_force():
    """E[R] over g uniform on the unit sphere of {Σ g = 0} equals s(W) (Monte Carlo, 20k draws, float64)."""
    from cfka_jax.geometry.readout import readout_size

    rng = np.random.default_rng(0)
    w = rng.normal(size=(9, 4)) * np.asarray([3.0, 1.0, 0.5, 0.1]) + 2.0
    g = rng.normal(size=(20_000, 9))
    g -= g.mean(axis=1, keepdims=True)
    r = np.sum((g @ w) ** 2, axis=1) / np.sum(g * g, axis=1)
    # the Monte Carlo mean's standard error is about 1 % of s here; 5 % is a 5-sigma band
    assert r.mean() == pytest.approx(readout_size(w.astype(np.float32)), rel=0.05)
