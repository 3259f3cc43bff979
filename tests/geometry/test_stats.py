"""Summary statistics: ranks with ties, correlations and p-values, sign agreement, Hoyer, AUC, Recall@K."""

import itertools
import math

import numpy as np
import pytest

from cfka_jax.geometry import stats
from tests.tolerances import F64


def test_ranks_average_ties_and_spearman_is_pearson_of_ranks():
    assert stats.rankdata([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=50), rng.normal(size=50)
    y[:10] = x[:10]
    np.testing.assert_allclose(stats.spearman(x, y), np.corrcoef(stats.rankdata(x), stats.rankdata(y))[0, 1],
                               rtol=F64.exact_rtol)
    np.testing.assert_allclose(stats.pearson(x, 2 * x + 1), 1.0, rtol=F64.exact_rtol)
    assert math.isnan(stats.pearson(np.ones(4), np.arange(4)))


def test_correlation_p_values_against_closed_forms():
    # n = 3 (one degree of freedom): p = 1 − (2/π)·atan(|t|) with t = r·√(1/(1 − r²)).
    for r in (0.2, 0.5, 0.9):
        t = r / math.sqrt(1 - r * r)
        np.testing.assert_allclose(stats.corr_pvalue(r, 3), 1 - 2 / math.pi * math.atan(t), rtol=1e-9)
    # n = 4 (two degrees of freedom): p = 1 − |t|/√(2 + t²) with t = r·√(2/(1 − r²)).
    for r in (0.3, 0.7):
        t = r * math.sqrt(2 / (1 - r * r))
        np.testing.assert_allclose(stats.corr_pvalue(r, 4), 1 - abs(t) / math.sqrt(2 + t * t), rtol=1e-9)
    assert stats.corr_pvalue(0.0, 30) == pytest.approx(1.0) and stats.corr_pvalue(1.0, 30) == 0.0
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=40), rng.normal(size=40) + 0.3 * np.arange(40) / 40
    ref = scipy_stats.spearmanr(x, y)
    np.testing.assert_allclose(stats.corr_pvalue(stats.spearman(x, y), 40), ref.pvalue, rtol=1e-9)


def test_sign_agreement_slope_and_compare():
    assert stats.sign_agreement([1.0, -2.0, 0.0, 0.0], [3.0, -1.0, 0.0, 5.0]) == 0.75  # 0 vs 5 disagrees
    assert stats.slope([2.0, 4.0], [1.0, 2.0]) == 2.0  # first regressed on second
    out = stats.compare([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.5])
    assert out["n"] == 4.0 and out["spearman"] == 1.0 and out["sign_agreement"] == 1.0


def test_hoyer_sparsity_limits_and_nan_cases():
    assert stats.hoyer([0.0, 0.0, 5.0, 0.0]) == pytest.approx(1.0)
    assert stats.hoyer([1.0, -1.0, 1.0, 1.0]) == pytest.approx(0.0)
    assert math.isnan(stats.hoyer([3.0])) and math.isnan(stats.hoyer([0.0, 0.0]))
    np.testing.assert_allclose(stats.cumulative_mass([1.0, -3.0, 0.0]), [0.75, 1.0, 1.0])


def test_auc_is_the_pairwise_win_rate_and_recall_at_k():
    rng = np.random.default_rng(2)
    scores = np.round(rng.normal(size=30), 1)  # ties included
    pos = rng.random(30) < 0.4
    wins = [1.0 if a > b else 0.5 if a == b else 0.0
            for a, b in itertools.product(scores[pos], scores[~pos])]
    np.testing.assert_allclose(stats.auc(scores, pos), np.mean(wins), rtol=F64.exact_rtol)
    assert stats.recall_at_k([0.9, 0.1, 0.8, 0.7], [True, False, False, True], 2) == 0.5
    assert math.isnan(stats.auc([1.0, 2.0], [True, True]))
