"""Correlation statistics, the one home of Pearson's r, Spearman's rho and their p-values for the package.

    r = Σ (a − ā)(b − b̄) / √(Σ (a − ā)² Σ (b − b̄)²),      rho = r of the average ranks (ties share their mean rank)

Two forms of the same definitions: traceable JAX functions in the inputs' dtype (:func:`pearson`,
:func:`spearman`; used under jit/vmap by the Diversity Index checks and ``lm_theory/stats``' bootstrap) and NumPy
float64 host functions (:func:`pearson64`, :func:`spearman64`, :func:`rankdata`, :func:`pearson_rows`,
:func:`corr_pvalue`; the geometry studies and partial correlations). p-values use the t distribution with n − 2
degrees of freedom. Shapes: N points, I rows (resamples).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from cfka_jax.shapes import Array, Float


def pearson(a: Float[Array, " N"], b: Float[Array, " N"]) -> Float[Array, ""]:
    """Pearson's r, traceable (jit / vmap / grad) in the inputs' dtype."""
    a, b = a - jnp.mean(a), b - jnp.mean(b)
    return jnp.sum(a * b) / jnp.sqrt(jnp.sum(a**2) * jnp.sum(b**2))


def _ranks(a: Float[Array, " N"]) -> Float[Array, " N"]:
    """Average ranks (ties share the mean rank), as Spearman's rho needs."""
    order = jnp.argsort(a)
    ranks = jnp.empty_like(a).at[order].set(jnp.arange(a.shape[0], dtype=a.dtype))
    eq = (a[:, None] == a[None, :]).astype(a.dtype)
    return (eq @ ranks) / jnp.sum(eq, axis=-1)


def spearman(a: Float[Array, " N"], b: Float[Array, " N"]) -> Float[Array, ""]:
    """Spearman's rho, traceable: Pearson's r of :func:`_ranks`."""
    return pearson(_ranks(a), _ranks(b))


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    sx = x[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sx)) + 1]
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x))
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = 0.5 * (s + e - 1) + 1.0
    return ranks


def pearson64(x, y) -> float:
    """Pearson's r in NumPy float64 (nan when either input is constant)."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    xc, yc = x - x.mean(), y - y.mean()
    den = math.sqrt(float(xc @ xc) * float(yc @ yc))
    return float(xc @ yc) / den if den > 0 else float("nan")


def spearman64(x, y) -> float:
    """Spearman's rho in NumPy float64: Pearson's r of average ranks."""
    return pearson64(rankdata(np.ravel(x)), rankdata(np.ravel(y)))


def corr_pvalue(r: float, n: int) -> float:
    """Two-sided p-value of a correlation r over n points (t test, n − 2 degrees of freedom)."""
    if n < 3 or not np.isfinite(r):
        return float("nan")
    if abs(r) >= 1.0:
        return 0.0
    df = n - 2
    t2 = r * r * df / (1.0 - r * r)
    return _betainc(df / 2.0, 0.5, df / (df + t2))


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) by Lentz's continued fraction (Numerical Recipes §6.4)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f / a


def pearson_rows(a_IN: np.ndarray, b_IN: np.ndarray) -> np.ndarray:
    """Pearson's r of every row pair (NumPy float64; nan for a constant row)."""
    a, b = a_IN - a_IN.mean(-1, keepdims=True), b_IN - b_IN.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(-1) / np.sqrt((a * a).sum(-1) * (b * b).sum(-1))
