"""The TAALM meta-gradient: check_grads (order 2), finite differences of the unrolled objective, v = 0, the
reference AdamW formula, meta-batch averaging and the outer step (tiny pure model, float64)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

from cfka_jax.continual.taalm import meta
from cfka_jax.continual.taalm.adamw import AdamWConfig, adamw_init, adamw_step
from tests.continual import taalm_tiny as tiny
from tests.tolerances import F64

# Large inner steps so the meta-gradient is O(1) and finite differences resolve it in float64.
ADAMW = meta.MetaConfig(inner=AdamWConfig(lr=0.05, weight_decay=0.01), n_warmup=1, n_diff=1, dropout=False)
SGD = meta.MetaConfig(inner_form="sgd1_paper", sgd_lr=0.5, n_diff=2, dropout=False)


def _loss(cfg, ops, pair, phi_warmup=None):
    return lambda phi: meta.outer_loss(phi, ops, pair, tiny.FNS, cfg, phi_warmup=phi_warmup)[0]


@pytest.mark.parametrize("cfg", [pytest.param(ADAMW, marks=pytest.mark.slow), SGD],  # AdamW: ~25 s of x64 compiles
                         ids=["adamw2_ref", "sgd1_paper"])
def test_check_grads_order_2(x64, key, cfg):
    """With the warm-up weights held at φ0 the truncated objective is an ordinary function of φ: its first and
    second derivatives (forward and reverse mode) must match finite differences."""
    phi, ops = tiny.params(key, jnp.float64)
    pair = tiny.pair(jax.random.fold_in(key, 1))
    check_grads(jax.jit(_loss(cfg, ops, pair, phi_warmup=phi)), (phi,), order=2, modes=("rev",))
    # ... and at φ0 its gradient is the meta-gradient of the library objective (warm-up weights from φ itself).
    g_lib = jax.grad(_loss(cfg, ops, pair))(phi)
    g_fix = jax.grad(_loss(cfg, ops, pair, phi_warmup=phi))(phi)
    for a, b in zip(jax.tree.leaves(g_lib), jax.tree.leaves(g_fix)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=F64.exact_rtol)


def _unrolled_adamw(phi, phi0, ops, pair, cfg):
    """The truncated objective written out: warm-up steps with φ0's weights (held fixed), then the
    differentiated steps with φ's; no stop_gradient anywhere, so finite differences see exactly this."""
    d, t = pair["d"], pair["t"]

    def twppl_grad(theta, w):
        f = lambda th: meta.twppl(tiny.logits(th, ops.theta_frozen, d), d["tokens"], w, d["target_mask"])  # noqa
        return jax.grad(f)(theta)

    theta, state = ops.theta0, adamw_init(ops.theta0)
    w0 = tiny.weights(phi0, ops.phi_frozen, d)
    for _ in range(cfg.n_warmup):
        theta, state = adamw_step(theta, twppl_grad(theta, w0), state, cfg.inner)
    w = tiny.weights(phi, ops.phi_frozen, d)
    for _ in range(cfg.n_diff):
        theta, state = adamw_step(theta, twppl_grad(theta, w), state, cfg.inner)
    return meta.object_nll(tiny.logits(theta, ops.theta_frozen, t), t["tokens"], t["object_mask"])


def _richardson_fd(f, phi, direction, eps):
    """Central difference of f along ``direction``, Richardson-extrapolated (error O(eps⁴))."""
    shift = lambda s: jax.tree.map(lambda p, v: p + s * v, phi, direction)  # noqa: E731
    central = lambda h: (f(shift(h)) - f(shift(-h))) / (2 * h)  # noqa: E731
    return (4 * central(eps / 2) - central(eps)) / 3


@pytest.mark.parametrize("cfg", [ADAMW, dataclasses.replace(ADAMW, n_warmup=2, n_diff=2), SGD],
                         ids=["adamw 1+1", "adamw 2+2", "sgd x2"])
def test_meta_gradient_matches_finite_differences_of_the_unrolled_objective(x64, key, cfg):
    phi, ops = tiny.params(key, jnp.float64)
    pair = tiny.pair(jax.random.fold_in(key, 1))
    if cfg.inner_form == "sgd1_paper":
        objective = jax.jit(_loss(cfg, ops, pair))
    else:
        objective = jax.jit(lambda p: _unrolled_adamw(p, phi, ops, pair, cfg))
    grad = jax.grad(_loss(cfg, ops, pair))(phi)
    for i in range(3):
        direction = jax.tree.map(lambda p: jax.random.normal(jax.random.fold_in(key, 10 + i), p.shape, p.dtype), phi)
        analytic = sum(jnp.vdot(g, v) for g, v in zip(jax.tree.leaves(grad), jax.tree.leaves(direction)))
        numeric = _richardson_fd(objective, phi, direction, 1e-4)
        assert abs(float(analytic)) > 1e-3  # the meta-signal is not vanishing in this set-up
        # measured 3e-11 at h = 1e-4 (Richardson: error O(h⁴)); flow_rtol is the closest named entry
        np.testing.assert_allclose(float(analytic), float(numeric), rtol=F64.flow_rtol)


def test_warmup_steps_are_detached(x64, key):
    """adamw2_ref: φ enters only through the differentiated steps; differentiating through the warm-up too
    (the untruncated objective) gives a different gradient."""
    phi, ops = tiny.params(key, jnp.float64)
    pair = tiny.pair(jax.random.fold_in(key, 1))
    ours = jax.grad(_loss(ADAMW, ops, pair))(phi)
    full = jax.grad(lambda p: _unrolled_adamw(p, p, ops, pair, ADAMW))(phi)
    gap = float(jnp.max(jnp.abs(ours["head_w"] - full["head_w"])) / jnp.max(jnp.abs(full["head_w"])))
    assert gap > 1e-3  # a material difference, not rounding


def test_no_nan_where_v_is_zero(x64, key):
    """LoRA A with B = 0 has zero gradient, so v = 0 in the differentiated step: finite with the reference's
    eps inside the sqrt, NaN with an outer eps only (which shows the case is really hit)."""
    phi, ops = tiny.params(key, jnp.float64, b_zero=True)
    pair = tiny.pair(jax.random.fold_in(key, 1))
    cfg = dataclasses.replace(ADAMW, n_warmup=0, n_diff=1)
    g = jax.grad(_loss(cfg, ops, pair))(phi)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))
    assert float(jnp.abs(g["head_b"])) > 0
    bad = dataclasses.replace(cfg, inner=dataclasses.replace(cfg.inner, eps_root=0.0))
    g_bad = jax.grad(_loss(bad, ops, pair))(phi)
    assert not all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g_bad))


def test_adamw_step_is_the_reference_formula(x64, key):
    p = jax.random.normal(key, (4, 3), jnp.float64)
    gs = [jax.random.normal(jax.random.fold_in(key, i), (4, 3), jnp.float64) for i in range(3)]
    cfg = AdamWConfig(lr=1e-2, weight_decay=0.1)
    state, ours = adamw_init(p), p
    m = v = np.zeros((4, 3))
    ref = np.asarray(p)
    for t, g in enumerate(gs, start=1):
        ours, state = adamw_step(ours, g, state, cfg)
        g = np.asarray(g)
        ref = ref * (1 - cfg.lr * cfg.weight_decay)
        m = m + (1 - cfg.b1) * (g - m)
        v = cfg.b2 * v + (1 - cfg.b2) * g * g
        den = (np.sqrt(v + cfg.eps_root) + cfg.eps_root) / np.sqrt(1 - cfg.b2**t) + cfg.eps
        ref = ref - cfg.lr / (1 - cfg.b1**t) * m / den
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=F64.exact_rtol)
    # Without the inner epsilon the formula is torch/optax AdamW (decoupled decay on the old parameters).
    cfg0 = dataclasses.replace(cfg, eps_root=0.0)
    tx = optax.adamw(cfg.lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay)
    state, ours, opt, ox = adamw_init(p), p, tx.init(p), p
    for g in gs:
        ours, state = adamw_step(ours, g, state, cfg0)
        with jax.numpy_dtype_promotion("standard"):
            upd, opt = tx.update(g, opt, ox)
        ox = optax.apply_updates(ox, upd)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ox), rtol=F64.exact_rtol)


def test_meta_batch_is_the_mean_of_pairs_for_any_chunking(x64, key):
    phi, ops = tiny.params(key, jnp.float64)
    pairs = tiny.pair(jax.random.fold_in(key, 2), p=4)
    grad_fn = jax.jit(jax.grad(lambda p, pr: meta.outer_loss(p, ops, pr, tiny.FNS, ADAMW)[0]))
    per_pair = [grad_fn(phi, jax.tree.map(lambda x: x[i:i + 1], pairs)) for i in range(4)]
    mean = jax.tree.map(lambda *g: sum(g) / 4, *per_pair)
    for chunk in (1, 4):
        cfg = dataclasses.replace(ADAMW, pair_chunk=chunk)
        loss, aux, g = jax.jit(lambda p: meta.meta_batch_grad(p, ops, pairs, tiny.FNS, cfg))(phi)
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(mean)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=F64.batched_rtol,
                                       atol=F64.cancel_atol)
        assert 0 < float(aux["w_object"]) < 1 and 0 < float(aux["w_other"]) < 1
    with pytest.raises(ValueError, match="pair_chunk"):
        meta.meta_batch_grad(phi, ops, pairs, tiny.FNS, dataclasses.replace(ADAMW, pair_chunk=3))


def test_remat_gives_the_same_meta_gradient(x64, key):
    phi, ops = tiny.params(key, jnp.float64)
    pair = tiny.pair(jax.random.fold_in(key, 1))
    g0 = jax.grad(_loss(ADAMW, ops, pair))(phi)
    g1 = jax.grad(_loss(dataclasses.replace(ADAMW, remat=True), ops, pair))(phi)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=F64.exact_rtol)


def test_outer_step_lowers_the_outer_loss_and_keeps_state_when_not_finite(x64, key):
    phi, ops = tiny.params(key, jnp.float64)
    pairs = tiny.pair(jax.random.fold_in(key, 2), p=4)
    step = meta.make_meta_step(tiny.FNS, ADAMW, AdamWConfig(lr=0.05), donate=False)
    state = meta.init_meta_state(phi)
    losses = []
    for i in range(15):
        state, metrics = step(state, ops, pairs, jax.random.key(i))
        losses.append(float(metrics["outer_loss"]))
        assert bool(metrics["finite"])
    assert losses[-1] < losses[0]
    assert int(state.step) == 15 and int(state.opt.t) == 15
    bad_ops = ops._replace(theta0=jax.tree.map(lambda x: x * jnp.nan, ops.theta0))
    kept, metrics = step(state, bad_ops, pairs, jax.random.key(0))
    assert not bool(metrics["finite"])
    np.testing.assert_array_equal(np.asarray(kept.phi["head_w"]), np.asarray(state.phi["head_w"]))


def test_config_checks():
    with pytest.raises(ValueError, match="inner_form"):
        meta.MetaConfig(inner_form="adam")
    with pytest.raises(ValueError, match="outer_objective"):
        meta.MetaConfig(outer_objective="all")
    with pytest.raises(ValueError, match="n_diff"):
        meta.MetaConfig(n_diff=0)
    with pytest.raises(ValueError, match="lr"):
        AdamWConfig(lr=0.0)
