"""Pearson and Spearman correlations with percentile-bootstrap intervals: the one home of both for lm_theory.

The statistics are the theory's (``theory/stats.pearson`` / ``spearman``: Spearman's rho is Pearson's r of
average ranks, ties sharing their mean rank), run here in JAX's default float dtype (float32 unless x64 is on;
the tests check them against scipy under x64). :func:`correlate` adds the bootstrap: it resamples the n points
(token types, facts) with replacement ``num_boot`` times from a fixed seed and reports the central ``level``
interval of each resampled statistic. Spearman re-ranks every resample; the ranks of a resample come from one sort
of the data (:func:`resample_ranks`: a point's average rank is the number of drawn points below its value plus
half of the draws that tie with it, minus ½), so a resample costs O(n) instead of the O(n²) of
``theory/stats._ranks``, and equals that function's ranks of the resampled data. Across the seeds of an
ensemble a statistic's mean and standard deviation are reported as well (:func:`seed_summary`).

Shapes: N points, I bootstrap resamples, G distinct values.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.theory.stats import pearson as _pearson
from cfka_jax.theory.stats import pearson_rows as _pearson_rows
from cfka_jax.theory.stats import spearman as _spearman

_both = jax.jit(lambda a, b: (_pearson(a, b), _spearman(a, b)))
_pearson_I = jax.jit(jax.vmap(_pearson))


def _as_float(a) -> jax.Array:
    a = np.asarray(a)
    return jnp.asarray(a, jnp.result_type(float))


def pearson(a, b) -> float:
    """Pearson's r (``theory/stats.pearson``; nan when either input is constant)."""
    return float(_both(_as_float(a), _as_float(b))[0])


def spearman(a, b) -> float:
    """Spearman's rho (``theory/stats.spearman``: Pearson's r of average ranks)."""
    return float(_both(_as_float(a), _as_float(b))[1])


@functools.partial(jax.jit, static_argnames="num_groups")
def _resample_ranks_IN(group_N: jax.Array, rows_IN: jax.Array, num_groups: int) -> jax.Array:
    drawn_IN = group_N[rows_IN]
    counts_IG = jax.vmap(lambda g: jnp.zeros(num_groups, jnp.result_type(float)).at[g].add(1.0))(drawn_IN)
    below_IG = jnp.cumsum(counts_IG, axis=-1) - counts_IG
    rank_IG = below_IG + (counts_IG - 1.0) / 2.0
    return jnp.take_along_axis(rank_IG, drawn_IN, axis=-1)


def resample_ranks(a, rows_IN) -> jax.Array:
    """Average ranks 0 … N−1 of every resample ``a[rows]`` (I, N), ties sharing their mean rank (module docstring).

    Args:
      a: the data (N,).
      rows_IN: integer indices into ``a``, one resample per row.
    """
    values, group_N = np.unique(np.asarray(a), return_inverse=True)
    return _resample_ranks_IN(jnp.asarray(group_N.reshape(-1), jnp.int32), jnp.asarray(rows_IN, jnp.int32),
                              num_groups=int(values.size))


@dataclasses.dataclass(frozen=True)
class Correlation:
    """Pearson / Spearman of n points with bootstrap intervals (lo, hi)."""

    n: int
    pearson: float
    spearman: float
    pearson_ci: tuple[float, float]
    spearman_ci: tuple[float, float]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def correlate(a, b, *, num_boot: int = 1000, seed: int = 0, level: float = 0.95) -> Correlation:
    """Both correlations of (a, b) and their percentile-bootstrap intervals.

    Raises:
      ValueError: different lengths, fewer than 3 points, ``num_boot`` < 1 or ``level`` outside (0, 1).
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 3:
        raise ValueError(f"need two 1-D arrays of the same length >= 3, got {a.shape}, {b.shape}")
    if num_boot < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"need num_boot >= 1 and 0 < level < 1, got {num_boot}, {level}")
    rows = np.random.default_rng(seed).integers(a.size, size=(num_boot, a.size))
    a_j, b_j = _as_float(a), _as_float(b)
    boot_p = np.asarray(_pearson_I(a_j[rows], b_j[rows]), np.float64)
    boot_s = np.asarray(_pearson_I(resample_ranks(a, rows), resample_ranks(b, rows)), np.float64)
    q = (100 * (1 - level) / 2, 100 * (1 + level) / 2)
    ci = lambda x: (tuple(float(v) for v in np.nanpercentile(x, q)) if np.isfinite(x).any()  # noqa: E731
                    else (float("nan"), float("nan")))
    p, s = _both(a_j, b_j)
    return Correlation(int(a.size), float(p), float(s), ci(boot_p), ci(boot_s))


def seed_summary(values) -> dict:
    """``{"mean", "sd", "min", "max", "n"}`` of one statistic over the members of an ensemble (sd with ddof 1)."""
    v = np.asarray(values, np.float64)
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "min": float(v.min()), "max": float(v.max()), "n": int(v.size)}


def _residual_IN(y_IN: np.ndarray, x_INC: np.ndarray) -> np.ndarray:
    """y minus its least-squares fit on [1, x] within each row (resample)."""
    design = np.concatenate([np.ones(x_INC.shape[:2] + (1,)), x_INC], axis=-1)
    gram = np.einsum("inc,ind->icd", design, design) + 1e-12 * np.eye(design.shape[-1])
    beta = np.linalg.solve(gram, np.einsum("inc,in->ic", design, y_IN)[..., None])[..., 0]
    return y_IN - np.einsum("inc,ic->in", design, beta)


def partial_correlate(a, b, covariates, *, num_boot: int = 1000, seed: int = 0, level: float = 0.95) -> Correlation:
    """Partial Pearson / Spearman of (a, b) given the covariates, with percentile-bootstrap intervals.

    Pearson: r of the residuals of a and b after a least-squares fit on [1, covariates]; Spearman: the same on
    the average ranks of every variable (ranks re-computed in each resample, :func:`resample_ranks`). Runs in
    NumPy float64 (the residual fits are small solves).

    Args:
      a, b: (N,) the two variables.
      covariates: (N, C) the variables controlled for.

    Raises:
      ValueError: mismatched shapes, fewer than C + 3 points, ``num_boot`` < 1 or ``level`` outside (0, 1).
    """
    a, b, x = np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(covariates, np.float64)
    if a.shape != b.shape or a.ndim != 1 or x.ndim != 2 or x.shape[0] != a.size or a.size < x.shape[1] + 3:
        raise ValueError(f"need a, b of shape (N,) and covariates (N, C) with N >= C + 3, got {a.shape}, "
                         f"{b.shape}, {x.shape}")
    if num_boot < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"need num_boot >= 1 and 0 < level < 1, got {num_boot}, {level}")
    rows = np.concatenate([np.arange(a.size)[None], np.random.default_rng(seed).integers(a.size, size=(num_boot,
                                                                                                      a.size))])
    ranks = lambda v: np.asarray(resample_ranks(v, rows), np.float64)  # noqa: E731
    p = _pearson_rows(_residual_IN(a[rows], x[rows]), _residual_IN(b[rows], x[rows]))
    rx = np.stack([ranks(x[:, c]) for c in range(x.shape[1])], axis=-1)
    s = _pearson_rows(_residual_IN(ranks(a), rx), _residual_IN(ranks(b), rx))
    q = (100 * (1 - level) / 2, 100 * (1 + level) / 2)
    ci = lambda v: tuple(float(t) for t in np.nanpercentile(v, q))  # noqa: E731
    return Correlation(int(a.size), float(p[0]), float(s[0]), ci(p[1:]), ci(s[1:]))
