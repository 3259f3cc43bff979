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


def pearson(x, y) -> float:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    xc, yc = x - x.mean(), y - y.mean()
    den = math.sqrt(float(xc @ xc) * float(yc @ yc))
    return float(xc @ yc) / den if den > 0 else float("nan")


def spearman(x, y) -> float:
    return pearson(rankdata(np.ravel(x)), rankdata(np.ravel(y)))


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
