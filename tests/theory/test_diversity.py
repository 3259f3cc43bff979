import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from cfka_jax.theory.diversity import diversity_index, pearson, predicted_attention, spearman, support_mask, v_norm
from cfka_jax.theory.world import SlotSpec, WorldConfig, log_prior_terms, make_world
from tests.tolerances import F64


def test_pearson_spearman_match_scipy(x64, key):
    a = jax.random.normal(key, (40,))
    b = a + 0.5 * jax.random.normal(jax.random.key(1), (40,))
    b = b.at[3].set(b[4])  # a tie
    np.testing.assert_allclose(pearson(a, b), stats.pearsonr(np.asarray(a), np.asarray(b))[0], rtol=F64.direct_rtol)
    np.testing.assert_allclose(spearman(a, b), stats.spearmanr(np.asarray(a), np.asarray(b))[0], rtol=F64.direct_rtol)


def test_di_prefactor_and_sign(x64):
    w = make_world(WorldConfig())
    d1 = diversity_index(w, 1.0, 0.01)
    d2 = diversity_index(w, 1.0, 0.16)
    nx = w.context_tokens.shape[0]
    np.testing.assert_allclose(d2[:nx] / d1[:nx], 16.0**0.25, rtol=F64.direct_rtol)
    q1, q2 = (diversity_index(w, 1.0, ez, exponent=0.5)[:nx] for ez in (0.01, 0.16))
    np.testing.assert_allclose(q2 / q1, 4.0, rtol=F64.direct_rtol)
    assert bool(jnp.all(predicted_attention(w, 1.0, 0.1)[:nx] >= 0))


def test_centring_removes_column_mean(x64):
    w = make_world(WorldConfig())
    v = log_prior_terms(w)
    centred = v - jnp.mean(v, axis=1, keepdims=True)
    nx = w.context_tokens.shape[0]
    np.testing.assert_allclose(v_norm(w)[:nx], jnp.linalg.norm(centred, axis=1)[:nx], rtol=F64.direct_rtol)
    np.testing.assert_allclose(v_norm(w, centre=False)[:nx], jnp.linalg.norm(v, axis=1)[:nx], rtol=F64.direct_rtol)


def test_cooccurrence_support(x64):
    cfg = WorldConfig(num_objects=4, slots=(SlotSpec("relation", 2), SlotSpec("template", 1), SlotSpec("query", 1)),
                      smoothing=0.1)
    w = make_world(cfg)
    m = support_mask(w)
    np.testing.assert_array_equal(m[0], [1, 0, 1, 0])  # relation 0 owns objects 0 and 2
    np.testing.assert_array_equal(m[2], [1, 1, 1, 1])  # the template co-occurs with everything
    with pytest.raises(ValueError):
        support_mask(w, support="some")
