import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cfka_jax.theory.model import (YZParams, attention_weights, init_raw, init_yz, raw_logits, raw_loss, raw_to_yz,
                                   soft_cross_entropy, yz_logits, yz_loss)
from cfka_jax.theory.world import SlotSpec, WorldConfig, full_batch, make_world
from tests.tolerances import F32, F64


def _world(n_obj=5, sizes=(4, 3), seed=0):
    slots = tuple(SlotSpec("name", n, (0.3, 1.0)) for n in sizes) + (SlotSpec("template", 1), SlotSpec("query", 1))
    return make_world(WorldConfig(num_objects=n_obj, slots=slots, seed=seed))


def test_logits_match_explicit_sum(x64, key):
    w = _world()
    p = init_yz(key, w.vocab_size, scale=0.7)
    got = jax.jit(yz_logits)(p, w.contexts, w.objects)
    for c in range(w.contexts.shape[0]):
        x = w.contexts[c]
        expect = sum(p.Z[x[l], x[-1]] * p.Y[w.objects, x[l]] for l in range(x.shape[0]))
        np.testing.assert_allclose(got[c], expect, rtol=F64.exact_rtol)


def test_attention_weights_read_query_column(key):
    w = _world()
    p = init_yz(key, w.vocab_size, scale=1.0, dtype=jnp.float32)
    z = attention_weights(p.Z, w.contexts)
    np.testing.assert_allclose(z, p.Z[w.contexts, w.query_token], rtol=F32.exact_rtol)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), width=st.integers(2, 9), head=st.integers(1, 7))
def test_raw_and_yz_forms_agree(seed, width, head):
    """Property (spec §2.2): raw (E, W_·) and (Y, Z) give the same logits and loss (float64, ≤1e-10 rel)."""
    with jax.enable_x64(True):
        w = _world(seed=seed % 7)
        raw = init_raw(jax.random.key(seed), w.vocab_size, width, head, scale=0.5)
        yz = raw_to_yz(raw)
        a, b = raw_logits(raw, w.contexts, w.objects), yz_logits(yz, w.contexts, w.objects)
        np.testing.assert_allclose(a, b, rtol=F64.exact_rtol, atol=F64.exact_rtol * float(jnp.max(jnp.abs(a))))
        t = full_batch(w)
        np.testing.assert_allclose(raw_loss(raw, *t, w.objects), yz_loss(yz, *t, w.objects), rtol=F64.exact_rtol)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), shift_scale=st.floats(-5.0, 5.0))
def test_column_shift_leaves_loss_invariant(seed, shift_scale):
    """Property: softmax over objects is invariant to Y[:, s] += c_s (per-column shift)."""
    with jax.enable_x64(True):
        w = _world()
        p = init_yz(jax.random.key(seed), w.vocab_size, scale=0.8)
        c = shift_scale * jax.random.normal(jax.random.key(seed + 1), (1, w.vocab_size))
        shifted = YZParams(p.Y + c, p.Z)
        t = full_batch(w)
        np.testing.assert_allclose(yz_loss(shifted, *t, w.objects), yz_loss(p, *t, w.objects), rtol=F64.exact_rtol)


@settings(max_examples=8, deadline=None)
@given(b=st.integers(1, 7), o=st.integers(2, 6), seed=st.integers(0, 999))
def test_soft_cross_entropy_shapes_and_value(b, o, seed):
    logits = jax.random.normal(jax.random.key(seed), (b, o))
    labels = jax.random.randint(jax.random.key(seed + 1), (b,), 0, o)
    targets = jax.nn.one_hot(labels, o) / b
    got = soft_cross_entropy(logits, targets)
    assert got.shape == ()
    expect = -np.mean(np.asarray(jax.nn.log_softmax(logits))[np.arange(b), np.asarray(labels)])
    np.testing.assert_allclose(got, expect, rtol=F32.exact_rtol)


def test_raw_gradients_flow_through_every_parameter(key):
    w = _world()
    raw = init_raw(key, w.vocab_size, 5, 3, scale=0.5, dtype=jnp.float32)
    g = jax.jit(jax.grad(raw_loss))(raw, *full_batch(w), w.objects)
    for name, leaf in g._asdict().items():
        assert bool(jnp.any(leaf != 0)), name
