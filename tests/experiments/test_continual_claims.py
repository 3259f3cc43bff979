"""The theory-model continual claims: the script on a tiny config writes records that load back, and the verdict
rules of ``claims/papers/cfka_theory.py`` judge them (and synthetic records, one per branch that matters)."""

import dataclasses

import numpy as np
import pytest

from cfka_jax.claims.papers import cfka_theory as ct
from cfka_jax.claims.results import Record, load_records
from cfka_jax.claims.verdicts import VERDICTS
from cfka_jax.experiments import continual_claims as cc

TINY = cc.Config(worlds=(0, 1), alphas=(0.5, 0.9, 1.0), ks=(0.0, 1.0), seeds=2, steps=40, log_every=10,
                 gd_steps=40, gd_log_every=10, osc_seeds=6, osc_steps=10, bootstrap=50)


def test_config_refuses_what_the_claims_cannot_use():
    with pytest.raises(ValueError, match="0.9"):
        cc.Config(alphas=(0.5, 0.8, 1.0))
    with pytest.raises(ValueError, match="0.0"):
        cc.Config(ks=(1.0, 10.0))
    with pytest.raises(ValueError, match="2 random worlds"):
        cc.Config(worlds=(0,))
    with pytest.raises(ValueError, match="multiple"):
        cc.Config(steps=1000, log_every=300)
    with pytest.raises(ValueError):
        cc.Config(seeds=1)


def test_the_command_line_in_provenance_rebuilds_the_config():
    assert cc.cli_line(cc.Config()) == "python -m cfka_jax.experiments.continual_claims --out results"
    argv = cc.cli_line(TINY).split()[3:]
    assert cc.FLAGS.parse(argv) == TINY


def test_settle_time_fe_slope_and_replay_effect():
    d = np.array([1.0, 0.5, 0.2, 0.04, 0.06, 0.03])
    assert cc.settle_time(d, 10, 0.05) == 50  # last log outside the band is t = 40
    assert cc.settle_time(d, 10, 0.4) == 20  # 0.5 > 0.4 at t = 10, 0.2 ≤ 0.4 from t = 20 on
    assert cc.settle_time(np.array([1.0, 0.5, 0.4]), 10, 0.05) is None  # never settles within the run
    x = np.array([[0.0, 1.0, 2.0], [5.0, 6.0, 7.0]])
    assert cc.fe_slope(x, 3.0 * x + np.array([[1.0], [-4.0]])) == pytest.approx(3.0)  # intercepts per world
    lnA = np.log(np.array([[1.1, 1.2, 1.0]]))
    assert cc.replay_effect(lnA, 2) == pytest.approx(0.5 * (np.log(1.1) + np.log(1.2)))


def test_bootstrap_amplitudes_centre_on_the_measured_amplitude():
    rng = np.random.default_rng(0)
    cols = rng.normal(size=(2, 400, 3)) * np.array([[[1.0]], [[2.0]]])
    boot = cc.bootstrap_amplitudes(cols, np.random.default_rng(1), 300)
    assert boot.shape == (300, 2)
    np.testing.assert_allclose(boot.mean(0), cc._ln_amplitude(cols), atol=0.02)
    assert 0.01 < boot[:, 0].std() < 0.1  # ≈ √(1/(2·3·400)) · … : the spread of ln A over resamples


@pytest.fixture(scope="module")
def tiny_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    assert cc.command(dataclasses.replace(TINY, out=str(out))) == 0
    return load_records(out)


def test_tiny_run_writes_four_records_that_load_back(tiny_records):
    names = {f"cfka-theory/{n}" for n in ("replay", "oscillation", "ewc_dense", "ewc_premise")}
    assert set(tiny_records) == names
    for rec in tiny_records.values():
        assert rec.origin == "produced" and rec.provenance["command"] == cc.cli_line(dataclasses.replace(
            TINY, out=rec.provenance["config"]["out"]))
        assert {"model", "world", "dose"} <= set(rec.regime)
    replay = tiny_records["cfka-theory/replay"]
    assert len(replay.select(kind="sgd")) == 2 * 3 * 2 and replay.count("seed", kind="sgd") == 2
    for p in replay.select(kind="point"):  # true replay: the closed form is the exact limit (float64)
        assert abs(p["old_prob_closed_form"] - p["old_prob_exact"]) < 1e-10
        assert p["pt_kept_recall"] == 1.0
    naive = replay.select(kind="point", alpha=1.0)
    assert all(abs(p["old_prob_exact"] - p["naive_old_prob"]) < 1e-10 for p in naive)
    dense, premise = tiny_records["cfka-theory/ewc_dense"], tiny_records["cfka-theory/ewc_premise"]
    for w in TINY.worlds:
        d, p = dense.select(kind="point", world=w, k=1.0)[0], premise.select(kind="point", world=w, k=1.0)[0]
        assert p["fisher_min_over_max"] < 1e-2 * d["fisher_min_over_max"]
        assert d["naive_old_prob"] < p["old_prob_exact"] < d["old_prob_exact"]
    osc = tiny_records["cfka-theory/oscillation"]
    pooled = osc.select(kind="pooled")[0]
    assert pooled["slope_lo"] <= pooled["slope_hi"] and pooled["replay_effect_lo"] <= pooled["replay_effect_hi"]


def test_every_rule_judges_the_tiny_records(tiny_records):
    assert len(ct.CLAIMS) >= 5 and all(c.id.startswith("cfka.theory.") for c in ct.CLAIMS)
    for claim in ct.CLAIMS:
        j = claim.rule({name: tiny_records[name] for name in claim.records})
        assert j.verdict in VERDICTS and j.verdict != "not tested" and j.ours, claim.id
    # the EWC point moves with the exact Fisher, by far more than with the premise's (every world, k = 1)
    dense = ct._ewc_shifts(tiny_records["cfka-theory/ewc_dense"])[2]
    premise = ct._ewc_shifts(tiny_records["cfka-theory/ewc_premise"])[2]
    assert all(premise[wk][0] < 0.1 * dense[wk][0] for wk in dense)


def _record(name, rows):
    prov = dict(commit="c", command="cmd", config={}, seeds=[0, 1], pt_replicates=[], machine="m", date="d",
                wall_s=0.0, cpu_s=0.0)
    return Record(name, "produced", prov, {}, tuple(rows))


def _oscillation(lo, hi, eff_lo, eff_hi, lam_up=True):
    rows = [dict(kind="amplitude", world=0, alpha=a, lam_min=lam) for a, lam in
            ((0.5, 0.02 if lam_up else 0.01), (1.0, 0.015))]
    rows.append(dict(kind="pooled", slope=(lo + hi) / 2, slope_lo=lo, slope_hi=hi, slope_pred=0.01,
                     replay_effect=(eff_lo + eff_hi) / 2, replay_effect_lo=eff_lo, replay_effect_hi=eff_hi,
                     replay_effect_pred=0.01))
    return {ct.OSCILLATION: _record(ct.OSCILLATION, rows)}


def test_oscillation_rule_reads_the_measured_intervals_not_the_prediction():
    assert ct._oscillation(_oscillation(-0.2, 0.2, -0.01, 0.05)).verdict == "not reproduced"
    assert ct._oscillation(_oscillation(-0.2, 0.2, 0.01, 0.05)).verdict == "partly"
    assert ct._oscillation(_oscillation(0.1, 0.3, 0.01, 0.05)).verdict == "holds"
    assert ct._oscillation(_oscillation(0.1, 0.3, 0.01, 0.05, lam_up=False)).verdict == "partly"
    assert ct._oscillation(_oscillation(-0.3, -0.1, -0.05, -0.01)).verdict == "refuted"


def _ewc(shift, naive_runs=(0.20, 0.22)):
    rows = []
    for w in (0, 1, 2):
        for k, p in ((0.0, 0.21), (1.0, 0.21 + shift)):
            rows.append(dict(kind="point", world=w, k=k, old_prob_exact=p, fisher_min_over_max=0.1))
            runs = naive_runs if k == 0.0 else tuple(x + shift for x in naive_runs)
            rows += [dict(kind="sgd", world=w, k=k, seed=s, old_prob=x) for s, x in enumerate(runs)]
    return {ct.EWC_DENSE: _record(ct.EWC_DENSE, rows)}


def test_ewc_point_rule_counts_a_shift_only_beyond_the_seed_resolution():
    rule = ct._ewc_point(ct.EWC_DENSE)
    assert rule(_ewc(0.05)).verdict == "refuted"
    assert rule(_ewc(0.005)).verdict == "holds"  # inside the naive runs' half-range 0.01


def test_replay_10pct_rule_needs_a_margin_beyond_the_spread():
    def rec(p9, r9):
        rows = []
        for w in (0, 1):
            rows.append(dict(kind="point", world=w, alpha=0.9, pt_old_prob=0.9, pt_kept_recall=1.0))
            for a, ps, rs in ((0.9, p9, r9), (1.0, (0.20, 0.25), (0.25, 0.5))):
                rows += [dict(kind="sgd", world=w, alpha=a, seed=s, old_prob=p, kept_recall=r)
                         for s, (p, r) in enumerate(zip(ps, rs))]
        return {ct.REPLAY: _record(ct.REPLAY, rows)}

    assert ct._replay_10pct(rec((0.45, 0.50), (1.0, 1.0))).verdict == "holds"
    assert ct._replay_10pct(rec((0.45, 0.50), (0.5, 0.75))).verdict == "partly"  # below ½ of the recall lost
    assert ct._replay_10pct(rec((0.24, 0.30), (1.0, 1.0))).verdict == "not reproduced"  # ranges overlap
