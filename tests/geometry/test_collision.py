"""The per-token collision protocol (spec §6.2): one restored SGD step per token, its first-order term, F_avg /
F_ratio per domain, the token statistics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry import collision
from tests.tolerances import F32


def test_each_token_steps_from_the_base_and_first_order_is_the_gradient_product(qwen):
    _, net, params = qwen
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, 37, size=(3, 7)), jnp.int32)
    pos = jnp.asarray([6, 2, 4], jnp.int32)
    probes = jnp.asarray(rng.integers(0, 37, size=(5, 7)), jnp.int32)
    mask = jnp.asarray(rng.integers(0, 2, size=(5, 7)), jnp.float32).at[:, 0].set(0.0)
    eta = 1e-2
    out = collision.token_collisions(params, tokens, pos, probes, mask, net=net, etas=(eta,), chunk=2)
    assert out["delta"].shape == (1, 3, 5) and out["first_order"].shape == (3, 5)
    with jax.default_matmul_precision("highest"):
        logp = jax.jit(lambda p: collision.probe_logp(p, probes, mask, net=net))  # compiled once, reused per token
        token_grad = jax.jit(lambda p, t, q: jax.grad(collision._token_logp)(p, t, q, net=net))
        base = logp(params)
        probe_grads = jax.jit(jax.jacrev(logp))(params)
        for u in range(3):  # reference: one token at a time, by hand
            g = token_grad(params, tokens[u], pos[u])
            moved = jax.tree.map(lambda p, d: p + eta * d, params, g)
            np.testing.assert_allclose(np.asarray(out["delta"][0, u]), np.asarray(logp(moved) - base),
                                       rtol=F32.model_rtol, atol=F32.model_atol)
            dot = sum(jnp.tensordot(jg, dg, axes=dg.ndim) for jg, dg in
                      zip(jax.tree.leaves(probe_grads), jax.tree.leaves(g)))
            np.testing.assert_allclose(np.asarray(out["first_order"][u]), np.asarray(dot), rtol=F32.model_rtol,
                                       atol=F32.model_atol)
            lp = jax.nn.log_softmax(net.model(params)(tokens[u][None]).logits[0, pos[u] - 1])
            np.testing.assert_allclose(float(out["aop_kl"][u]), float(-lp[tokens[u, pos[u]]]), rtol=F32.exact_rtol)


def test_token_stats_on_a_hand_built_row():
    logits = jnp.log(jnp.asarray([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]))
    stats = collision.token_stats(logits, jnp.asarray([0, 1]))
    pi = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])
    e = np.array([np.sum((np.eye(3)[0] - pi[0]) ** 2), np.sum((np.eye(3)[1] - pi[1]) ** 2)])  # ‖e_y − π‖²
    np.testing.assert_allclose(np.asarray(stats["energy"]), e, rtol=0, atol=F32.few_ulps)
    np.testing.assert_allclose(np.asarray(stats["p_y"]), [0.5, 0.1], rtol=0, atol=F32.few_ulps)
    np.testing.assert_allclose(np.asarray(stats["entropy"]), -np.sum(pi * np.log(pi), axis=1), rtol=F32.exact_rtol)


def test_per_domain_means_and_ratios():
    delta = np.array([[-0.2, 0.0, -0.05, -0.3], [0.1, 0.1, 0.1, -0.2]])
    out = collision.per_domain(delta, np.array([0, 0, 1, 1]), 2, tau=0.1)
    np.testing.assert_allclose(out["f_avg"], [[0.1, 0.175], [-0.1, 0.05]])
    np.testing.assert_allclose(out["f_ratio"], [[0.5, 0.5], [0.0, 0.5]])
    with pytest.raises(ValueError, match="domain 2"):
        collision.per_domain(delta, np.array([0, 0, 1, 1]), 3)
