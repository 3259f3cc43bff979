import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.theory import dynamics as dyn
from cfka_jax.theory.model import YZParams
from cfka_jax.theory.optimum import reference_optimum
from cfka_jax.theory.train import Rates, SGDConfig, train_sgd
from cfka_jax.theory.world import WorldConfig, make_world
from tests.tolerances import F64


def _setup():
    w = make_world(WorldConfig())
    z = jnp.linspace(0.6, 1.8, w.vocab_size)
    Z = jnp.zeros((w.vocab_size,) * 2).at[:, w.query_token].set(z)
    U = reference_optimum(w, z)
    return w, z, Z, U, dyn.error_hessian(w, U, Z)


def test_hessian_is_psd_and_its_null_space_is_the_logit_null_space(x64):
    w, z, Z, U, K = _setup()
    np.testing.assert_allclose(K, K.T, atol=F64.zero_sum_atol)
    spec = dyn.spectrum(K)
    assert float(jnp.min(spec.evals)) > -F64.cancel_atol
    num_x, num_o = w.context_tokens.shape[0], w.objects.shape[0]
    # null space: X column shifts + (slots − 1)·(O − 1) slot transfers
    slots = 4
    assert int(jnp.sum(~spec.positive)) == num_x + (slots - 1) * (num_o - 1)


def test_predictor_limits_and_vectorisation(x64, key):
    w, z, Z, U, K = _setup()
    e0 = jax.random.normal(key, (K.shape[0],))
    for mode in ("gd", "flow"):
        pred = dyn.error_evolution(K, e0, 0.9, mode=mode)
        np.testing.assert_allclose(pred(0), e0, rtol=F64.exact_rtol)
        ts = jnp.asarray([0.0, 3.0, 50.0])
        np.testing.assert_allclose(pred(ts), jnp.stack([pred(t) for t in ts]), rtol=F64.exact_rtol)
        np.testing.assert_allclose(pred(1e7), dyn.null_projection(K, e0), atol=F64.limit_atol)
        assert pred(jnp.zeros((2, 3))).shape == (2, 3, K.shape[0])


def test_gd_step_matches_linearisation(x64, key):
    w, z, Z, U, K = _setup()
    e0 = 1e-5 * jax.random.normal(key, (K.shape[0],))
    Y0 = U.at[w.objects, : w.context_tokens.shape[0]].add(dyn.unflatten_error(e0, w))
    final, _ = train_sgd(YZParams(Y0, Z), w, key, Rates(0.5, 0.0), cfg=SGDConfig(steps=3), observe=lambda p: ())
    got = dyn.flatten_error(final.Y, U, w)
    np.testing.assert_allclose(got, dyn.error_evolution(K, e0, 0.5)(3),
                               atol=F64.linearisation_rtol * float(jnp.max(jnp.abs(e0))))


def test_covariance_factory_tends_to_stationary(x64):
    w, z, Z, U, K = _setup()
    cov = dyn.error_covariance(K, 0.5, 8)
    np.testing.assert_allclose(cov(0), 0.0, atol=F64.zero_atol)
    np.testing.assert_allclose(cov(1), (0.5**2 / 8) * K, atol=F64.cancel_atol)
    np.testing.assert_allclose(cov(1e6), dyn.stationary_covariance(K, 0.5, 8), atol=F64.limit_atol)


def test_token_block_is_a_covariance(x64):
    w, z, Z, U, K = _setup()
    b = dyn.token_block(w, z, 0)
    # rows of diag(p) − ppᵀ sum to 0
    np.testing.assert_allclose(jnp.sum(b.H_tilde, axis=1), 0.0, atol=F64.zero_sum_atol)
    assert 0 < float(b.delta) <= 1
    np.testing.assert_allclose(dyn.token_factor(b, 0.3, z_power=2),
                               jnp.eye(5) - 0.3 * z[0] ** 2 * b.delta * b.H_tilde, rtol=F64.exact_rtol)
    pred = dyn.token_error_evolution(b, jnp.ones(5), 0.3)
    np.testing.assert_allclose(pred(2), dyn.token_factor(b, 0.3, z_power=2) @ dyn.token_factor(b, 0.3, z_power=2)
                               @ jnp.ones(5), rtol=F64.exact_rtol)
