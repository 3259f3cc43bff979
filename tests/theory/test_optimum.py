import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.theory.model import YZParams, init_yz, yz_logits
from cfka_jax.theory.optimum import (bayes_posterior, column_centred_distance, logit_gap, posterior_kl,
                                     query_attention, reference_optimum)
from cfka_jax.theory.train import Rates, SGDConfig, train_sgd
from cfka_jax.theory.world import WorldConfig, make_world
from tests.tolerances import F64


def _setup(key):
    w = make_world(WorldConfig())
    z = jax.random.uniform(key, (w.vocab_size,), minval=-2.0, maxval=2.0)
    z = jnp.where(jnp.abs(z) < 0.2, 0.5, z)
    Z = jnp.zeros((w.vocab_size,) * 2).at[:, w.query_token].set(z)
    return w, z, Z


def test_u_reproduces_bayes_posterior(x64, key):
    w, z, Z = _setup(key)
    U = jax.jit(reference_optimum)(w, z)
    probs = jax.nn.softmax(yz_logits(YZParams(U, Z), w.contexts, w.objects), axis=-1)
    np.testing.assert_allclose(probs, bayes_posterior(w), rtol=F64.solve_rtol)
    assert float(posterior_kl(YZParams(U, Z), w)) < F64.exact_rtol


def test_u_logit_sum_is_log_joint(x64, key):
    """Σ_{s∈X} a_s u_{o,s} = ln Pr(o, X) (spec §2.3, derived check)."""
    w, z, Z = _setup(key)
    U = reference_optimum(w, z)
    logits = yz_logits(YZParams(U, Z), w.contexts, w.objects)
    np.testing.assert_allclose(logits, jnp.log(w.joint), rtol=F64.direct_rtol)


def test_gap_zero_for_null_moves_and_positive_otherwise(x64, key):
    w, z, Z = _setup(key)
    U = reference_optimum(w, z)
    shift = jnp.ones((w.vocab_size, 1)) * jnp.arange(w.vocab_size, dtype=U.dtype)[None, :]
    assert float(logit_gap(U + shift, U, Z, w)) < F64.cancel_atol
    assert float(column_centred_distance(U + shift, U, w)) < F64.cancel_atol
    bump = jnp.zeros_like(U).at[w.objects[0], 0].set(1.0)
    assert float(logit_gap(U + bump, U, Z, w)) > 0.1


def test_training_reaches_posterior_and_u_modulo_null_space(x64, key):
    w = make_world(WorldConfig())
    p0 = init_yz(key, w.vocab_size, scale=1e-3)
    cfg = SGDConfig(steps=8000, log_every=8000)
    obs = lambda p: logit_gap(p.Y, reference_optimum(w, query_attention(p.Z, w)), p.Z, w)
    final, gaps = jax.jit(lambda p: train_sgd(p, w, key, Rates(1.0, 0.1), cfg=cfg, observe=obs))(p0)
    assert float(posterior_kl(final, w)) < 1e-6  # ~1 at init
    assert float(gaps[-1]) < 0.05 * float(gaps[0])
