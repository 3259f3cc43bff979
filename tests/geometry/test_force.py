"""Force, energy, the shared shift and the energy bounds (spec §2, §5.1–§5.2; pitfalls 1, 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cfka_jax.geometry.force import (
    band_counts,
    energy,
    energy_from_logprobs,
    force,
    force_from_logprobs,
    rival_max,
    target_bound,
    to_targets,
)
from tests.tolerances import F32, F64

DRAWS_PER_EXAMPLE, EXAMPLES = 160, 80  # 12,800 distributions per run of the property test


def test_to_targets_keys_position_p_by_the_value_at_p_minus_1():
    x = jnp.arange(2 * 5 * 3, dtype=jnp.float32).reshape(2, 5, 3)
    y = jax.jit(to_targets)(x)
    np.testing.assert_array_equal(y[:, 1:], x[:, :-1])
    np.testing.assert_array_equal(y[:, 0], jnp.zeros((2, 3)))
    np.testing.assert_array_equal(to_targets(jnp.asarray([[7, 8, 9]])), jnp.asarray([[0, 7, 8]]))


def test_force_is_the_logprob_gradient_of_the_target_scored_from_p_minus_1(key):
    logits = jax.random.normal(key, (2, 5, 7))
    tokens = jax.random.randint(jax.random.fold_in(key, 1), (2, 5), 0, 7)
    g = jax.jit(force)(logits, tokens)
    grad = jax.vmap(jax.vmap(jax.grad(lambda z, y: jax.nn.log_softmax(z)[y])))
    ref = grad(logits[:, :-1], tokens[:, 1:])  # the target at p from the logits at p − 1
    np.testing.assert_allclose(g[:, 1:], ref, rtol=F32.exact_rtol, atol=F32.op_atol)
    np.testing.assert_array_equal(g[:, 0], jnp.zeros((2, 7)))
    np.testing.assert_array_equal(force(logits, tokens, nll=True), -g)
    assert bool(jnp.all(jnp.take_along_axis(g[:, 1:], tokens[:, 1:, None], -1) >= 0))  # target component 1 − π_y
    np.testing.assert_allclose(jnp.sum(g, axis=-1), jnp.zeros((2, 5)), atol=F32.op_atol)


def test_target_at_p_depends_only_on_the_logits_at_p_minus_1(key):
    logits = jax.random.normal(key, (1, 6, 5))
    tokens = jnp.asarray([[0, 1, 2, 3, 4, 0]], jnp.int32)
    bumped = logits.at[0, 2].add(3.0)  # the logits that score the target at position 3
    diff = jnp.any(force(bumped, tokens) != force(logits, tokens), axis=-1)[0]
    assert diff.tolist() == [False, False, False, True, False, False]


@pytest.mark.slow  # also a proof check (check_geometry_energy, 1e5 draws in float64)
def test_energy_is_the_squared_force_norm_in_0_2(key):
    logits = 4.0 * jax.random.normal(key, (3, 6, 11))
    tokens = jax.random.randint(jax.random.fold_in(key, 2), (3, 6), 0, 11)
    e, g = jax.jit(energy)(logits, tokens), force(logits, tokens)
    np.testing.assert_allclose(e, jnp.sum(g * g, axis=-1), rtol=F32.exact_rtol, atol=F32.op_atol)
    assert bool(jnp.all((e >= 0) & (e <= 2 + F32.op_atol)))


def test_energy_limits_and_band_counts():
    y = jnp.asarray([0, 0, 0])
    probs = jnp.asarray([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    lp = jnp.log(jnp.clip(probs, 1e-30, 1.0))
    e = energy_from_logprobs(lp, y)
    np.testing.assert_allclose(e, [0.0, 2.0, 0.5], atol=F32.op_atol)
    counts = band_counts(e, jnp.ones(3))
    assert {k: float(v) for k, v in counts.items()} == {"confident": 2.0, "forking": 0.0, "extreme": 1.0}


def _distributions(vocab: int, kind: str, spread: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "dirichlet":
        p = rng.dirichlet(np.full(vocab, spread), size=DRAWS_PER_EXAMPLE)
        lp = np.log(np.clip(p, 1e-300, 1.0))
    else:
        z = spread * rng.standard_normal((DRAWS_PER_EXAMPLE, vocab))
        lp = z - np.logaddexp.reduce(z, axis=-1, keepdims=True)
    return lp, rng.integers(0, vocab, DRAWS_PER_EXAMPLE)


@jax.jit
def _bound_excess(lp, y):
    """Largest excess over each bound: rival ≥ E − 1 when E > 1; E ≤ 2s²; E ≥ s²; π_y ≤ 1 − √(E/2) off E ≈ 0."""
    e = energy_from_logprobs(lp, y)
    probs = jnp.exp(lp)
    pi_y = jnp.take_along_axis(probs, y[:, None], -1)[:, 0]
    s = 1.0 - pi_y
    safe = e > 1e-6  # the square root turns a 1e-16 rounding of E ≈ 0 into 1e-8; the squared forms cover E ≈ 0
    return {"competitor": jnp.max(jnp.where(e > 1.0, e - 1.0 - rival_max(probs, y), -1.0)),
            "upper_squared": jnp.max(e - 2.0 * s * s), "lower_squared": jnp.max(s * s - e),
            "upper": jnp.max(jnp.where(safe, pi_y - target_bound(e), -1.0)),
            "is_float64": jnp.where(e.dtype == jnp.float64, -1.0, 1.0)}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(vocab=st.sampled_from([2, 3, 7, 64]), kind=st.sampled_from(["dirichlet", "gauss"]),
       spread=st.floats(0.01, 30.0), seed=st.integers(0, 2**31 - 1))
def test_energy_bounds_hold_for_every_draw(x64, vocab, kind, spread, seed):
    """E > 1 ⇒ some rival ≥ E − 1; s² ≤ E ≤ 2s² (i.e. 1 − √E ≤ π_y ≤ 1 − √(E/2)); 160 distributions a draw."""
    lp, y = _distributions(vocab, kind, spread, seed)
    excess = _bound_excess(jnp.asarray(lp, jnp.float64), jnp.asarray(y))
    assert {k: float(v) <= F64.exact_rtol for k, v in excess.items()} == dict.fromkeys(excess, True), excess


@pytest.mark.parametrize("tau, rival, pi_bound", [(1.8, 0.8, 0.051), (1.5, 0.5, 0.134), (1.0, None, 0.293)])
def test_threshold_table(tau, rival, pi_bound):
    assert abs(float(target_bound(jnp.asarray(tau))) - pi_bound) < 5e-4
    if rival is not None:
        assert tau - 1.0 == pytest.approx(rival)


def test_tight_cases_attain_the_bounds(x64):
    y = jnp.zeros((4,), jnp.int32)
    s = jnp.asarray([0.1, 0.37, 0.8, 1.0])
    probs = jnp.zeros((4, 5)).at[:, 0].set(1.0 - s).at[:, 3].set(s)  # two-point distributions
    e = energy_from_logprobs(jnp.log(jnp.clip(probs, 1e-300, 1.0)), y)
    np.testing.assert_allclose(target_bound(e), 1.0 - s, atol=F64.exact_rtol)
    np.testing.assert_allclose(rival_max(probs, y)[-1], e[-1] - 1.0, atol=F64.exact_rtol)  # π = e_k: E = 2, m = 1
    np.testing.assert_allclose(force_from_logprobs(jnp.log(jnp.clip(probs, 1e-300, 1.0)), y)[:, 0], s,
                               atol=F64.exact_rtol)
