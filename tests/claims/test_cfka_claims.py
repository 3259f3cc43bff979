"""The cFKA claim rules on small synthetic records: the verdict the numbers imply under the spread rule (a difference
inside the spread is "not reproduced", one run at most "partly"), regimes that disagree, the DI law against its
interval, the 1-Aug direction; and the registry's shape on the committed records."""

import pathlib

import pytest

from cfka_jax.claims import table
from cfka_jax.claims.papers import cfka
from cfka_jax.claims.papers import cfka_di_rules as di
from cfka_jax.claims.papers import cfka_rules as r
from cfka_jax.claims.results import Record, load_records

RESULTS = pathlib.Path(__file__).parents[2] / "results"


def record(name, rows, seeds=(0, 1), pts=("A",)):
    prov = {"docs_file": "docs/stoc.md", "docs_commit": "0" * 40, "command": "python -m x", "date": "d",
            "seeds": list(seeds), "pt_replicates": list(pts)}
    return Record(name, "transcribed", prov, {"model": "tiny"}, tuple(rows))


def lohi(metric, lo, hi, **factors):
    return [dict(factors, seed="lo", **{metric: lo}), dict(factors, seed="hi", **{metric: hi})]


def names150(stoc, random, lamol=(30.0, 30.5), dose=1):
    """A cfka/stoc_names150 record: Original sFTA of each kind as (lo, hi) over two seeds at one dose."""
    rows = [*lohi("original_sfta", *stoc, kind="stoc", dose=dose, pt="A"),
            *lohi("original_sfta", *random, kind="random", dose=dose, pt="A"),
            *lohi("original_sfta", *lamol, kind="lamol", dose=dose, pt="A")]
    return rows


def names150_s3(**diffs):
    """A produced cfka/stoc_names150_s3: 2 PT models × 3 seeds; each kind's Original sFTA = a PT-and-seed base
    (30 / 35 per PT model, + seed) plus the kind's offset in ``diffs`` (naive 15 points below the base)."""
    rows = []
    for pt, base in (("s0", 30.0), ("s1", 35.0)):
        for seed in (0, 1, 2):
            for kind, off in {"naive": -15.0, **diffs}.items():
                rows.append({"kind": kind, "pt": pt, "seed": seed, "original_sfta": base + seed + off})
    return rows


def r150s3(**diffs):
    prov = {"commit": "0" * 7, "command": "python -m x", "config": {}, "seeds": [0, 1, 2], "pt_replicates": ["s0", "s1"],
            "machine": "m", "date": "d", "wall_s": 1.0, "cpu_s": 1.0}
    regime = {"pt_quality": {"s0": {"Original/sFTA": 60.0}, "s1": {"Original/sFTA": 45.0}}}
    return Record(r.R150S3, "produced", prov, regime, tuple(names150_s3(**diffs)))


def produced(name, rows, quality=(60.0, 45.0)):
    """A produced record on PT replicates s0 / s1 whose Original sFTA (``regime.pt_quality``) is ``quality``."""
    prov = {"commit": "0" * 7, "command": "python -m x", "config": {}, "seeds": [0, 1, 2], "pt_replicates": ["s0", "s1"],
            "machine": "m", "date": "d", "wall_s": 1.0, "cpu_s": 1.0}
    regime = {"pt_quality": {p: {"Original/sFTA": q} for p, q in zip(("s0", "s1"), quality)}}
    return Record(name, "produced", prov, regime, tuple(rows))


def runs(metric="original_sfta", **levels):
    """Rows of 2 PT models × 3 seeds per kind: the kind's level in ``levels`` + 5 on PT s1 + the seed."""
    return [{"kind": k, "pt": pt, "seed": s, metric: level + off + s}
            for k, level in levels.items() for pt, off in (("s0", 0.0), ("s1", 5.0)) for s in (0, 1, 2)]


@pytest.mark.parametrize("stoc, random, verdict", [
    ((29.4, 30.8), (28.9, 29.7), "not reproduced"),   # STOC ahead on average, inside the spread
    ((31.0, 31.4), (28.9, 29.7), "partly"),           # apart, but 1.9 points against the paper's 33.8
    ((60.0, 62.0), (20.0, 22.0), "holds"),            # apart by more than the paper's gap
    ((28.0, 28.5), (29.0, 29.7), "refuted"),          # Random ahead beyond the spread
])
def test_stoc_vs_random_follows_the_spread_rule(stoc, random, verdict):
    rows = names150(stoc, random) + names150(stoc, random, dose=4)
    j = r.stoc_vs_random_names150({r.R150: record(r.R150, rows), r.R150S3: r150s3(stoc=0.5, random=0.0)})
    assert f"4×: {verdict}" in j.reason, j.reason  # the transcribed two seeds (lo/hi rows), unpaired
    assert "1×: partly" in j.reason


@pytest.mark.parametrize("offsets, verdict", [
    ({"stoc": 0.5, "random": 0.0}, "partly"),        # STOC above in every (PT, seed) pair, far below 33.8
    ({"stoc": 40.0, "random": 0.0}, "holds"),         # above by the paper's size in every pair
    ({"stoc": 0.0, "random": 0.5}, "refuted"),        # Random above in every pair
])
def test_names150_1x_pairs_runs_on_pt_and_seed(offsets, verdict):
    """The PT models put the cells 5 points apart, more than any kind difference; pairing on (PT, seed) still orders
    the kinds."""
    rows = names150((60.0, 62.0), (20.0, 22.0)) + names150((60.0, 62.0), (20.0, 22.0), dose=4)
    j = r.stoc_vs_random_names150({r.R150: record(r.R150, rows), r.R150S3: r150s3(**offsets)})
    assert f"1×: {verdict}" in j.reason, j.reason
    assert "6 pairs" in j.ours


def _freeze_records(stoc, other):
    """The three freeze studies (small α 0.67 and α 0.9, names150 Pythia + BPE α 0.67), STOC at level ``stoc`` and
    Random and LAMOL at ``other`` in every (PT, seed) pair."""
    return {n: produced(n, runs(stoc=stoc, random=other, lamol=other)) for n in (r.SMALL_F67, r.SMALL_F90,
                                                                                  r.FREEZE150)}


@pytest.mark.parametrize("stoc, other, verdict", [
    (56.0, 55.0, "partly"),            # STOC 1 point above in every pair: apart, far below the paper's gap
    (80.0, 20.0, "holds"),             # by the paper's sizes (32.8 / 32.1 at α 0.67, 21.7 at α 0.9)
    (55.0, 55.0, "not reproduced"),    # the same in every pair
])
def test_stoc_under_freeze_is_judged_run_by_run_in_each_study(stoc, other, verdict):
    j = r.stoc_freeze(_freeze_records(stoc, other))
    assert j.verdict == verdict, j.reason
    for label in ("small α 0.67 vs random", "small α 0.9 vs lamol", "names150 Pythia BPE α 0.67 vs lamol"):
        assert f"{label}: {verdict}" in j.reason
    assert "small α 0.9 vs random" not in j.reason  # the paper's α 0.9 row has no Random
    assert "6 pairs" in j.ours


def _lamol_records(w600_stoc, w600_lamol, names600_diffs):
    scale = [*lohi("original_sfta", *w600_stoc, world="w600-bpe1024", kind="stoc"),
             *lohi("original_sfta", *w600_lamol, world="w600-bpe1024", kind="lamol"),
             *lohi("original_sfta", 43.0, 43.3, world="small-bpe1024", kind="stoc"),
             *lohi("original_sfta", 42.5, 43.2, world="small-bpe1024", kind="lamol")]
    r600 = []
    for (pt, seed), d in zip((("A", 0), ("B", 1), ("C", 0), ("C", 1)), names600_diffs):
        r600 += [{"kind": "stoc", "pt": pt, "seed": seed, "original_sfta": 60.0},
                 {"kind": "lamol", "pt": pt, "seed": seed, "original_sfta": 60.0 - d}]
    n150 = names150((29.4, 30.8), (28.9, 29.7), (30.8, 31.6)) + names150((25.4, 27.0), (25.5, 25.8), (28.1, 28.8), 4)
    r16 = [{"kind": "stoc", "pt": "C", "seed": 1, "original_sfta": 25.4},
           {"kind": "lamol", "pt": "C", "seed": 1, "original_sfta": 28.4}]
    small = [{"kind": k, "pt": "s0", "seed": s, "original_sfta": x}
             for k, xs in (("stoc", (55.5, 54.2)), ("lamol", (55.3, 56.2))) for s, x in enumerate(xs)]
    return {r.SCALE: record(r.SCALE, scale), r.R600: record(r.R600, r600, pts=("A", "B", "C")),
            r.R150: record(r.R150, n150), r.R150S3: r150s3(stoc=0.0, lamol=1.0, random=-0.5),
            r.R150X16: record(r.R150X16, r16), r.SMALL_S3: produced(r.SMALL_S3, small)}


def test_stoc_vs_lamol_names_both_regimes():
    # default pools: STOC 8.7 above, apart; shared names: LAMOL above on PT C in both seeds
    j = r.stoc_vs_lamol(_lamol_records((56.0, 56.2), (47.3, 47.5), (0.3, -3.1, -1.6, -1.5)))
    assert j.verdict == "partly"
    assert "w600 default pools (BPE): partly (apart, but 8.7 < the paper's 31.6)" in j.reason
    assert "names600 shared names, PT C: refuted" in j.reason and "names150 4×: refuted" in j.reason
    assert "names150 1×: refuted" in j.reason  # LAMOL 1.0 above STOC in all six (PT, seed) pairs
    # if the default-pool world did not separate either, nothing would remain in the paper's direction
    j = r.stoc_vs_lamol(_lamol_records((47.0, 48.0), (47.3, 47.5), (0.3, -3.1, -1.6, -1.5)))
    assert j.verdict == "not reproduced"


@pytest.mark.parametrize("diffs, verdict", [
    ((1.7, 2.2), "holds"),            # every run within the paper's 2.3
    ((5.3, 3.1), "not reproduced"),   # every run beyond it
    ((1.0, 3.0), "partly"),           # mean within, one run beyond
])
def test_about_equal_uses_the_papers_own_difference(diffs, verdict):
    rows = [{"kind": k, "pt": "C", "seed": s, "original_sfta": 50.0 + (d if k == "lamol" else 0.0)}
            for s, d in enumerate(diffs) for k in ("lamol", "random")]
    j = r.similar("LAMOL ≈ Random", r.pairs(record(r.R600, rows), "original_sfta", {"kind": "lamol"},
                                               {"kind": "random"}))
    assert j.verdict == verdict, j.reason


def _di_record(panels):
    """cfka/di_attention_trained rows: per (attention, world): held-out sFTA per seed, the default DI's context row
    with its interval, and the most negative pooled Pearson of all measures × conventions."""
    rows = []
    for (att, world), (sfta, pearson, lo, hi, most) in panels.items():
        rows += [{"attention": att, "world": world, "summary": "held-out", "seed": s, "heldout_sfta": sfta}
                 for s in (0, 1)]
        rows.append({"attention": att, "world": world, "measure": "context", "di": di.DEFAULT_DI,
                     "ports": "trained", "pearson": pearson, "pearson_lo": lo, "pearson_hi": hi,
                     "per_seed_pearson_mean": pearson, "per_seed_pearson_sd": 0.02})
        rows.append({"attention": att, "world": world, "summary": di.MOST_NEGATIVE, "ports": "trained",
                     "most_negative_pooled_pearson": most})
    return {r.DI_TRAINED: record(r.DI_TRAINED, rows)}


def test_the_di_law_is_judged_against_its_interval_on_ports_in_the_theorys_regime():
    off = {("softmax", "names150"): (0.55, -0.9, -0.95, -0.85, -0.9)}  # would hold, but below 0.7 sFTA
    refuted = di.di_law(_di_record({("softmax", "small"): (0.80, 0.50, 0.45, 0.55, -0.33),
                                    ("linear", "small"): (0.81, 0.74, 0.72, 0.76, -0.48), **off}))
    assert refuted.verdict == "refuted" and "the opposite sign" in refuted.reason
    assert "softmax names150 not counted" in refuted.reason
    holds = di.di_law(_di_record({("softmax", "small"): (0.80, -0.86, -0.90, -0.82, -0.86)}))
    assert holds.verdict == "holds"
    straddles = di.di_law(_di_record({("softmax", "small"): (0.80, -0.78, -0.84, -0.72, -0.78)}))
    assert straddles.verdict == "not reproduced"
    assert di.di_law(_di_record(off)).verdict == "not tested"


def _aug1(name5, name1, rel5, rel1):
    rows = []
    for world, name, rel in (("names150", name5, rel5), ("names150_1aug", name1, rel1)):
        rows += lohi("attention", *name, world=world, slot="name", layers="pooled")
        rows += lohi("attention", *rel, world=world, slot="relation", layers="pooled")
        rows.append({"world": world, "slot": "name", "layers": "1 (middle)", "seed": "mean", "attention": 0.1})
        rows.append({"world": world, "slot": "relation", "seed": "world", "di_centred_cooccur": -2.0})
    return {r.AUG1: record(r.AUG1, rows)}


def test_aug1_attention_direction_name_lower_relation_higher_with_one_biography():
    measured = di.aug1_attention(_aug1((0.117, 0.146), (0.100, 0.108), (0.025, 0.029), (0.028, 0.030)))
    assert measured.verdict == "partly"
    assert "name attention lower with 1-Aug: holds" in measured.reason
    inside = "relation attention higher with 1-Aug: not reproduced (the difference is inside the spread)"
    assert inside in measured.reason
    both = di.aug1_attention(_aug1((0.117, 0.146), (0.100, 0.108), (0.020, 0.022), (0.028, 0.030)))
    assert both.verdict == "holds"
    reversed_ = di.aug1_attention(_aug1((0.100, 0.108), (0.117, 0.146), (0.028, 0.030), (0.020, 0.022)))
    assert reversed_.verdict == "refuted"


def test_naive_forgetting_needs_more_than_half_lost_on_every_run():
    pts = record(r.PTS, [{"world": "names600", "pt": p, "original_sfta": 86.0} for p in ("A", "C")])
    naive = lambda a, c: record(r.R600, [{"kind": "naive", "pt": "A", "seed": 0, "original_sfta": a},  # noqa: E731
                                          {"kind": "naive", "pt": "C", "seed": 0, "original_sfta": c}])
    others = {n: record(n, [{"kind": "stoc", "pt": "x", "seed": 0, "original_sfta": 1.0}])
              for n in (r.SMALL_S3, r.SCALE, r.R150, r.R150X16)}
    others[r.R150S3] = r150s3(stoc=0.0)  # naive 15–22 of PT 60 / 45 (its own regime.pt_quality): 25–49 % kept
    held = r.naive_forgets({r.PTS: pts, r.R600: naive(21.6, 21.4), **others})
    assert held.verdict == "holds" and "(8 runs, 4 PT models)" in held.ours
    assert r.naive_forgets({r.PTS: pts, r.R600: naive(21.6, 50.0), **others}).verdict == "not reproduced"
    others[r.R150S3] = r150s3(stoc=0.0, naive=0.0)  # PT s1's naive runs keep 35–37 of 45: 78–82 %
    assert r.naive_forgets({r.PTS: pts, r.R600: naive(21.6, 21.4), **others}).verdict == "not reproduced"


def test_registry_shape_on_the_committed_records():
    claims = cfka.CLAIMS
    assert len(claims) >= 20 and len({c.id for c in claims}) == len(claims)
    assert [c.id for c in claims if c.headline] == ["cfka.stoc-vs-random", "cfka.di-attention-law"]
    assert claims[0].id == "cfka.stoc-vs-random"
    records = load_records(RESULTS)
    rows = {c.id: table.judge(c, records) for c in claims}
    assert all(n.startswith("cfka/") for c in claims for n in c.records)
    for cid in ("cfka.knowedit", "cfka.industrycorpus"):
        assert rows[cid].judgement.verdict == "not tested" and rows[cid].claim.records == ()
    lamol = rows["cfka.stoc-vs-lamol"].judgement
    assert lamol.verdict == "partly" and "w600 default pools" in lamol.reason and "names600" in lamol.reason
    assert rows["cfka.di-attention-law"].judgement.verdict == "refuted"
    aug = rows["cfka.aug1-attention"].judgement
    assert aug.verdict == "partly" and "0.104" in aug.ours and "0.132" in aug.ours
    assert "-1.74 with 1-Aug vs -2.30" in aug.reason


def _streams(final, pt_sfta=80.0):
    """A produced cfka/streams_small: ``final`` maps stream → per-PT-model base of final_original; each run is the
    base + 0.1 × seed, over PT models s0 / s1 and seeds 0–2, with a ``pt`` row per PT model."""
    rows = [{"stream": "pt", "pt": pt, "original_sfta": pt_sfta, "original_em": 90.0} for pt in ("s0", "s1")]
    for stream, (b0, b1) in final.items():
        rows += [{"stream": stream, "pt": pt, "seed": s, "final_original": base + 0.1 * s, "avg_acc": 25.0 + base / 10,
                  "avg_forgetting": 40.0, "plasticity": 40.0}
                 for pt, base in (("s0", b0), ("s1", b1)) for s in range(3)]
    prov = {"commit": "0" * 40, "command": "python -m x", "config": {}, "seeds": [0, 1, 2],
            "pt_replicates": ["s0", "s1"], "machine": "cpu", "date": "d", "wall_s": 1.0, "cpu_s": 1.0}
    return Record(r.STREAMS, "produced", prov, {"model": "tiny"}, tuple(rows))


def test_real_replay_is_paired_with_each_kind_on_the_same_pt_models():
    """Real replay 'all' (the Biography table) against each generative kind (the STOC-regime study) run by run on
    the PT models both records name; the PT models set the level (+5 on s1) more than the kind does (+3)."""
    scale = [*lohi("original_sfta", 52.3, 52.5, world="small-bpe1024", kind="real_all")] + [
        row for k in ("stoc", "random", "lamol") for row in lohi("original_sfta", 43.0, 43.3, world="small-bpe1024",
                                                                   kind=k)]
    old = [x for k in ("replay", "stoc", "random", "lamol") for x in lohi("final_original", 29.5, 30.8,
                                                                          stream=f"{k}25-rewarm")]
    bio = [dict(x, update="full", alpha=0.5) for x in runs(real_all=53.0)]
    records = {r.SCALE: record(r.SCALE, scale), r.BIO_REAL: produced(r.BIO_REAL, bio),
               r.SMALL_S3: produced(r.SMALL_S3, runs(stoc=50.0, random=50.0, lamol=50.0, naive=25.0)),
               r.STREAMS_2SEED: record(r.STREAMS_2SEED, old)}
    j = r.real_replay_top(records)
    assert j.verdict == "holds", j.reason
    assert "small word-level vs stoc +3.0 (+3.0 … +3.0, 6 pairs)" in j.ours
    assert "Context (3-stage stream, transcribed" in j.reason and "stream vs" not in j.ours  # shown, not judged
    other = dict(records, **{r.BIO_REAL: produced(r.BIO_REAL, bio, quality=(61.0, 45.0))})
    with pytest.raises(ValueError, match="PT model s0"):  # another PT model under the same label: no pairs
        r.real_replay_top(other)


def test_stream_rules_pair_runs_on_pt_model_and_seed():
    """The PT models set the level (10 vs 20) more than the method does (+3): unpaired the ranges overlap, paired
    every run of real replay is above STOC's."""
    st = _streams({"replay25-rewarm": (13.0, 23.0), "stoc25-rewarm": (10.0, 20.0)})
    g = r.stream_cmp(st, "final_original", {"stream": "replay25-rewarm"}, {"stream": "stoc25-rewarm"})
    assert r.brief(g) == "+3.0 (+3.0 … +3.0, 6 pairs)" and g.a_above
    assert r.gap_of(st, "final_original", {"stream": "replay25-rewarm"}, {"stream": "stoc25-rewarm"}).apart is False


def _bio_ewc():
    rows = []
    for pt in ("s0", "s1"):
        for s in range(3):
            rows += [{"kind": "real_all", "update": "full", "pt": pt, "seed": s, "original_sfta": 68.0,
                      "continual_sfta": 58.0},
                     {"kind": "ewc", "update": "full", "ewc_lambda": 1e6, "pt": pt, "seed": s, "original_sfta": 52.0,
                      "continual_sfta": 53.0}]
    return record(r.BIO, rows, seeds=(0, 1, 2), pts=("s0", "s1"))


@pytest.mark.parametrize("ewc_base, verdict, slower", [
    ((18.0, 20.0), "partly", "holds"),          # forgets, below replay, above naive in every pair
    ((45.0, 50.0), "not reproduced", "holds"),  # keeps more than half of PT (80) on PT s1: no longer 'still forgets'
])
def test_ewc_on_the_stream_reads_pairs_and_each_pt_models_own_level(ewc_base, verdict, slower):
    st = _streams({"ewc-rewarm": ewc_base, "naive-rewarm": (11.0, 12.0), "replay25-rewarm": (60.0, 62.0)})
    j = r.ewc({r.STREAMS: st, r.BIO: _bio_ewc()})
    assert j.verdict == verdict, j.reason
    assert f"EWC keeps more than naive: {slower} (6 pairs)" in j.reason and "replay − EWC" in j.ours


@pytest.mark.parametrize("replay10, verdict", [((30.0, 35.0), "partly"), ((40.0, 42.0), "holds")])
def test_ten_percent_replay_stream_is_paired_and_held_to_half_of_its_pt_model(replay10, verdict):
    st = _streams({"replay10-norewarm": replay10, "naive-norewarm": (24.0, 25.0)})
    f9 = produced(r.SMALL_F90, runs(stoc=52.0, lamol=52.0, naive=26.0), quality=(80.0, 80.0))
    j = r.replay_10pct({r.SMALL_F90: f9, r.STREAMS: st})
    part = j.reason.split("3-stage stream: ")[1]
    assert part.startswith(verdict), j.reason
    assert "6 pairs" in j.ours and ("(< half)" in part) == (verdict == "partly")
    assert "small α 0.9 freeze, stoc: holds" in j.reason  # 52–59 of 80 kept: above half
    low = produced(r.SMALL_F90, runs(stoc=32.0, lamol=52.0, naive=26.0), quality=(80.0, 80.0))
    j = r.replay_10pct({r.SMALL_F90: low, r.STREAMS: st})
    assert "small α 0.9 freeze, stoc: partly" in j.reason and "(< half)" in j.reason  # 32–39 of 80: below half


def test_full_vs_freeze_pairs_each_kind_across_the_two_studies_of_one_pt_model():
    """STOC freeze (α 0.67) − STOC full (α 0.5) per (PT, seed), across two records of the same PT models."""
    full = produced(r.SMALL_S3, _merge(runs(stoc=50.0, random=50.0, lamol=50.0, naive=25.0)
                                       + runs("continual_sfta", stoc=50.0, random=50.0, lamol=50.0)))
    rows = runs(stoc=51.0, random=51.0, lamol=51.0) + runs("continual_sfta", stoc=10.0, random=10.0, lamol=10.0)
    bio = [dict(x, update=u) for u in ("full", "freeze") for x in runs(naive=25.0) + runs("continual_sfta", naive=60.0)]
    recs = {r.SMALL_S3: full, r.SMALL_F67: produced(r.SMALL_F67, _merge(rows)), r.BIO: produced(r.BIO, _merge(bio)),
            r.BIO_BPE: produced(r.BIO_BPE, _merge(bio))}
    j = r.full_vs_freeze(recs)
    assert j.verdict == "partly", j.reason  # old facts alike (+1.0), new facts 40 points apart
    assert "small stoc, freeze α 0.67 − full α 0.5, original_sfta: holds" in j.reason
    assert "small stoc, freeze α 0.67 − full α 0.5, continual_sfta: not reproduced" in j.reason
    assert "Context" not in j.reason
    grid = [{"kind": "stoc", "alpha": a, "update": u, "seed": 0, "original_sfta": 50.0, "continual_sfta": c}
            for a in (0.5, 0.9) for u, c in (("full", 50.0), ("freeze", 12.0))]
    j = r.full_vs_freeze(dict(recs, **{r.SMALL: record(r.SMALL, grid)}))
    assert "Context (transcribed, one PT model, one seed" in j.reason and "continual_sfta -38.0" in j.reason


def _merge(rows):
    """Rows of one run per (kind, update, PT, seed) with their metrics merged (``runs`` gives one metric a row)."""
    out = {}
    for x in rows:
        key = (x["kind"], x.get("update"), x["pt"], x["seed"])
        out.setdefault(key, {}).update(x)
    return list(out.values())


def _bio_lora(lr_new):
    """cfka/biography_small (naive full / freeze / LoRA, 2 PT × 2 seeds) and cfka/biography_lora_lr: the LoRA cell at
    lr × 3 with Continual sFTA ``lr_new`` (an old record's LoRA rows carry no lr_scale: scale 1)."""
    pt = [{"kind": "pt", "update": "full", "pt": p, "original_sfta": 80.0} for p in ("s0", "s1")]
    bio = pt + [{"kind": "naive", "update": u, "pt": p, "seed": s, "continual_sfta": new + s, "original_sfta": old}
                for u, new, old in (("full", 65.0, 24.0), ("freeze", 28.0, 26.0), ("lora", 15.0, 28.0))
                for p in ("s0", "s1") for s in (0, 1)]
    lr = pt + [{"kind": "naive", "update": "lora", "pt": p, "seed": s, "lr_scale": 3.0, "continual_sfta": lr_new + s,
                "original_sfta": 25.0} for p in ("s0", "s1") for s in (0, 1)]
    return record(r.BIO, bio, pts=("s0", "s1")), record(r.BIO_LORA_LR, lr, pts=("s0", "s1"))


def test_lora_worst_pairs_the_biography_lora_cell_at_each_lr_with_freeze_and_full():
    parts, said = r.bio_lora_lr(*_bio_lora(20.0))
    assert [p.label for p in parts][:2] == ["Biography LoRA lr×1, new facts, freeze − LoRA",
                                            "Biography LoRA lr×1, new facts, full − LoRA"]
    x3 = {p.label: p for p in parts if "lr×3" in p.label}
    assert x3["Biography LoRA lr×3, new facts, freeze − LoRA"].shown == "+8.0 (+8.0 … +8.0, 4 pairs)"
    assert x3["Biography LoRA lr×3, old facts, full − LoRA"].judgement.verdict == "refuted"  # LoRA keeps more
    assert "the fewest new facts at lr × 1, 3, the fewest old facts at no lr" in said
    assert said.endswith("stays the worst on new facts at every lr")
    _, said = r.bio_lora_lr(*_bio_lora(40.0))  # at × 3 LoRA learns more than freeze: no longer the worst
    assert "the fewest new facts at lr × 1," in said and said.endswith("is not the worst on new facts at lr × 3")
    bio, lr = _bio_lora(20.0)
    moved = Record(lr.name, lr.origin, lr.provenance, lr.regime,
                   tuple(dict(x, original_sfta=70.0) if x["kind"] == "pt" else x for x in lr.rows))
    with pytest.raises(ValueError, match="PT model s0"):  # other PT models: no pairs
        r.bio_lora_lr(bio, moved)


def _lora150(delta_new, pt_quality=60.0):
    """A cfka/stoc_lora150_s3 on PT s0 × seeds 0–2: each kind's run = the full run of r150s3 minus ``delta_new`` on
    Continual sFTA and 2 points on Original sFTA."""
    full = r150s3(stoc=0.0, random=0.0, lamol=0.0)
    rows = [dict(x, original_sfta=x["original_sfta"] - 2.0, continual_sfta=50.0 - delta_new)
            for x in full.rows if x["pt"] == "s0" and x["kind"] != "naive"]
    regime = {"pt_quality": {"s0": {"Original/sFTA": pt_quality}}}
    lora = Record(r.LORA150, "produced", full.provenance, regime, tuple(rows))
    full = Record(full.name, full.origin, full.provenance, full.regime,
                  tuple(dict(x, continual_sfta=50.0) for x in full.rows))
    return lora, full


def test_names150_lora_pairs_with_the_full_update_of_the_same_pt_model():
    lora, full = _lora150(20.0)
    rows = r.update_rows(lora, full, "lora")
    assert {x["pt"] for x in rows} == {"s0"}  # the full update's s1 runs have no LoRA partner and are left out
    g = r.paired(rows, "continual_sfta", {"update": "full", "kind": "stoc"}, {"update": "lora", "kind": "stoc"})
    assert g.diffs.n == 3 and g.diff == pytest.approx(20.0)
    with pytest.raises(ValueError, match="PT model s0"):  # another PT model under the same label: no pairs
        r.update_rows(_lora150(20.0, pt_quality=55.0)[0], full, "lora")
