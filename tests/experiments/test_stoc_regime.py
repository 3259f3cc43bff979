"""experiments/stoc_regime.py: config checks, the collected table, and (slow) a smoke study end to end."""

import json

import pytest

from cfka_jax.experiments import stoc_regime as sr


def test_config_checks_name_the_flag():
    with pytest.raises(ValueError, match="--kinds"):
        sr.RegimeConfig(kinds=("stoc", "random"))  # "stoc" is stoc_j1 / stoc_nq here
    with pytest.raises(ValueError, match="nothing to run"):
        sr.RegimeConfig(kinds=())
    with pytest.raises(ValueError, match="--seeds"):
        sr.RegimeConfig(seeds=(0, 0))
    with pytest.raises(ValueError, match="--pt-checkpoint"):
        sr.RegimeConfig(train=True, pt_checkpoint=True)
    with pytest.raises(SystemExit) as err:
        sr.main(["--pt-dir", "x", "--out", "y", "--kinds", "bogus"])
    assert err.value.code == 2
    assert sr.switches(sr.RegimeConfig(pt_dir="pt"), "stoc_nq").score_norm == "n_queries"
    with pytest.raises(ValueError, match="--update"):
        sr.RegimeConfig(update="half")
    with pytest.raises(SystemExit) as err:
        sr.main(["--pt-dir", "x", "--out", "y", "--arch", "gpt2"])
    assert err.value.code == 2


def test_one_pt_source_pt_dir_or_pt_seeds():
    with pytest.raises(ValueError, match="got neither"):
        sr.RegimeConfig()
    with pytest.raises(ValueError, match="not both"):
        sr.RegimeConfig(pt_dir="pt", pt_seeds=(0, 1))
    with pytest.raises(ValueError, match="--pt-seeds"):
        sr.RegimeConfig(pt_seeds=(1, 1))
    with pytest.raises(ValueError, match="--pt-checkpoint"):
        sr.RegimeConfig(pt_seeds=(0,), pt_checkpoint=True)
    with pytest.raises(ValueError, match="--pt-label"):
        sr.RegimeConfig(pt_seeds=(0,), pt_label="A")
    with pytest.raises(ValueError, match="--pt-root"):
        sr.RegimeConfig(pt_dir="pt", pt_root="r")
    cfg = sr.RegimeConfig(pt_seeds=(0, 2), out="study", record="cfka/x")  # labels s<k>: no --pt-label needed
    assert [(s.pt_dir, s.out, s.pt_label, s.record) for s in sr.studies(cfg)] == [
        ("study/pt-seed0", "study/pt0", "s0", None), ("study/pt-seed2", "study/pt2", "s2", None)]
    assert sr.pt_spec(cfg, 2).seed == 2 and sr.pt_spec(cfg, 2).out == "study/pt-seed2"
    shared = sr.RegimeConfig(pt_seeds=(1,), out="study", pt_root="pts")
    assert sr.studies(shared)[0].pt_dir == "pts/pt-seed1" and sr.studies(shared)[0].out == "study/pt1"
    assert sr.studies(sr.RegimeConfig(pt_dir="pt")) == [sr.RegimeConfig(pt_dir="pt")]
    x4 = sr.RegimeConfig(preset="names600x4", pt_seeds=(0,), pt_preset="names600", pt_root="pt600", out="x4")
    assert sr.pt_spec(x4, 0).preset == "names600" and sr.studies(x4)[0].pt_dir == "pt600/pt-seed0"
    with pytest.raises(ValueError, match="--pt-preset names150 trains another PT"):
        sr.RegimeConfig(preset="names600x4", pt_seeds=(0,), pt_preset="names150")
    with pytest.raises(ValueError, match="--pt-preset"):
        sr.RegimeConfig(pt_dir="pt", pt_preset="names150")


def test_every_earlier_flag_parses_with_its_meaning():
    argv = ["--preset", "smoke", "--pt-dir", "p", "--out", "o", "--kinds", "stoc_j1,lamol", "--seeds", "0,2",
            "--sources", "7", "--alpha", "0.8", "--train", "--naive", "--arch", "pythia", "--update", "lora",
            "--lora-rank", "4", "--bpe-vocab", "1024", "--cache-dir", "c", "--no-progress", "--record", "cfka/r",
            "--pt-label", "A", "--results", "res"]
    cfg = sr.parse(argv)
    assert (cfg.preset, cfg.pt_dir, cfg.out, cfg.kinds, cfg.seeds, cfg.sources, cfg.alpha) == (
        "smoke", "p", "o", ("stoc_j1", "lamol"), (0, 2), 7, 0.8)
    assert (cfg.train, cfg.naive, cfg.arch, cfg.update, cfg.lora_rank, cfg.bpe_vocab, cfg.cache_dir) == (
        True, True, "pythia", "lora", 4, 1024, "c")
    assert (cfg.progress, cfg.record, cfg.pt_label, cfg.results, cfg.report, cfg.pt_checkpoint) == (
        False, "cfka/r", "A", "res", False, False)
    cfg = sr.parse(["--pt-dir", "p", "--out", "o", "--kinds", "", "--report", "--pt-checkpoint"])
    assert (cfg.kinds, cfg.report, cfg.naive, cfg.pt_checkpoint) == ((), True, False, True)
    assert sr.parse(["--pt-dir", "p", "--out", "o", "--update", "freeze", "--freeze-layers", "1",
                     "--train"]).freeze_layers == 1
    assert sr.parse(["--pt-seeds", "0,1", "--out", "o", "--pt-root", "r"]).pt_seeds == (0, 1)


@pytest.mark.parametrize("argv, words", [([], "--pt-dir"), (["--pt-seeds", "0,0"], "--pt-seeds"),
                                         (["--pt-seeds", "x"], "--pt-seeds"), (["--pt-dir", "p", "--sources", "0"],
                                                                              "--sources"),
                                         (["--pt-dir", "p", "--alpha", "1"], "--alpha")])
def test_a_bad_value_is_one_line_naming_the_option(argv, words, capsys, tmp_path):
    with pytest.raises(SystemExit) as err:
        sr.main([*argv, "--out", str(tmp_path / "o")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.value.code == 2 and words in last, last
    assert not (tmp_path / "o").exists()


def test_bpe_vocab_reaches_the_data_config_and_presets_reach_the_world():
    assert sr.RegimeConfig(pt_dir="pt", bpe_vocab=1024).scale.data_config().bpe_vocab == 1024
    assert sr.RegimeConfig(pt_dir="pt").scale.data_config().bpe_vocab is None
    from cfka_jax.runs.presets import BIOGRAPHY

    one = BIOGRAPHY["names150_1aug"].data_config().bio
    assert one.train_bios_per_person == 1 and one.name_pool == BIOGRAPHY["names150"].name_pool
    assert BIOGRAPHY["names150x16"].cpt.steps == 16 * BIOGRAPHY["names150"].cpt.steps
    x4, one = BIOGRAPHY["names600x4"], BIOGRAPHY["names600"]
    assert x4.cpt.steps == 4 * one.cpt.steps and x4.cpt.warmup == 4 * one.cpt.warmup
    assert (x4.pt, x4.data_config(), x4.model) == (one.pt, one.data_config(), one.model)


def test_collect_joins_corpus_measures_and_cpt_runs(tmp_path):
    m = {"kind": "random", "seed": 1, "pt_step": 2000, "distinct_prompts": 7, "prompts_at_0": 0.1,
         "names_real_old": 0.5, "names_new": 0.25, "names_invented": 0.25, "pt_fact_coverage": 0.4,
         "true_values_per_mention": 0.8, "voiced/interfered": 0.3, "voiced/rest": 0.6}
    (tmp_path / "replay-random-seed1").mkdir()
    (tmp_path / "replay-random-seed1" / "measures.json").write_text(json.dumps(m))
    run = tmp_path / "cpt-random-seed1"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "final.json").write_text(json.dumps({"Original/sFTA": 0.5, "Continual/sFTA": 0.6, "Original/EM": 0.7}))
    (run / "retention_split.json").write_text(json.dumps({"retention/interfered": 0.45, "retention/rest": 0.55}))
    unfinished = tmp_path / "cpt-lamol-seed0"
    unfinished.mkdir()
    (unfinished / "retention_split.json").write_text("{}")
    rows = sr.collect(tmp_path)
    assert len(rows) == 1 and rows[0]["Original/sFTA"] == 0.5 and rows[0]["names_real_old"] == 0.5
    cfg = sr.RegimeConfig(pt_dir=str(tmp_path / "no-pt"), out=str(tmp_path), record="cfka/study", pt_label="s1",
                          results=str(tmp_path / "results"))
    sr.write_study_record(cfg)
    from cfka_jax.claims.results import load_records

    rec = load_records(tmp_path / "results")["cfka/study"]
    assert rec.origin == "produced" and rec.provenance["pt_replicates"] == ["s1"] and rec.provenance["seeds"] == [1]
    assert rec.rows == ({"kind": "random", "pt": "s1", "seed": 1, "original_sfta": 50.0, "original_em": 70.0,
                         "continual_sfta": 60.0, "retention_interfered": 45.0, "retention_rest": 55.0,
                         "voiced_interfered": 30.0, "voiced_rest": 60.0, "old_facts_voiced": 40.0,
                         "names_real_old": 50.0},)
    with pytest.raises(ValueError, match="--pt-label"):
        sr.RegimeConfig(record="cfka/x")
    entry = next(e for e in rec.provenance["summary"] if e["kind"] == "random" and e["metric"] == "original_sfta")
    assert (entry["mean"], entry["n"], entry["pts"], entry["seeds"]) == (50.0, 1, 1, 1)
    table = sr.markdown(rows)
    assert "| random | 1 | 2000 | 7 | 10.0 | 50.0 | 25.0 | 25.0 | 40.0 | 80.0 | 30.0 | 60.0 | 50.0 | 70.0 | 60.0 | " \
           "45.0 | 55.0 |" in table


def _finished_cell(study, kind, seed, sfta):
    run = study / f"cpt-{kind}-seed{seed}"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "final.json").write_text(json.dumps({"Original/sFTA": sfta, "Continual/sFTA": 0.6}))
    (run / "retention_split.json").write_text(json.dumps({"retention/interfered": 0.4, "retention/rest": 0.5}))


def test_pt_replicates_collect_into_one_table_and_record(tmp_path):
    """With --pt-seeds every PT model's study is <out>/pt<k>; the table and record hold every (kind, PT, seed) run
    with its PT label, and the mean and spread over both axes."""
    for k in (0, 1):
        for seed in (0, 1, 2):
            _finished_cell(tmp_path / f"pt{k}", "stoc_j1", seed, 0.5 + 0.01 * seed + 0.1 * k)
            _finished_cell(tmp_path / f"pt{k}", "naive", seed, 0.2 + 0.01 * seed)
    cfg = sr.RegimeConfig(preset="smoke", pt_seeds=(0, 1), out=str(tmp_path), kinds=("stoc_j1",), naive=True,
                          record="cfka/regime", results=str(tmp_path / "results"))
    rows = sr.collect_all(cfg)
    assert [(r["pt"], r["kind"], r["seed"]) for r in rows][:4] == [("s0", "stoc_j1", 0), ("s0", "stoc_j1", 1),
                                                                   ("s0", "stoc_j1", 2), ("s0", "naive", 0)]
    assert len(rows) == 12 and sr.markdown(rows).splitlines()[2].startswith("| s0 | stoc_j1 | 0 |")
    sr.write_study_record(cfg)
    from cfka_jax.claims.results import load_records
    from cfka_jax.claims.verdicts import paired

    rec = load_records(tmp_path / "results")["cfka/regime"]
    assert rec.provenance["pt_replicates"] == ["s0", "s1"] and rec.provenance["seeds"] == [0, 1, 2]
    pairs = paired(rec.rows, "original_sfta", {"kind": "stoc"}, {"kind": "naive"})
    assert pairs.diffs.n == 6 and pairs.apart
    entry = next(e for e in rec.provenance["summary"] if e["kind"] == "stoc" and e["metric"] == "original_sfta")
    assert (entry["n"], entry["pts"], entry["seeds"], entry["lo"], entry["hi"]) == (6, 2, 3, 50.0, 62.0)
    assert (entry["pt_mean_lo"], entry["pt_mean_hi"], entry["seed_range"]) == (51.0, 61.0, 2.0)


@pytest.mark.slow
def test_smoke_study_end_to_end(tmp_path):
    from cfka_jax.runs.biography import pretrain
    from cfka_jax.runs.specs import PTSpec

    cache = str(tmp_path / "cache")
    pretrain(PTSpec(preset="smoke", out=str(tmp_path / "pt"), cache_dir=cache, progress=False))
    cfg = sr.RegimeConfig(preset="smoke", pt_dir=str(tmp_path / "pt"), out=str(tmp_path / "study"),
                          kinds=("first_k", "random_vocab"), sources=2, train=True, naive=True, cache_dir=cache,
                          progress=False)
    rows = sr.main_cfg(cfg)
    assert [r["kind"] for r in rows] == ["first_k", "random_vocab", "naive"]
    assert rows[0]["prompts_at_0"] > 0 and "retention/interfered" in rows[0] and "Original/sFTA" in rows[2]
    again = sr.main_cfg(cfg)  # resumes: every corpus and run is reused
    assert [r["Original/sFTA"] for r in again] == [r["Original/sFTA"] for r in rows]


@pytest.mark.slow
def test_smoke_study_with_pt_replicates_end_to_end(tmp_path):
    """--pt-seeds trains one PT run per seed here, runs every cell per (PT seed, seed), and resumes."""
    cfg = sr.RegimeConfig(preset="smoke", pt_seeds=(0, 1), out=str(tmp_path / "study"), kinds=("first_k",),
                          sources=2, train=True, cache_dir=str(tmp_path / "cache"), progress=False,
                          record="cfka/regime", results=str(tmp_path / "results"))
    rows = sr.main_cfg(cfg)
    assert [(r["pt"], r["kind"]) for r in rows] == [("s0", "first_k"), ("s1", "first_k")]
    assert (tmp_path / "study" / "pt-seed1" / "final.json").exists() and "Original/sFTA" in rows[1]
    assert rows[0]["Original/sFTA"] != rows[1]["Original/sFTA"] or rows[0]["names_new"] != rows[1]["names_new"]
    again = sr.main_cfg(cfg)
    assert [r["Original/sFTA"] for r in again] == [r["Original/sFTA"] for r in rows]
