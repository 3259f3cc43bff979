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
    assert sr.switches(sr.RegimeConfig(), "stoc_nq").score_norm == "n_queries"
    with pytest.raises(ValueError, match="--update"):
        sr.RegimeConfig(update="half")
    with pytest.raises(SystemExit) as err:
        sr.main(["--pt-dir", "x", "--out", "y", "--arch", "gpt2"])
    assert err.value.code == 2


def test_bpe_vocab_reaches_the_data_config_and_presets_reach_the_world():
    assert sr.RegimeConfig(bpe_vocab=1024).scale.data_config().bpe_vocab == 1024
    assert sr.RegimeConfig().scale.data_config().bpe_vocab is None
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
    table = sr.markdown(rows)
    assert "| random | 1 | 2000 | 7 | 10.0 | 50.0 | 25.0 | 25.0 | 40.0 | 80.0 | 30.0 | 60.0 | 50.0 | 70.0 | 60.0 | " \
           "45.0 | 55.0 |" in table


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
