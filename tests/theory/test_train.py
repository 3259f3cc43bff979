import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.theory.model import init_yz, yz_loss
from cfka_jax.theory.train import Rates, SGDConfig, gradient_flow, minibatch, train_sgd
from cfka_jax.theory.world import WorldConfig, full_batch, make_world
from tests.tolerances import F32, F64


def test_one_step_is_per_block_sgd(x64, key):
    w = make_world(WorldConfig())
    p = init_yz(key, w.vocab_size, scale=0.5)
    rates = Rates(0.7, 0.03)
    final, _ = train_sgd(p, w, key, rates, cfg=SGDConfig(steps=1), observe=lambda q: ())
    g = jax.grad(yz_loss)(p, *full_batch(w), w.objects)
    np.testing.assert_allclose(final.Y, p.Y - 0.7 * g.Y, rtol=F64.direct_rtol)
    np.testing.assert_allclose(final.Z, p.Z - 0.03 * g.Z, rtol=F64.direct_rtol)


def test_observations_have_leading_time_axis(key):
    w = make_world(WorldConfig())
    p = init_yz(key, w.vocab_size, dtype=jnp.float32)
    cfg = SGDConfig(steps=12, log_every=4, batch_size=8)
    _, obs = jax.jit(lambda p: train_sgd(p, w, key, Rates(1.0, 0.1), cfg=cfg, observe=lambda q: q.Y[0, :3]))(p)
    assert obs.shape == (4, 3)
    np.testing.assert_array_equal(obs[0], p.Y[0, :3])


def test_minibatch_forms(key):
    w = make_world(WorldConfig())
    c = w.contexts.shape[0]
    toks, tgt = minibatch(w, key, c + 1)  # C ≤ B: count weights over the contexts
    assert toks.shape == w.contexts.shape and tgt.shape == w.joint.shape
    toks, tgt = minibatch(w, key, c - 1)  # C > B: sampled examples
    assert toks.shape == (c - 1, w.context_length)


def test_vmap_over_rates_equals_separate_runs(key):
    w = make_world(WorldConfig())
    p = init_yz(key, w.vocab_size, dtype=jnp.float32)
    cfg = SGDConfig(steps=20, batch_size=16, log_every=20)
    run = lambda ey, ez: train_sgd(p, w, key, Rates(ey, ez), cfg=cfg, observe=lambda q: ())[0]
    eys, ezs = jnp.asarray([0.5, 1.0, 2.0]), jnp.asarray([0.01, 0.1, 0.05])
    batched = jax.jit(jax.vmap(run))(eys, ezs)
    for i in range(3):
        single = jax.jit(run)(eys[i], ezs[i])
        np.testing.assert_allclose(batched.Y[i], single.Y, rtol=F32.exact_rtol, atol=F32.one_ulp)


def test_rk4_matches_small_step_gd(x64, key):
    """Gradient flow: RK4 and GD with a 100x smaller step agree to O(step) at the same time."""
    w = make_world(WorldConfig())
    p = init_yz(key, w.vocab_size, scale=0.5)
    rates = Rates(1.0, 0.2)
    flow, _ = gradient_flow(p, w, rates, 0.1, cfg=SGDConfig(steps=20), observe=lambda q: ())
    gd, _ = train_sgd(p, w, key, Rates(0.001, 0.0002), cfg=SGDConfig(steps=2000), observe=lambda q: ())
    scale = float(jnp.max(jnp.abs(flow.Y - p.Y)))
    assert float(jnp.max(jnp.abs(flow.Y - gd.Y))) < 1e-2 * scale


def test_rk4_fourth_order(x64, key):
    w = make_world(WorldConfig())
    p = init_yz(key, w.vocab_size, scale=0.5)
    rates = Rates(1.0, 0.2)
    def endpoint(dt, n):
        return gradient_flow(p, w, rates, dt, cfg=SGDConfig(steps=n), observe=lambda q: ())[0].Y
    ref = endpoint(0.025, 80)
    e1 = float(jnp.max(jnp.abs(endpoint(0.4, 5) - ref)))
    e2 = float(jnp.max(jnp.abs(endpoint(0.2, 10) - ref)))
    assert 10.0 < e1 / e2 < 24.0  # 2⁴ = 16 for a fourth-order method


@pytest.mark.parametrize("kw", [dict(steps=0), dict(steps=10, log_every=3), dict(steps=4, batch_size=0)])
def test_sgd_config_validation(kw):
    with pytest.raises(ValueError):
        SGDConfig(**kw)
