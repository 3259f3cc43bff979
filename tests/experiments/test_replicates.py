"""The replicate summary: mean and spread over PT models and seeds per cell, from the one grouping of the claims
layer (``claims.verdicts.cells``) that the docs' record tables use too."""

import pytest

from cfka_jax.claims.verdicts import cells
from cfka_jax.experiments.replicates import summary

ROWS = [{"kind": "a", "pt": "s0", "seed": 0, "acc": 60.0}, {"kind": "a", "pt": "s0", "seed": 1, "acc": 62.0},
        {"kind": "a", "pt": "s1", "seed": 0, "acc": 45.0}, {"kind": "a", "pt": "s1", "seed": 1, "acc": 49.0},
        {"kind": "b", "pt": "s0", "seed": 0, "acc": None}, {"kind": "b", "pt": "s1", "seed": 0, "acc": 10.0}]


def test_cells_group_by_factor_and_pt_in_first_seen_order():
    got = cells(ROWS, ("kind",), ("acc",))
    assert [(c.factors, c.runs.n, c.seeds) for c in got] == [({"kind": "a"}, 4, 2), ({"kind": "b"}, 1, 1)]
    assert {pt: s.mean for pt, s in got[0].by_pt.items()} == {"s0": 61.0, "s1": 47.0}
    assert list(got[1].by_pt) == ["s1"]  # the row without the metric is left out of it


def test_summary_reports_the_pt_models_apart_and_the_widest_seed_range():
    a, b = summary(ROWS, ("kind",), ("acc",))
    assert a == {"kind": "a", "metric": "acc", "mean": 54.0, "lo": 45.0, "hi": 62.0, "n": 4, "pts": 2, "seeds": 2,
                 "pt_mean_lo": 47.0, "pt_mean_hi": 61.0, "seed_range": 4.0}
    assert b["n"] == 1 and b["seed_range"] == 0.0
    assert summary(ROWS, ("kind",), ("missing",)) == []


def test_summary_mean_is_over_every_run_not_over_pt_means():
    rows = ROWS[:3]  # PT s0 has two runs, s1 one
    (a,) = summary(rows, ("kind",), ("acc",))
    assert a["mean"] == pytest.approx((60 + 62 + 45) / 3, abs=1e-3)
    assert (a["pt_mean_lo"], a["pt_mean_hi"]) == (45.0, 61.0)
