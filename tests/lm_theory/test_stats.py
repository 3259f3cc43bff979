"""Correlations and their bootstrap intervals against scipy and against cases with known answers."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from cfka_jax.lm_theory.stats import correlate, pearson, resample_ranks, seed_summary, spearman
from cfka_jax.theory.diversity import spearman as theory_spearman
from tests.tolerances import F64


def _data(n=50, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    b = a + rng.normal(size=n)
    a[3] = a[7] = a[11]  # ties
    return a, b


def test_correlations_match_scipy(x64):
    a, b = _data()
    np.testing.assert_allclose(pearson(a, b), stats.pearsonr(a, b)[0], rtol=F64.direct_rtol)
    np.testing.assert_allclose(spearman(a, b), stats.spearmanr(a, b)[0], rtol=F64.direct_rtol)
    assert np.isnan(pearson(np.ones(5), np.arange(5.0)))


def test_resample_ranks_are_the_ranks_of_the_resampled_data(x64):
    a, b = _data()
    rows = np.random.default_rng(2).integers(a.size, size=(7, a.size))
    ranks = np.asarray(resample_ranks(a, rows))
    for r, row in zip(ranks, rows):  # the resample's own average ranks, duplicates of a point tying
        np.testing.assert_allclose(r, stats.rankdata(a[row]) - 1, rtol=F64.direct_rtol, atol=F64.direct_rtol)
    rho = stats.spearmanr(a[rows[0]], b[rows[0]])[0]  # and Spearman of a resample is Pearson of those ranks
    np.testing.assert_allclose(pearson(ranks[0], np.asarray(resample_ranks(b, rows))[0]), rho, rtol=F64.direct_rtol)
    np.testing.assert_allclose(float(theory_spearman(jnp.asarray(a[rows[0]]), jnp.asarray(b[rows[0]]))), rho,
                               rtol=F64.direct_rtol)


def test_bootstrap_interval():
    rng = np.random.default_rng(1)
    a = rng.normal(size=200)
    b = -a + 0.5 * rng.normal(size=200)
    r = correlate(a, b, num_boot=400, seed=3)
    assert r.n == 200 and r.pearson_ci[0] <= r.pearson <= r.pearson_ci[1] < 0
    assert r.spearman_ci[0] <= r.spearman <= r.spearman_ci[1] < 0
    se = (1 - r.pearson**2) / np.sqrt(200)  # the normal-theory standard error of r
    assert 2 * se < r.pearson_ci[1] - r.pearson_ci[0] < 6 * se  # a 95 % interval is ≈ 3.9 standard errors wide
    se_rho = np.sqrt(1.06) * (1 - r.spearman**2) / np.sqrt(200)  # Fieller et al.'s standard error of rho
    assert 2 * se_rho < r.spearman_ci[1] - r.spearman_ci[0] < 6 * se_rho
    assert correlate(a, b, num_boot=400, seed=3) == r  # deterministic given the seed
    assert correlate(a, b, num_boot=400, seed=4) != r


def test_exact_relation_has_a_degenerate_interval(x64):
    a, _ = _data()
    exact = correlate(a, 2 * a + 1, num_boot=50)
    np.testing.assert_allclose([exact.pearson, *exact.pearson_ci, exact.spearman, *exact.spearman_ci], 1.0,
                               rtol=F64.direct_rtol)


def test_validation_and_seed_summary():
    with pytest.raises(ValueError, match="same length"):
        correlate(np.arange(3.0), np.arange(4.0))
    with pytest.raises(ValueError, match="num_boot"):
        correlate(np.arange(5.0), np.arange(5.0), num_boot=0)
    s = seed_summary([1.0, 2.0, 3.0])
    assert s == {"mean": 2.0, "sd": 1.0, "min": 1.0, "max": 3.0, "n": 3}
