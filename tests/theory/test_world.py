import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cfka_jax.theory.world import (SlotSpec, WorldConfig, full_batch, log_prior_terms, make_world, sample_batch,
                                   sample_counts)
from tests.tolerances import F64, sampling_atol


def test_world_is_deterministic_and_normalised(x64):
    a, b = make_world(WorldConfig()), make_world(WorldConfig())
    np.testing.assert_array_equal(a.joint, b.joint)
    np.testing.assert_allclose(jnp.sum(a.joint), 1.0, rtol=F64.exact_rtol)
    c = make_world(dataclasses.replace(WorldConfig(), seed=1))
    assert not np.allclose(a.joint, c.joint)


def test_joint_is_naive_bayes(x64):
    w = make_world(WorldConfig())
    # Pr(X, o) = Pr(o) Π_k Pr(x_k | o) for every enumerated context
    expect = w.pr_o[None, :] * jnp.prod(w.pr_s_given_o[w.contexts], axis=1)
    np.testing.assert_allclose(w.joint, expect, rtol=F64.exact_rtol)
    np.testing.assert_allclose(jnp.sum(w.joint, 0), w.pr_o, rtol=F64.exact_rtol)


def test_layout_and_slot_emissions(x64):
    cfg = WorldConfig()
    w = make_world(cfg)
    assert w.contexts.shape == (cfg.num_contexts, cfg.context_length)
    assert w.token_kinds[w.query_token] == "query"
    assert bool(jnp.all(w.contexts[:, -1] == w.query_token))
    # each slot's emission sums to one over its own vocabulary
    start = 0
    for slot in cfg.slots:
        np.testing.assert_allclose(jnp.sum(w.pr_s_given_o[start:start + slot.size], 0), 1.0, rtol=F64.exact_rtol)
        start += slot.size


def test_relations_partition_objects(x64):
    cfg = WorldConfig(num_objects=6, slots=(SlotSpec("name", 3), SlotSpec("relation", 3), SlotSpec("query", 1)),
                      smoothing=0.0)
    w = make_world(cfg)
    rel = w.pr_s_given_o[3:6]
    np.testing.assert_array_equal(jnp.sum(rel > 0, axis=0), 1)  # each object belongs to one relation


@pytest.mark.parametrize("bad", [
    dict(num_objects=1),
    dict(slots=(SlotSpec("name", 3),)),
    dict(slots=(SlotSpec("query", 1), SlotSpec("query", 1))),
    dict(smoothing=1.0),
    dict(max_contexts=2),
])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        WorldConfig(**bad)


def test_slot_spec_rejects_bad_values():
    with pytest.raises(ValueError, match="kind"):
        SlotSpec("verb", 2)
    with pytest.raises(ValueError, match="exactly one"):
        SlotSpec("template", 2)
    with pytest.raises(ValueError, match="breadth"):
        SlotSpec("name", 2, (0.0, 1.0))


def test_sampling_matches_joint(x64, key):
    w = make_world(WorldConfig())
    tokens, targets = jax.jit(sample_batch, static_argnums=2)(w, key, 40_000)
    assert tokens.shape == (40_000, w.context_length)
    np.testing.assert_allclose(jnp.sum(targets), 1.0, rtol=F64.exact_rtol)
    freq = jnp.mean(tokens[:, 0:1] == w.context_tokens[None, :4], axis=0)
    expect = jnp.sum(w.pr_s_given_o[:4] * w.pr_o[None, :], axis=1)
    np.testing.assert_allclose(freq, expect, atol=sampling_atol(0.5, 40_000))  # std of a frequency ≤ 0.5


def test_counts_form_equals_sample_form(x64, key):
    """The count weights over contexts give the same minibatch loss gradient as the sampled examples."""
    from cfka_jax.theory.model import init_yz, yz_loss

    w = make_world(WorldConfig())
    p = init_yz(jax.random.key(3), w.vocab_size, scale=0.5)
    tokens, targets = sample_batch(w, key, 64)
    counts = sample_counts(w, key, 64)  # same key: the same draws
    g1 = jax.grad(yz_loss)(p, tokens, targets, w.objects)
    g2 = jax.grad(yz_loss)(p, w.contexts, counts, w.objects)
    np.testing.assert_allclose(g1.Y, g2.Y, rtol=F64.solve_rtol, atol=F64.cancel_atol)
    np.testing.assert_allclose(g1.Z, g2.Z, rtol=F64.solve_rtol, atol=F64.cancel_atol)


@settings(max_examples=15, deadline=None)
@given(objects=st.integers(2, 6), sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       smoothing=st.floats(0.01, 0.5), seed=st.integers(0, 10_000))
def test_log_prior_terms_finite_with_smoothing(objects, sizes, smoothing, seed):
    slots = tuple(SlotSpec("name", n, (0.2, 1.0)) for n in sizes) + (SlotSpec("query", 1),)
    with jax.enable_x64(True):
        w = make_world(WorldConfig(num_objects=objects, slots=slots, smoothing=smoothing, seed=seed))
        v = log_prior_terms(w)
        assert v.shape == (w.vocab_size, objects)
        assert bool(jnp.all(jnp.isfinite(v)))
        c, t = full_batch(w)
        assert c.shape[0] == int(np.prod(sizes))
        np.testing.assert_allclose(jnp.sum(t), 1.0, rtol=F64.exact_rtol)
