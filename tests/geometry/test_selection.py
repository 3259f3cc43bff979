"""LESS features against a hand-computed Adam-preconditioned projected gradient; HyperINF's Schulz inverse."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry import baselines, selection
from cfka_jax.geometry.net import leaf_path, param_roles
from cfka_jax.geometry.onestep import SCOPE_ROLES
from tests.tolerances import F32, F64


def _hand_loss_grad(net, params, tokens_S):
    """∇ of the token-mean NLL of one sequence, written out without the library's per-example machinery."""
    def loss(p, t):
        logits = net.model(p)(t[None]).logits[0, :-1]
        lp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        return -jnp.mean(jnp.take_along_axis(lp, t[1:, None], axis=-1))
    with jax.default_matmul_precision("highest"):
        return jax.jit(jax.grad(loss))(params, tokens_S)


def test_less_features_equal_the_hand_computed_adam_projected_gradient(qwen, key):
    _, net, params = qwen
    tokens = jax.random.randint(key, (2, 9), 0, net.cfg.vocab_size, dtype=jnp.int32)
    grads, counts = jax.jit(functools.partial(baselines.sequence_grads, net=net, scope="modeled"))(
        params, {"tokens": tokens})
    g = selection.flatten(selection.loss_grads(grads, counts))
    k1, k2, k3 = jax.random.split(jax.random.fold_in(key, 1), 3)
    m = 1e-3 * jax.random.normal(k1, (g.shape[1],))
    v = 1e-6 * jax.random.uniform(k2, (g.shape[1],))
    proj = selection.projection(k3, g.shape[1], 17)
    got = np.asarray(selection.less_features(g, m, v, proj))
    roles = param_roles(params, net.cfg)
    keep = sorted(p for p, r in roles.items() if r in SCOPE_ROLES["modeled"])
    m_np, v_np, proj_np = (np.asarray(x, np.float64) for x in (m, v, proj))
    for i in range(2):
        flat = {leaf_path(kp): np.ravel(x) for kp, x in
                jax.tree_util.tree_flatten_with_path(_hand_loss_grad(net, params, tokens[i]))[0]}
        gi = np.concatenate([flat[p] for p in keep]).astype(np.float64)
        m1 = 0.9 * m_np + 0.1 * gi
        v1 = 0.999 * v_np + 0.001 * gi * gi
        want = (m1 / (np.sqrt(v1) + 1e-8)) @ proj_np
        np.testing.assert_allclose(got[i], want, rtol=F32.model_rtol, atol=F32.model_atol)
    # the score is a learning-rate weighted sum of cosines
    s = selection.less_scores([jnp.asarray(got)] * 2, [jnp.asarray(got[0])] * 2, [0.5, 0.25])
    np.testing.assert_allclose(float(s[0]), 0.75, rtol=F32.exact_rtol)


def test_schulz_iteration_converges_to_the_explicit_inverse(x64):
    rng = np.random.default_rng(0)
    b = rng.normal(size=(7, 7))
    for a in (b @ b.T + 0.5 * np.eye(7), b + 6.0 * np.eye(7)):  # SPD and a general nonsingular matrix
        want = np.linalg.inv(a)
        errs = [float(np.max(np.abs(np.asarray(selection.schulz_inverse(jnp.asarray(a), iters=it)) - want)))
                / np.max(np.abs(want)) for it in (2, 8, 60)]
        assert errs[0] > errs[1] > errs[2]
        assert errs[2] < F64.solve_rtol


def test_hyperinf_scores_equal_the_explicit_damped_fisher_solve(x64):
    rng = np.random.default_rng(1)
    shapes = {("w",): (3, 5), ("u",): (6, 2)}
    train = {p: jnp.asarray(rng.normal(size=(9, a * b))) for p, (a, b) in shapes.items()}
    val = {p: jnp.asarray(rng.normal(size=(a * b,))) for p, (a, b) in shapes.items()}
    got = np.asarray(selection.hyperinf_scores(train, val, shapes, damping=0.1, iters=80))
    want = np.zeros(9)
    for p, (a, b) in shapes.items():
        gm, vm = np.asarray(train[p]).reshape(9, a, b), np.asarray(val[p]).reshape(a, b)
        if a < b:
            f = np.einsum("nab,ncb->ac", gm, gm) / 9
            pre = np.linalg.solve(f + 0.1 * np.trace(f) / a * np.eye(a), vm)
        else:
            f = np.einsum("nab,nac->bc", gm, gm) / 9
            pre = np.linalg.solve(f + 0.1 * np.trace(f) / b * np.eye(b), vm.T).T
        want += np.einsum("nab,ab->n", gm, pre)
    np.testing.assert_allclose(got, want, rtol=F64.solve_rtol)


def test_top_fraction_and_matrix_shapes():
    assert selection.top_fraction([0.1, 0.9, 0.5, 0.9], 0.5).tolist() == [1, 3]
    assert selection.top_fraction(np.arange(40.0), 0.05).tolist() == [39, 38]
    with pytest.raises(ValueError, match="fraction"):
        selection.top_fraction([1.0], 0.0)
    assert selection.matrix_shapes({"k": (4, 3), "b": (3,), "q": (2, 4, 3)}) == {"k": (4, 3), "b": (1, 3),
                                                                               "q": (8, 3)}
