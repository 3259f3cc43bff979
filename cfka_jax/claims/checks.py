"""Helpers for the recurring shapes of a check; each measures one number and returns a ``Claim``.

* ``closed_form_vs_simulation``: max_t ‖sim(t) − predict(t)‖ / scale over the logged times;
* ``fitted_order`` / ``convergence_order``: the slope p of log error vs log step (error ∝ hᵖ), least squares,
  with a Student-t confidence interval from the residuals; the claim measures |p − expected|;
* ``drift_vs_step``: a conserved quantity's drift measured at several step sizes, then its fitted order;
* ``gradient_vs_finite_differences``: ⟨∇f(x), v⟩ against (f(x + εv) − f(x − εv)) / 2ε along random unit
  directions v (the central difference has error O(ε²) · ‖∇³f‖, plus rounding O(u · |f| / ε));
* ``property_over_worlds``: the worst violation of a property over random draws (one PRNG key each).

They are plain Python around your jitted functions: no global state, float64 expected (``require_x64``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from cfka_jax.claims.record import Claim, holds
from cfka_jax.theory.predictor import Predictor


def closed_form_vs_simulation(lemma: str, statement: str, predict: Predictor, times, simulated, tolerance: float,
                              *, scale=1.0, detail: str = "") -> Claim:
    """max_t ‖simulated[t] − predict(times)[t]‖ / scale ≤ tolerance (norm over the trailing axis)."""
    diff = jnp.asarray(simulated) - predict(jnp.asarray(times))
    err = jnp.max(jnp.linalg.norm(diff.reshape(diff.shape[0], -1), axis=-1)) / scale
    return holds(lemma, statement, err, tolerance, detail)


@dataclasses.dataclass(frozen=True)
class Order:
    """A fitted order p (error ∝ stepᵖ) with its standard error and a two-sided confidence interval."""

    order: float
    stderr: float
    low: float
    high: float
    confidence: float

    def __str__(self) -> str:
        return f"{self.order:.3f} ({self.confidence:.0%} interval [{self.low:.3f}, {self.high:.3f}])"


def fitted_order(steps: Sequence[float], errors: Sequence[float], *, confidence: float = 0.95) -> Order:
    """Least-squares slope of log(errors) on log(steps) and its t-interval (n − 2 degrees of freedom)."""
    from scipy import stats

    x, y = np.log(np.asarray(steps, float)), np.log(np.asarray(errors, float))
    if x.size < 3:
        raise ValueError(f"a fitted order with an interval needs at least 3 step sizes, got {x.size}")
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    se = float(np.sqrt(np.sum(resid**2) / (x.size - 2) / np.sum((x - x.mean()) ** 2)))
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 2)) * se
    return Order(float(slope), se, float(slope) - half, float(slope) + half, confidence)


def convergence_order(lemma: str, statement: str, steps, errors, expected: float, tolerance: float,
                      *, detail: str = "") -> Claim:
    """|fitted order − expected| ≤ tolerance; the detail gives the order and its 95 % interval."""
    fit = fitted_order(steps, errors)
    text = f"fitted order {fit}" + (f"; {detail}" if detail else "")
    return holds(lemma, statement, abs(fit.order - expected), tolerance, text)


def drift_vs_step(lemma: str, statement: str, drift: Callable[[float], float], steps, expected: float,
                  tolerance: float) -> tuple[Claim, list[float]]:
    """Measures ``drift(h)`` at every step size h, then ``convergence_order``; returns (claim, drifts)."""
    drifts = [float(drift(h)) for h in steps]
    text = "drift " + ", ".join(f"h={h:g}: {d:.2e}" for h, d in zip(steps, drifts))
    return convergence_order(lemma, statement, steps, drifts, expected, tolerance, detail=text), drifts


def gradient_vs_finite_differences(lemma: str, statement: str, f: Callable, x, tolerance: float, *, key,
                                   grad: Callable | None = None, eps: float = 1e-5, directions: int = 8) -> Claim:
    """Max relative gap between ⟨grad(x), v⟩ and the central difference along ``directions`` random unit v.

    ``grad`` defaults to ``jax.grad(f)``; pass a hand-derived gradient to check it. Relative to
    max(|⟨∇f, v⟩|, ‖∇f‖ · 1e-3) so that a direction nearly orthogonal to ∇f does not divide by ~0.
    """
    flat, unravel = ravel_pytree(x)
    g_flat = ravel_pytree((grad or jax.grad(f))(x))[0]
    f = jax.jit(f)
    vs = jax.random.normal(key, (directions, flat.size), flat.dtype)
    vs = vs / jnp.linalg.norm(vs, axis=-1, keepdims=True)
    fd = jnp.stack([(f(unravel(flat + eps * v)) - f(unravel(flat - eps * v))) / (2 * eps) for v in vs])
    an = vs @ g_flat
    err = jnp.max(jnp.abs(fd - an) / jnp.maximum(jnp.abs(an), 1e-3 * jnp.linalg.norm(g_flat)))
    return holds(lemma, statement, err, tolerance, f"{directions} random directions, ε={eps:g}")


def property_over_worlds(lemma: str, statement: str, violation: Callable[[jax.Array], float], tolerance: float,
                         *, draws: int = 8, seed: int = 0) -> Claim:
    """max over ``draws`` keys of ``violation(key)`` ≤ tolerance (build the random world from the key)."""
    keys = jax.random.split(jax.random.key(seed), draws)
    values = [float(violation(k)) for k in keys]
    worst = int(np.argmax(values))
    return holds(lemma, statement, values[worst], tolerance, f"worst of {draws} draws: #{worst} ({values[worst]:.2e})")
