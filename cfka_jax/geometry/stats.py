"""Summary statistics of the geometry studies (numpy, float64): correlations, sign agreement, sparsity, AUC.

* Comparisons (spec §8), for "first vs second": Pearson; signed Spearman; Spearman of |·|; **sign agreement**
  ``mean(sign x == sign y)`` (exact zeros agree only if both are zero); the slope through the origin
  ``Σ first·second / Σ second²`` (regressing the first-named quantity on the second).
* Hoyer sparsity ``(√n − ‖x‖₁/‖x‖₂)/(√n − 1)``, density = 1 − sparsity; NaN for n = 1 or x = 0 (pitfall 25).
* Identification (spec §4.2): ``AUC_i`` = ROC-AUC of one test item's scores against its positives (the
  Mann–Whitney statistic with average ranks for ties), ``Recall@K = |top-K ∩ positives| / K``.
* Spearman uses average ranks for ties; p-values use the t distribution with n − 2 degrees of freedom.
"""

from __future__ import annotations

import math

import numpy as np

from cfka_jax.theory.stats import corr_pvalue, rankdata  # noqa: F401 (re-exported)
from cfka_jax.theory.stats import pearson64 as pearson
from cfka_jax.theory.stats import spearman64 as spearman


def sign_agreement(x, y) -> float:
    """``mean(sign x == sign y)``; a pair of exact zeros agrees, a zero against a nonzero does not."""
    return float(np.mean(np.sign(np.ravel(x)) == np.sign(np.ravel(y))))


def slope(first, second) -> float:
    """Least-squares slope through the origin of ``first`` regressed on ``second``: ``Σxy / Σx²`` (x = second)."""
    f, s = np.ravel(first).astype(np.float64), np.ravel(second).astype(np.float64)
    den = float(s @ s)
    return float(f @ s) / den if den > 0 else float("nan")


def compare(first, second) -> dict[str, float]:
    """The §8 metrics of one comparison."""
    f, s = np.ravel(first), np.ravel(second)
    r, rho = pearson(f, s), spearman(f, s)
    return {"n": float(f.size), "pearson": r, "pearson_p": corr_pvalue(r, f.size), "spearman": rho,
            "spearman_p": corr_pvalue(rho, f.size), "spearman_abs": spearman(np.abs(f), np.abs(s)),
            "sign_agreement": sign_agreement(f, s), "slope": slope(f, s)}


def hoyer(x) -> float:
    """Hoyer sparsity in [0, 1]; NaN (to be logged) for n = 1 or an all-zero vector."""
    x = np.abs(np.ravel(x).astype(np.float64))
    n, l2 = x.size, float(np.linalg.norm(x))
    if n <= 1 or l2 == 0.0:
        return float("nan")
    return (math.sqrt(n) - float(x.sum()) / l2) / (math.sqrt(n) - 1.0)


def cumulative_mass(x) -> np.ndarray:
    """Cumulative share of ``Σ|x|`` with |x| sorted descending."""
    a = np.sort(np.abs(np.ravel(x).astype(np.float64)))[::-1]
    total = a.sum()
    return np.cumsum(a) / total if total > 0 else np.full(a.shape, np.nan)


def auc(scores, positives) -> float:
    """ROC-AUC of ``scores`` for the boolean ``positives`` (Mann–Whitney U with average ranks)."""
    s, pos = np.ravel(scores).astype(np.float64), np.ravel(positives).astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = rankdata(s)
    return (float(r[pos].sum()) - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def recall_at_k(scores, positives, k: int) -> float:
    """``|top-k ∩ positives| / k`` (ties broken by index order of a stable sort)."""
    s, pos = np.ravel(scores), np.ravel(positives).astype(bool)
    top = np.argsort(-s, kind="stable")[:k]
    return float(pos[top].sum()) / k
