"""Energy-threshold masking as the engine's ``loss_fn`` (spec §5.3; pitfalls 22, 23)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfka_jax.geometry.energy import (
    EnergyMaskConfig,
    energy_masked_loss,
    energy_stats,
    histogram,
    make_energy_loss,
)
from cfka_jax.geometry.force import energy
from cfka_jax.train.step import Loss, init_state, make_train_step, token_nll_loss
from tests.tolerances import F32


@pytest.fixture
def batch(key):
    logits = 3.0 * jax.random.normal(key, (3, 8, 13))
    tokens = jax.random.randint(jax.random.fold_in(key, 1), (3, 8), 0, 13)
    mask = jnp.ones((3, 8), jnp.float32).at[:, :3].set(0.0).at[2, 6:].set(0.0)
    return logits, {"tokens": tokens, "target_mask": mask}


def test_infinite_threshold_is_the_plain_loss_bit_for_bit(batch):
    logits, b = batch
    def plain_fn(z):
        return token_nll_loss(z, b)[0]
    def masked_fn(z):
        return make_energy_loss(EnergyMaskConfig())(z, b)[0]
    for wrap in (lambda f: f, jax.jit):
        assert np.asarray(wrap(plain_fn)(logits)).tobytes() == np.asarray(wrap(masked_fn)(logits)).tobytes()
        g_plain, g_masked = wrap(jax.grad(plain_fn))(logits), wrap(jax.grad(masked_fn))(logits)
        assert np.asarray(g_plain).tobytes() == np.asarray(g_masked).tobytes()
    assert float(energy_masked_loss(logits, b, cfg=EnergyMaskConfig())[1]) == float(token_nll_loss(logits, b)[1])
    general = energy_masked_loss(logits, b, cfg=EnergyMaskConfig(tau=2.5))  # τ > max E: the general path keeps all
    np.testing.assert_allclose(general[0], plain_fn(logits), rtol=F32.exact_rtol)
    assert float(general[1]) == float(token_nll_loss(logits, b)[1])


@pytest.mark.parametrize("normalize", ["all", "kept"])
def test_finite_threshold_drops_high_energy_tokens(batch, normalize):
    logits, b = batch
    cfg = EnergyMaskConfig(tau=1.0, normalize=normalize)
    loss, count = jax.jit(functools.partial(energy_masked_loss, cfg=cfg))(logits, b)
    e = np.asarray(energy(logits, b["tokens"]))[:, 1:]
    nll = -np.take_along_axis(np.asarray(jax.nn.log_softmax(logits[:, :-1], -1)), np.asarray(b["tokens"])[:, 1:, None],
                              -1)[..., 0]
    sup = np.asarray(b["target_mask"])[:, 1:]
    keep = sup * (e < 1.0)
    assert 0 < keep.sum() < sup.sum()  # this batch has tokens on both sides of τ
    denom = sup.sum() if normalize == "all" else keep.sum()
    np.testing.assert_allclose(loss, (keep * nll).sum() / denom, rtol=F32.exact_rtol)
    assert float(count) == denom


def test_energy_is_detached_and_base_energy_can_replace_it(batch):
    logits, b = batch
    cfg = EnergyMaskConfig(tau=1.2)
    weights = (np.asarray(energy(logits, b["tokens"])) < 1.2).astype(np.float32)
    grad = jax.grad(lambda z: energy_masked_loss(z, b, cfg=cfg)[0])(logits)
    b_w = dict(b, target_mask=b["target_mask"] * weights)
    ref = jax.grad(lambda z: jnp.sum(b_w["target_mask"][:, 1:] * -jnp.take_along_axis(
        jax.nn.log_softmax(z[:, :-1], -1), b["tokens"][:, 1:, None], -1)[..., 0]) / jnp.sum(b["target_mask"][:, 1:]))(
        logits)
    np.testing.assert_allclose(grad, ref, rtol=F32.exact_rtol, atol=F32.op_atol)  # E is a constant weight
    base = dict(b, base_energy=jnp.full((3, 8), 2.0).at[0].set(0.0))  # only row 0 kept by the stored energies
    loss, count = energy_masked_loss(logits, base, cfg=EnergyMaskConfig(tau=1.5, energy_source="base"))
    row0 = energy_masked_loss(logits, dict(b, target_mask=b["target_mask"].at[1:].set(0.0)), cfg=EnergyMaskConfig())
    np.testing.assert_allclose(loss * count, row0[0] * row0[1], rtol=F32.exact_rtol)


def test_config_validation():
    for bad in ({"tau": 0.0}, {"normalize": "mean"}, {"energy_source": "old"}, {"tau": -1.0}):
        with pytest.raises(ValueError):
            EnergyMaskConfig(**bad)
    assert EnergyMaskConfig().tau == math.inf


def test_stats_and_histogram(batch):
    logits, b = batch
    stats = energy_stats(logits, b, EnergyMaskConfig(tau=1.0))
    e = np.asarray(energy(logits, b["tokens"]))[:, 1:]
    sup = np.asarray(b["target_mask"])[:, 1:] > 0
    np.testing.assert_allclose(stats["masked_fraction"], np.mean(e[sup] >= 1.0), rtol=F32.exact_rtol)
    np.testing.assert_allclose(stats["energy_mean"], e[sup].mean(), rtol=F32.exact_rtol)
    lp = np.asarray(jax.nn.log_softmax(logits[:, :-1], -1))
    nll = -np.take_along_axis(lp, np.asarray(b["tokens"])[:, 1:, None], -1)[..., 0]
    np.testing.assert_allclose(stats["aop_kl_mean"], nll[sup].mean(), rtol=F32.exact_rtol)
    np.testing.assert_allclose(stats["entropy_mean"], -(np.exp(lp) * lp).sum(-1)[sup].mean(), rtol=F32.exact_rtol)
    assert sum(float(stats[f"band_{k}"]) for k in ("confident", "forking", "extreme")) == sup.sum()
    h = histogram(e[sup], bins=4)
    assert sum(h["counts"]) == sup.sum() and h["edges"] == [0.0, 0.5, 1.0, 1.5, 2.0] and h["bands"] == [0.8, 1.8]


@pytest.mark.slow
def test_engine_step_with_infinite_threshold_equals_the_default_step(qwen, tokens):
    _, net, params = qwen
    tx = optax.sgd(0.1)
    b = {"tokens": tokens, "target_mask": jnp.ones(tokens.shape, jnp.float32)}
    def copy():
        return jax.tree.map(jnp.copy, params)
    plain, m1 = make_train_step(net.graphdef, net.rest, tx)(init_state(copy(), tx), b)
    masked, m2 = make_train_step(net.graphdef, net.rest, tx, loss=Loss(loss_fn=make_energy_loss(EnergyMaskConfig())))(
        init_state(copy(), tx), b)
    assert float(m1["loss"]) == float(m2["loss"])
    same = jax.tree.map(lambda a, c: bool(jnp.array_equal(a, c)), plain.params, masked.params)
    assert all(jax.tree.leaves(same))


def test_energy_evaluator_pools_batches_token_weighted(qwen, tokens):
    from cfka_jax.geometry.energy import energy_evaluator
    from cfka_jax.train.step import model_logits

    _, net, params = qwen
    mask = jnp.ones(tokens.shape, jnp.float32).at[0, :5].set(0.0)
    batches = [{"tokens": tokens[:1], "target_mask": mask[:1]}, {"tokens": tokens[1:], "target_mask": mask[1:]}]
    cfg = EnergyMaskConfig(tau=1.0)
    out = energy_evaluator({"probe": batches}, cfg)(net.graphdef, net.rest)(params, 0)
    whole = energy_stats(model_logits(net.graphdef, params, net.rest, {"tokens": tokens}),
                         {"tokens": tokens, "target_mask": mask}, cfg)
    for k, v in whole.items():
        np.testing.assert_allclose(out[f"probe/{k}"], float(v), rtol=F32.exact_rtol)
