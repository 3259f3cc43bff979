"""The TAALM claim rules on small synthetic records: the verdict the numbers imply, one seed at most `partly`, a
margin of one fact no margin, TemporalWiki signs per (seed, period); and the registry's shape on the real records."""

import pathlib

import pytest

from cfka_jax.claims import table
from cfka_jax.claims.papers import taalm
from cfka_jax.claims.results import Record, load_records
from cfka_jax.claims.verdicts import Judgement

RESULTS = pathlib.Path(__file__).parents[2] / "results"
REGIME = {"n_to_learn": 45, "n_not_to_forget": 50}


def record(name, rows, seeds):
    prov = {"docs_file": "docs/x.md", "docs_commit": "0" * 40, "command": "cfka taalm --preset small", "date": "d",
            "seeds": list(seeds), "pt_replicates": []}
    return Record(name, "transcribed", prov, REGIME, tuple(rows))


def lama_record(values: dict[str, list[float]], metric="top_acc"):
    """One row per (method, seed) with ``metric`` (and Total = metric + 0.8, so both move together)."""
    seeds = range(max(len(v) for v in values.values()))
    rows = [{"method": m, "seed": s, metric: x, "total": x + 0.8}
            for m, xs in values.items() for s, x in zip(seeds, xs)]
    return {taalm.LAMA: record(taalm.LAMA, rows, seeds)}


def test_lama_one_seed_is_at_most_partly_however_large_the_gap():
    rule = taalm.lama(("TAALM", "Finetune", "top_acc"))
    j = rule(lama_record({"TAALM": [0.9], "Finetune": [0.1]}))
    assert j.verdict == "partly" and "one run" in j.reason and "lr 3e-3" in j.reason
    assert "0.900 (n=1) vs 0.100 (n=1)" in j.ours


@pytest.mark.parametrize("taalm_acc, finetune_acc, verdict", [
    ([0.40, 0.42], [0.10, 0.12], "holds"),            # two seeds each, ranges apart
    ([0.30, 0.34], [0.10, 0.38], "not reproduced"),   # ranges overlap and the seeds disagree
    ([0.30, 0.42], [0.10, 0.35], "holds"),            # ranges overlap, above on both seeds (paired)
    ([0.10, 0.12], [0.40, 0.42], "refuted"),          # the other way round beyond the spread
])
def test_lama_two_seeds_follow_the_spread_rule(taalm_acc, finetune_acc, verdict):
    rule = taalm.lama(("TAALM", "Finetune", "top_acc"))
    assert rule(lama_record({"TAALM": taalm_acc, "Finetune": finetune_acc})).verdict == verdict


def test_a_margin_of_one_fact_on_one_run_is_no_margin():
    rule = taalm.lama(("TAALM + Mix-review", "TAALM", "top_acc"))
    j = rule(lama_record({"TAALM + Mix-review": [0.3222], "TAALM": [0.3000]}))  # +1 fact of 45
    assert j.verdict == "not reproduced" and "within one fact" in j.reason
    assert rule(lama_record({"TAALM + Mix-review": [0.3444], "TAALM": [0.3000]})).verdict == "partly"  # 2 facts


def test_epoch_is_lower_better_and_the_worst_comparison_decides():
    rec = record(taalm.LAMA, [{"method": "TAALM", "seed": 0, "epoch": 4, "top_acc": 0.4},
                              {"method": "Finetune", "seed": 0, "epoch": 16, "top_acc": 0.5}], [0])
    assert taalm.lama(("TAALM", "Finetune", "epoch"))({taalm.LAMA: rec}).verdict == "partly"
    both = taalm.lama(("TAALM", "Finetune", "epoch"), ("TAALM", "Finetune", "top_acc"))({taalm.LAMA: rec})
    assert both.verdict == "not reproduced" and "1 of 2 comparisons" in both.reason
    assert "Epoch Finetune vs TAALM" in both.ours and "Top Acc TAALM vs Finetune" in both.ours


def twiki_record(after_a, after_b):
    """TAALM's and Finetune's after-training changed NLL: one list per seed, one value per period."""
    rows = [{"method": m, "seed": s, "period": p + 1, "probes": "changed", "before": 6.0, "after": x}
            for m, per_seed in (("TAALM", after_a), ("Finetune", after_b))
            for s, xs in enumerate(per_seed) for p, x in enumerate(xs)]
    return {taalm.TWIKI: record(taalm.TWIKI, rows, range(len(after_a)))}


@pytest.mark.parametrize("after_a, after_b, verdict", [
    ([[5.8, 5.5, 5.2]], [[6.1, 5.7, 5.6]], "partly"),                         # one seed, lower every period
    ([[5.8, 5.9, 5.2]], [[6.1, 5.7, 5.6]], "not reproduced"),                 # one seed, mixed
    ([[6.2, 5.9, 5.7]], [[6.1, 5.7, 5.6]], "not reproduced"),                 # one seed, higher: not refuted
    ([[5.8, 5.5, 5.2], [5.9, 5.4, 5.3]], [[6.1, 5.7, 5.6], [6.0, 5.8, 5.5]], "holds"),
    ([[6.2, 5.9, 5.7], [6.3, 5.8, 5.7]], [[6.1, 5.7, 5.6], [6.0, 5.6, 5.5]], "refuted"),
])
def test_twiki_sign_per_seed_and_period(after_a, after_b, verdict):
    j = taalm.twiki(("TAALM", "Finetune", "changed"))(twiki_record(after_a, after_b))
    assert j.verdict == verdict, j.reason


def test_one_seed_cap():
    one = [record("x", [{"a": 1}], [0])]
    assert taalm.one_seed_cap(Judgement("holds", "r"), one).verdict == "partly"
    assert taalm.one_seed_cap(Judgement("refuted", "r"), one).verdict == "not reproduced"
    assert taalm.one_seed_cap(Judgement("holds", "r"), [record("x", [{"a": 1}], [0, 1])]).verdict == "holds"


def test_registry_on_the_records():
    records = load_records(RESULTS)
    rows = [table.judge(c, records) for c in taalm.CLAIMS]
    assert len(rows) >= 13 and all(c.id.startswith("taalm.") for c in taalm.CLAIMS)
    assert [c.id for c in taalm.CLAIMS if c.headline] == ["taalm.lama-vs-finetune"]
    for r in rows:
        if r.claim.records and min(records[n].seeds for n in r.claim.records) < 2:
            assert r.judgement.verdict not in ("holds", "refuted"), r.claim.id
        if not r.claim.records:
            assert r.judgement.verdict == "not tested" and r.claim.command == ""
        if taalm.LAMA in r.claim.records and r.judgement.verdict != "not tested":
            assert "lr 3e-3 chosen on Finetune and Oracle only" in r.judgement.reason, r.claim.id


@pytest.mark.parametrize("taalm_acc, finetune_acc, verdict", [
    ([0.30, 0.40, 0.25], [0.10, 0.35, 0.12], "holds"),           # ranges overlap, TAALM above on every seed
    ([0.30, 0.30, 0.25], [0.10, 0.35, 0.12], "not reproduced"),  # ranges overlap, seeds disagree
    ([0.10, 0.20, 0.15], [0.30, 0.25, 0.20], "refuted"),         # below on every seed (one tie would not be)
    ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], "not reproduced"),        # equal: no difference at all
])
def test_lama_three_seeds_pair_by_seed_where_ranges_overlap(taalm_acc, finetune_acc, verdict):
    j = taalm.lama(("TAALM", "Finetune", "top_acc"))(lama_record({"TAALM": taalm_acc, "Finetune": finetune_acc}))
    assert j.verdict == verdict, j.reason
    if verdict == "holds":
        assert "paired difference" in j.ours and "3 pairs" in j.ours and "one seed" not in j.reason


def test_oracle_ratio_is_over_the_seeds_means():
    rec = lama_record({"TAALM": [0.2, 0.3, 0.4], "Oracle": [0.5, 0.5, 0.5]})
    j = taalm._oracle(rec)
    assert "TAALM = 0.60 of Oracle" in j.reason and j.verdict == "holds"  # Oracle above TAALM on every seed


def test_twiki_three_seeds_need_every_seed_and_period():
    lower = [[5.8, 5.5, 5.2], [5.9, 5.4, 5.3], [5.7, 5.5, 5.1]]
    base = [[6.1, 5.7, 5.6], [6.0, 5.8, 5.5], [6.0, 5.6, 5.4]]
    rule = taalm.twiki(("TAALM", "Finetune", "changed"))
    assert rule(twiki_record(lower, base)).verdict == "holds"
    mixed = [row[:] for row in lower]
    mixed[2][1] = 5.7
    j = rule(twiki_record(mixed, base))
    assert j.verdict == "not reproduced" and "8 of 9 (seed, period) pairs" in j.reason


@pytest.mark.parametrize("plus, alone, verdict", [
    ([0.2889, 0.3667], [0.3111, 0.4111], "not reproduced"),  # -1 and -2 facts: the one-fact pair has no sign
    ([0.2667, 0.3667], [0.3111, 0.4111], "refuted"),         # -2 facts on both seeds
    ([0.3111, 0.3333], [0.3000, 0.3111], "not reproduced"),  # apart by range, but the mean is within one fact
])
def test_one_fact_is_no_margin_on_several_seeds_either(plus, alone, verdict):
    j = taalm.lama(("TAALM + RecAdam", "TAALM", "top_acc"))(lama_record({"TAALM + RecAdam": plus, "TAALM": alone}))
    assert j.verdict == verdict, j.reason
    if plus[0] == 0.3111:
        assert "within one fact (0.022), on the mean of 2 seeds" in j.reason


def phi_records(lama_pairs, bio_pairs, *, bio_runs=None):
    """φ records: (object, other) mean weights per seed of LAMA-CKL (pt θ0-s<seed>), (value, other) per (pt, seed) of
    the Biography study; ``bio_runs``: (φ, w = 1, plain) Continual/Original hFTA per (pt, seed)."""
    lama = []
    for s, (obj, other) in enumerate(lama_pairs):
        key = {"pt": f"θ0-s{s}", "seed": s}
        lama += [{**key, "kind": "evidence", "tokens": "object", "mean_weight": obj},
                 {**key, "kind": "evidence", "tokens": "other", "mean_weight": other},
                 {**key, "kind": "object_share", "min": 0.5, "median": 1.0}]
    bio = []
    for (pt, s), (val, other) in bio_pairs.items():
        key = {"pt": pt, "seed": s}
        bio += [{**key, "kind": "phi_weights", "tokens": "value", "mean_weight": val},
                {**key, "kind": "phi_weights", "tokens": "other", "mean_weight": other},
                {**key, "kind": "value_share", "weights": "uniform", "median": 0.125},
                {**key, "kind": "value_share", "weights": "phi", "median": 0.3}]
    for (pt, s), values in (bio_runs or {}).items():
        for run, x in zip((taalm.PHI_RUN, taalm.UNIFORM_RUN, taalm.PLAIN_RUN), values):
            bio.append({"kind": "cpt", "run": run, "pt": pt, "seed": s, "step": 400, "continual_hfta": x,
                        "original_hfta": x + 0.05})
    seeds = sorted({s for _, s in bio_pairs})
    return {taalm.PHI_W: record(taalm.PHI_W, lama, range(len(lama_pairs))), taalm.BIO: record(taalm.BIO, bio, seeds)}


GRID = [(pt, s) for pt in ("s0", "s1") for s in (0, 1, 2)]


@pytest.mark.parametrize("bio_values, verdict", [
    ([(0.8, 0.3)] * 6, "holds"),                        # above in every (pt, seed) pair
    ([(0.8, 0.3)] * 5 + [(0.2, 0.3)], "not reproduced"),  # one pair the other way
    ([(0.2, 0.3)] * 6, "refuted"),                      # below in every pair
])
def test_phi_tokens_pair_runs_on_pt_and_seed(bio_values, verdict):
    recs = phi_records([(0.3, 1e-7), (0.7, 1e-3), (0.3, 2e-7)], dict(zip(GRID, bio_values)))
    j = taalm._phi_tokens(recs)
    assert j.verdict == verdict, j.reason
    assert "3 pairs: every pair the same sign" in j.ours and "6 pairs" in j.ours
    one = taalm._phi_tokens(phi_records([(0.3, 1e-7)], {("s0", 0): (0.8, 0.3)}))
    assert one.verdict == "partly" and "1 seed" in one.reason and "spread unknown" in one.reason


@pytest.mark.parametrize("runs, verdict", [
    ([(0.84, 0.77, 0.77)] * 6, "holds"),
    ([(0.84, 0.77, 0.77)] * 5 + [(0.75, 0.77, 0.77)], "not reproduced"),  # one (pt, seed) pair below
    ([(0.70, 0.77, 0.77)] * 6, "refuted"),
])
def test_phi_vs_uniform_pairs_runs_on_pt_and_seed(runs, verdict):
    recs = phi_records([(0.3, 1e-7)] * 3, dict.fromkeys(GRID, (0.8, 0.3)), bio_runs=dict(zip(GRID, runs)))
    j = taalm._phi_vs_uniform(recs)
    assert j.verdict == verdict, j.reason
    assert "w = 1 − plain replay-all" in j.reason and "6 pairs" in j.ours


def test_two_biography_phi_records_keep_their_pt_models_apart():
    """A second record's PT labels (s0, s1) name other models than the first's s0: runs pair within a record only,
    and the verdict is over all nine pairs."""
    first = phi_records([(0.3, 1e-7)] * 3, {("s0", s): (0.8, 0.3) for s in range(3)},
                        bio_runs={("s0", s): (0.84, 0.77, 0.77) for s in range(3)})
    second = phi_records([(0.3, 1e-7)] * 3, dict.fromkeys(GRID, (0.8, 0.3)),
                         bio_runs=dict.fromkeys(GRID, (0.70, 0.77, 0.77)))[taalm.BIO]
    recs = {**first, taalm.BIO_2PT: Record(taalm.BIO_2PT, second.origin, second.provenance, second.regime,
                                           second.rows)}
    merged = taalm.bio_phi(recs)
    assert {r["pt"] for r in merged.rows} == {"1:s0", "2:s0", "2:s1"} and merged.seeds == 3
    j = taalm._phi_vs_uniform(recs)
    assert j.verdict == "not reproduced", j.reason  # above on the first record's 3 pairs, below on the other 6
    assert "9 pairs" in j.ours
    assert taalm._phi_vs_uniform(first).verdict == "holds"


# ------------------------------------------------------------------ K-Adapter's budget, TemporalWiki epochs, φ size

def budget_record(values: dict[str, list[float]], lr=3e-2):
    """The budget study's test-split rows (:data:`taalm.LR_E90`): Top Acc per (method, seed), Total = Top + 0.9."""
    rows = [{"method": m, "lr": lr, "seed": s, "split": "test", "top_acc": x, "nf_acc": 0.95, "total": x + 0.9,
             "n_to_learn": 30, "n_not_to_forget": 33} for m, xs in values.items() for s, x in enumerate(xs)]
    rec = record(taalm.LR_E90, rows, range(3))
    prov = dict(rec.provenance, config={"sweep": {"epochs": 90}})
    return Record(rec.name, rec.origin, prov, {"dose": "90 epochs of batch 16"}, rec.rows)


def test_plus_kadapter_is_decided_where_kadapter_alone_learns():
    nothing = {"K-Adapter": [0.0] * 3, "TAALM + K-Adapter": [0.0] * 3}
    shared = lama_record(nothing)
    j = taalm._plus_kadapter(shared)
    assert j.verdict == "not reproduced" and "learns no TO-LEARN fact at any setting" in j.reason
    lifted = budget_record({**nothing, "K-Adapter (dropout 0.1)": [0.07, 0.08, 0.10],
                            "TAALM + K-Adapter (dropout 0.1)": [0.20, 0.23, 0.17]})
    j = taalm._plus_kadapter({**shared, taalm.LR_E90: lifted})
    assert j.verdict == "holds" and "decided at K-Adapter (dropout 0.1) at the budget" in j.reason
    assert "K-Adapter learns nothing at the shared setting" in j.reason
    below = budget_record({"K-Adapter (dropout 0.1)": [0.20, 0.23, 0.17],
                           "TAALM + K-Adapter (dropout 0.1)": [0.07, 0.08, 0.10]})
    assert taalm._plus_kadapter({**shared, taalm.LR_E90: below}).verdict == "refuted"


def test_the_budget_note_names_each_kadapters_best_lr_and_never_changes_the_verdict():
    recs = {**lama_record({"TAALM": [0.4, 0.4, 0.4], "K-Adapter": [0.0] * 3}),
            taalm.LR_E90: budget_record({"K-Adapter (dropout 0.1)": [0.06, 0.09, 0.09]})}
    j = taalm.with_budget(taalm.lama(("TAALM", "K-Adapter", "top_acc")))(recs)
    assert j.verdict == taalm.lama(("TAALM", "K-Adapter", "top_acc"))(recs).verdict == "holds"
    assert "K-Adapter (dropout 0.1) at 90 epochs, lr 0.03: best test Top Acc 0.080 (lr 0.03, 3 seeds" in j.reason


def twiki_epochs(by_epochs: dict[int, tuple[list, list]]):
    """TAALM's and Finetune's changed NLL after each period, per number of epochs: (TAALM per seed, Finetune)."""
    rows = [{"method": m, "epochs": e, "seed": s, "period": p + 1, "probes": "changed", "before": 6.0, "after": x}
            for e, (a, b) in by_epochs.items() for m, per_seed in (("TAALM", a), ("Finetune", b))
            for s, xs in enumerate(per_seed) for p, x in enumerate(xs)]
    return record(taalm.TWIKI_EP, rows, range(2))


def test_twiki_is_judged_at_the_largest_epochs_and_checked_against_the_main_study():
    low, high = [[5.8, 5.5], [5.9, 5.4]], [[6.1, 5.7], [6.0, 5.8]]
    ep = twiki_epochs({1: (high, low), 5: (low, high)})  # 1 epoch: TAALM above; 5 epochs: below
    rule = taalm.twiki(("TAALM", "Finetune", "changed"))
    j = rule({taalm.TWIKI_EP: ep})
    assert j.verdict == "holds" and j.reason.startswith("at 5 epochs per period") and "at 1 epoch: refuted" in j.reason
    main = twiki_record(high, low)  # the main study's 1-epoch runs, the same numbers
    assert rule({taalm.TWIKI_EP: ep, **main}).verdict == "holds"
    with pytest.raises(ValueError, match="disagree at 1 epoch"):
        rule({taalm.TWIKI_EP: ep, **twiki_record(low, high)})


def test_a_phi_of_another_size_serves_theta_when_taalm_with_it_beats_finetune():
    rows = [{"seed": s, "phi": phi, "method": m, "top_acc": x, "total": x + 0.9, "n_to_learn": 30,
             "n_not_to_forget": 33}
            for s in range(3) for phi, m, x in ((None, "Finetune", 0.05), ("same", "TAALM", 0.35),
                                                ("d32", "TAALM", 0.25))]
    rec = record(taalm.PHI_SIZE, rows, range(3))
    j = taalm._phi_other_size({taalm.PHI_SIZE: rec})
    assert j.verdict == "holds" and "TAALM (φ d32) vs Finetune" in j.ours
    assert "own-size φ against it" in j.reason
    none = record(taalm.PHI_SIZE, [r for r in rows if r["phi"] != "d32"], range(3))
    assert taalm._phi_other_size({taalm.PHI_SIZE: none}).verdict == "not tested"


def test_sweep_epochs_reads_the_recorded_config_not_the_dose_text():
    def rec(config):
        prov = {"commit": "0" * 7, "command": "python -m x", "config": config, "seeds": [0], "pt_replicates": [],
                "machine": "m", "date": "d", "wall_s": 1.0, "cpu_s": 1.0}
        return Record(taalm.LR_SEL, "produced", prov, {"dose": "12 epochs of batch 16"},
                      ({"method": "K-Adapter", "lr": 3e-3, "seed": 0, "split": "test", "top_acc": 0.0},))

    seeds = {f"s{k}": {"ckl": {"epochs": 30}} for k in range(3)}
    assert taalm.sweep_epochs(rec({"sweep": {"epochs": None}, **seeds})) == 30   # each seed's LAMA-CKL epochs
    assert taalm.sweep_epochs(rec({"sweep": {"epochs": 90}, **seeds})) == 90     # the sweep's --epochs wins
    with pytest.raises(ValueError, match="no single epochs"):
        taalm.sweep_epochs(rec({"sweep": {}, "s0": {"ckl": {"epochs": 30}}, "s1": {"ckl": {"epochs": 5}}}))
