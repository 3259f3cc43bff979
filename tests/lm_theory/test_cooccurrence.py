"""Corpus co-occurrence statistics read the way the theory's world reads them, and the DI conventions."""

import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.lm_theory.cooccurrence import CoOccurrence, count_cooccurrence, log_prior_terms, probabilities
from cfka_jax.lm_theory.diversity import CONVENTIONS, DIConvention, diversity_index, v_norm
from cfka_jax.theory import diversity as theory_di
from cfka_jax.theory.world import WorldConfig, make_world
from tests.tolerances import F64


def _world_counts(world) -> CoOccurrence:
    """The enumerated world counted as a corpus: every (context, object) pair weighted by Pr(X, o)."""
    contexts_C = np.asarray(world.contexts)
    num_c, num_o = world.joint.shape
    contexts = [contexts_C[c] for c in range(num_c) for _ in range(num_o)]
    objects = np.tile(np.arange(num_o), num_c)
    return count_cooccurrence(contexts, objects, num_tokens=world.vocab_size, num_objects=num_o,
                              weights=np.asarray(world.joint).reshape(-1))


def test_counts_of_an_enumerated_world_give_back_its_emissions(x64):
    world = make_world(WorldConfig())
    co = _world_counts(world)
    pr_s, pr_o = probabilities(co)
    nx = world.context_tokens.shape[0]
    np.testing.assert_allclose(pr_s[:nx], world.pr_s_given_o[:nx], rtol=F64.solve_rtol)
    np.testing.assert_allclose(pr_o, world.pr_o, rtol=F64.solve_rtol)
    assert co.mean_length == pytest.approx(world.context_length, rel=F64.direct_rtol)


@pytest.mark.parametrize("centre", [True, False])
def test_di_equals_the_theory_module_on_its_world(x64, centre):
    world = make_world(WorldConfig())
    co = _world_counts(world)
    nx = world.context_tokens.shape[0]
    for exponent in (0.25, 0.5):
        conv = DIConvention(centre=centre, support="all", exponent=exponent)
        want = theory_di.diversity_index(world, 1.0, 0.04, exponent=exponent, support="all", centre=centre)
        got = diversity_index(co, conv, eta_ratio=0.04)
        np.testing.assert_allclose(got[:nx], want[:nx], rtol=F64.solve_rtol)


def _toy() -> CoOccurrence:
    # tokens 0..3; objects 0..2. Token 0 with every object, token 1 only with object 0, token 3 never.
    contexts = [np.array([0, 1, 1]), np.array([0, 2]), np.array([0, 2]), np.array([0])]
    return count_cooccurrence(contexts, np.array([0, 1, 1, 2]), num_tokens=4, num_objects=3)


def test_counts_presence_and_cooccur_support(x64):
    co = _toy()
    np.testing.assert_array_equal(co.counts, [[1, 2, 1], [1, 0, 0], [0, 2, 0], [0, 0, 0]])  # 1 counted once
    np.testing.assert_array_equal(co.n_o, [1, 2, 1])
    assert co.mean_length == pytest.approx(7 / 4, rel=F64.direct_rtol)  # distinct types: 2, 2, 2, 1
    v = log_prior_terms(co, support="cooccur")
    l_inv = 1 / co.mean_length
    np.testing.assert_allclose(v[1], [np.log(1.0) + l_inv * np.log(0.25), 0, 0], rtol=F64.direct_rtol)
    np.testing.assert_array_equal(v[3], 0.0)
    # token 1 co-occurs with one object: its centred norm is 0, its un-centred norm |v|
    conv = DIConvention(centre=True, support="cooccur")
    np.testing.assert_allclose(v_norm(co, conv)[1], 0.0, atol=F64.zero_atol)
    np.testing.assert_allclose(v_norm(co, DIConvention(centre=False))[1], abs(float(v[1, 0])), rtol=F64.direct_rtol)
    centred = np.asarray(v[0]) - np.mean(np.asarray(v[0]))
    np.testing.assert_allclose(v_norm(co, conv)[0], np.linalg.norm(centred), rtol=F64.direct_rtol)


def test_smoothing_and_support_all(x64):
    co = _toy()
    with pytest.raises(ValueError, match="smoothing"):
        log_prior_terms(co, support="all")
    eps = 0.1
    pr_s, pr_o = probabilities(co, smoothing=eps)
    base = co.counts.sum(1) / co.total
    np.testing.assert_allclose(pr_s[1], (1 - eps) * np.array([1, 0, 0]) + eps * base[1], rtol=F64.direct_rtol)
    np.testing.assert_allclose(pr_o, (1 - eps) * co.n_o / 4 + eps / 3, rtol=F64.direct_rtol)
    v = log_prior_terms(co, support="all", smoothing=eps)
    assert bool(jnp.all(jnp.isfinite(v))) and bool(jnp.all(v[3] == 0))  # a token in no context says nothing
    for conv in CONVENTIONS:
        assert bool(jnp.all(jnp.isfinite(diversity_index(co, conv)))) and float(diversity_index(co, conv)[3]) == 0


def test_validation():
    with pytest.raises(ValueError, match="as many"):
        count_cooccurrence([np.array([0])], np.array([0, 1]), num_tokens=2, num_objects=2)
    with pytest.raises(ValueError, match="object ids"):
        count_cooccurrence([np.array([0])], np.array([5]), num_tokens=2, num_objects=2)
    with pytest.raises(ValueError, match="token ids"):
        count_cooccurrence([np.array([7])], np.array([0]), num_tokens=2, num_objects=2)
    with pytest.raises(ValueError, match="exponent"):
        DIConvention(exponent=0.3)
    with pytest.raises(ValueError, match="support"):
        log_prior_terms(_toy(), support="some")
