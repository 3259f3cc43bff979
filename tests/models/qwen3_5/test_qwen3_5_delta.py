"""The gated delta rule and the short convolution of Qwen3.5 (``models/qwen3_5/delta.py``): the chunked (training)
form equals the recurrent (decoding) form, both equal the recurrence written out in float64, masked steps leave the
state alone, and the convolution continues across calls through its state.

Tolerance: ``F32.op_atol`` (one float32 op chain on O(1) values against another form of it); measured ≤ 2e-7.
"""

import jax
import numpy as np
import pytest

from cfka_jax.models.qwen3_5 import delta
from tests.tolerances import F32

B, S, G, U, Y, W = 2, 13, 2, 6, 5, 3  # S = 13 is not a multiple of any chunk size tried but 1 and 13


def inputs(seed: int, s: int = S):
    r = np.random.default_rng(seed)
    q, k = (r.normal(size=(B, s, G, Y)).astype(np.float32) for _ in range(2))
    v = r.normal(size=(B, s, U, W)).astype(np.float32)
    g = -np.abs(r.normal(size=(B, s, U))).astype(np.float32)
    beta = r.uniform(size=(B, s, U)).astype(np.float32)
    m0 = r.normal(size=(B, U, Y, W)).astype(np.float32)
    return q, k, v, g, beta, m0


def reference(q, k, v, g, beta, m0):
    """The docstring's recurrence in float64, on S = Mᵀ: S_t = α S (I − β k kᵀ) + β v kᵀ, o_t = S_t q_t."""
    q, k, v, g, beta, m0 = (np.asarray(x, np.float64) for x in (q, k, v, g, beta, m0))
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(Y)
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    q, k = np.repeat(q, U // G, axis=2), np.repeat(k, U // G, axis=2)
    out = np.zeros(v.shape)
    for b in range(B):
        for u in range(U):
            s_wy = m0[b, u].T
            for t in range(q.shape[1]):
                kt, vt = k[b, t, u], v[b, t, u]
                s_wy = (np.exp(g[b, t, u]) * s_wy @ (np.eye(Y) - beta[b, t, u] * np.outer(kt, kt))
                        + beta[b, t, u] * np.outer(vt, kt))
                out[b, t, u] = s_wy @ q[b, t, u]
            m0[b, u] = s_wy.T
    return out, m0


def test_recurrent_equals_the_recurrence_in_float64():
    x = inputs(0)
    o, m = jax.jit(delta.recurrent)(*x)
    o_ref, m_ref = reference(*x)
    np.testing.assert_allclose(np.asarray(o), o_ref, rtol=0, atol=F32.op_atol)
    np.testing.assert_allclose(np.asarray(m), m_ref, rtol=0, atol=F32.op_atol)


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 13, 16, 64])
def test_chunked_equals_recurrent(chunk_size):
    x = inputs(1)
    o_r, m_r = jax.jit(delta.recurrent)(*x)
    o_c, m_c = jax.jit(lambda *a: delta.chunked(*a, chunk_size=chunk_size))(*x)
    np.testing.assert_allclose(np.asarray(o_c), np.asarray(o_r), rtol=0, atol=F32.op_atol)
    np.testing.assert_allclose(np.asarray(m_c), np.asarray(m_r), rtol=0, atol=F32.op_atol)
    assert np.abs(np.asarray(o_r)).max() > 0.1  # not a comparison of zeros


def test_chunked_from_zero_state_and_split_calls_continue():
    q, k, v, g, beta, _ = inputs(2)
    o_all, m_all = delta.chunked(q, k, v, g, beta, chunk_size=4)
    o_1, m_1 = delta.chunked(q[:, :6], k[:, :6], v[:, :6], g[:, :6], beta[:, :6], chunk_size=4)
    o_2, m_2 = delta.recurrent(q[:, 6:], k[:, 6:], v[:, 6:], g[:, 6:], beta[:, 6:], m_1)
    np.testing.assert_allclose(np.concatenate([o_1, o_2], axis=1), np.asarray(o_all), rtol=0, atol=F32.op_atol)
    np.testing.assert_allclose(np.asarray(m_2), np.asarray(m_all), rtol=0, atol=F32.op_atol)


def test_masked_steps_leave_the_state_unchanged():
    q, k, v, g, beta, m0 = inputs(3)
    keep = np.ones((B, S), bool)
    keep[0, 5:] = False  # row 0: padding after 5 tokens
    g_m, beta_m = delta.mask_steps(g, beta, keep)
    _, m = delta.chunked(q, k, v, g_m, beta_m, m0, chunk_size=4)
    _, m_5 = delta.recurrent(q[:1, :5], k[:1, :5], v[:1, :5], g[:1, :5], beta[:1, :5], m0[:1])
    np.testing.assert_allclose(np.asarray(m)[:1], np.asarray(m_5), rtol=0, atol=F32.op_atol)


def test_chunk_size_below_one_is_refused():
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        delta.chunked(*inputs(0)[:5], chunk_size=0)


def test_causal_conv_matches_its_definition_and_continues_through_its_state():
    r = np.random.default_rng(4)
    x = r.normal(size=(B, S, 7)).astype(np.float32)
    w = r.normal(size=(4, 7)).astype(np.float32)
    out, state = delta.causal_conv(x, w)
    padded = np.concatenate([np.zeros((B, 3, 7), np.float32), x], axis=1)
    pre = sum(w[z] * padded[:, z:z + S] for z in range(4))
    np.testing.assert_allclose(np.asarray(out), pre / (1 + np.exp(-pre)), rtol=0, atol=F32.op_atol)
    np.testing.assert_array_equal(np.asarray(state), x[:, -3:])
    a, s_a = delta.causal_conv(x[:, :5], w)
    b, _ = delta.causal_conv(x[:, 5:], w, s_a)
    np.testing.assert_allclose(np.concatenate([a, b], axis=1), np.asarray(out), rtol=0, atol=F32.op_atol)


def test_causal_conv_state_stops_at_each_rows_last_kept_input():
    x = np.random.default_rng(5).normal(size=(B, S, 7)).astype(np.float32)
    w = np.ones((4, 7), np.float32)
    _, state = delta.causal_conv(x, w, None, np.asarray([4, -1], np.int32))
    np.testing.assert_array_equal(np.asarray(state)[0], x[0, 2:5])
    np.testing.assert_array_equal(np.asarray(state)[1], np.zeros((3, 7)))  # nothing kept: the old (zero) state


def test_mixing_matrix_mixes_the_values_into_the_rules_output():
    q, k, v, g, beta, _ = inputs(6)
    a = delta.mixing_matrix(q, k, g, beta, num_value_heads=U)
    o, _ = delta.recurrent(q, k, v, g, beta)
    np.testing.assert_allclose(np.einsum("buts,bsuw->btuw", np.asarray(a), v), np.asarray(o), rtol=0,
                               atol=F32.op_atol)
    assert np.all(np.triu(np.asarray(a), 1) == 0)  # causal
