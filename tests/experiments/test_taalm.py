"""experiments/taalm.py and taalm_biography.py: shipped presets parse, the report tables, the CLI arguments, and
(slow) smoke runs."""

import dataclasses
import json

import pytest

from cfka_jax.experiments import taalm, taalm_biography, taalm_report as report


@pytest.mark.parametrize("name", sorted(taalm.PRESETS))
def test_every_preset_parses(name, tmp_path):
    cfg = taalm.preset(name, str(tmp_path))
    assert cfg.preset == name and cfg.out == str(tmp_path)
    assert set(cfg.methods) >= {"Finetune", "Oracle", "TAALM"} and cfg.metatrain.meta.inner_form == "adamw2_ref"
    json.dumps(dataclasses.asdict(cfg))  # config.json is writable
    assert set(report.PAPER_LAMA) <= set(taalm.LAMA_METHODS)


def test_bad_settings_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="--methods: .*EWC.* not available in the ckl recipe"):
        dataclasses.replace(taalm.preset("smoke", str(tmp_path)), methods=("TAALM + EWC",))
    with pytest.raises(ValueError, match="unknown preset"):
        taalm.preset("huge")
    with pytest.raises(SystemExit):
        taalm.main(["--preset", "huge"])


def test_tables_put_the_paper_beside_ours():
    hist = [{"epoch": 0, "to_learn/acc": 0.0, "not_to_forget/acc": 1.0},
            {"epoch": 1, "to_learn/acc": 0.3, "not_to_forget/acc": 0.9}]
    lama = {"TAALM": {"summary": {"top_acc": 0.3, "epoch": 1, "nf_acc": 0.9, "total_knowledge": 1.2},
                      "history": hist}}
    text = report.lama_markdown(lama)
    assert "| TAALM | 0.3000 | 1 | 0.9000 | 1.2000 | 0.4290 | 4 | 0.8983 | 1.3273 |" in text
    assert "| θ0 (before training) | 0.0000 | 0 | 1.0000 |" in text
    rec = {"period": "period1", "before": {"changed/nll": 5.0, "unchanged/nll": 2.0},
           "after": {"changed/nll": 4.0, "unchanged/nll": 2.5}}
    tw = report.twiki_markdown({"Finetune": [rec]})
    assert "| Finetune | 5.000 → 4.000 | 10.057 / 9.531 / 9.632 |" in tw
    assert "| Finetune | 2.000 → 2.500 | 9.999 / 9.554 / 9.737 |" in tw


@pytest.mark.slow
def test_smoke_run_writes_tables_plot_and_heatmap(tmp_path):
    out = tmp_path / "run"
    argv = ["--preset", "smoke", "--out", str(out), "--methods", "Finetune,TAALM", "--twiki-methods", "Finetune",
            "--no-progress"]
    assert taalm.main(argv) == 0
    table = (out / "table.md").read_text()
    assert "| TAALM |" in table and "| Finetune |" in table and "TemporalWiki" in table
    assert (out / "accuracy.png").stat().st_size > 0 and (out / "phi_heatmap.png").stat().st_size > 0
    summary = json.loads((out / "table.json").read_text())
    assert set(summary["lama"]) == {"Finetune", "TAALM"} and summary["phi_best_step"] is not None
    assert (out / "phi" / "phi.json").exists() and (out / "lama_ckl" / "variant.jsonl").exists()
    # a second call resumes every stage from the folder
    assert taalm.main(argv) == 0
    with pytest.raises(ValueError, match="other settings"):
        taalm.run(dataclasses.replace(taalm.preset("smoke", str(out)), pt=dataclasses.replace(
            taalm.preset("smoke").pt, epochs=3)))


@pytest.mark.parametrize("name", sorted(taalm_biography.PRESETS))
def test_biography_presets_parse_and_the_mode_dispatches(name, tmp_path):
    cfg = taalm_biography.PRESETS[name]()
    assert cfg.preset == name and cfg.method == "replay-all" and cfg.metatrain.meta.inner_form == "adamw2_ref"
    json.dumps(dataclasses.asdict(cfg))
    with pytest.raises(ValueError, match="not available in the biography recipe"):
        dataclasses.replace(cfg, method="taalm")
    with pytest.raises(SystemExit):  # `cfka taalm --biography ...` goes to taalm_biography's parser
        taalm.main(["--biography", str(tmp_path), "--preset", "paper"])


@pytest.mark.slow
def test_biography_smoke_run_writes_phi_table_and_heatmap(tmp_path):
    from cfka_jax.runs.biography import pretrain
    from cfka_jax.runs.specs import PTSpec

    cache, pt = str(tmp_path / "cache"), str(tmp_path / "pt")
    pretrain(PTSpec(preset="smoke", out=pt, cache_dir=cache, progress=False))
    out = tmp_path / "bio"
    argv = ["--biography", pt, "--preset", "smoke", "--out", str(out), "--cache-dir", cache, "--no-progress"]
    assert taalm.main(argv) == 0
    summary = json.loads((out / "table.json").read_text())
    assert set(summary["runs"]) == {"replay-all", "replay-all + TAALM φ"}
    assert all(r["Continual/sFTA"] is not None for r in summary["runs"].values())
    assert 0.0 < summary["phi_weights"]["w_value_mean"] <= 1.0 and (out / "phi_heatmap.png").stat().st_size > 0
    meta = json.loads((out / "metatrain.json").read_text())
    assert meta["pairs"]["empty_object_masks"] == 0 and meta["pairs"]["dropped_unk"] == 0
