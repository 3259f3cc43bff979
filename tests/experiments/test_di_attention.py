"""The DI-vs-attention script: arguments, the table beside the paper's numbers and (slow) a smoke panel."""

import json

import numpy as np
import pytest

from cfka_jax.experiments import di_attention as da


def test_parse_and_config_checks(tmp_path):
    cfg = da.parse(["--preset", "small", "--attention", "linear", "--seeds", "8", "--out", str(tmp_path),
                    "--pt-steps", "600", "--no-retention"])
    assert (cfg.preset, cfg.attention, cfg.seeds, cfg.pt_steps, cfg.retention) == ("small", "linear", 8, 600, False)
    assert cfg.spec().seeds == tuple(range(8)) and cfg.spec().scale.pt.steps == 600
    for bad in (dict(seeds=0), dict(objects="word"), dict(min_count=0), dict(attention="cosine")):
        with pytest.raises(ValueError):
            da.Config(**bad)
    with pytest.raises(SystemExit):
        da.parse(["--preset", "tiny", "--out", str(tmp_path)])


def test_table_lists_the_papers_numbers_beside_ours():
    corr = {"pearson": -0.81, "spearman": -0.9, "pearson_ci": (-0.85, -0.77), "spearman_ci": (-0.93, -0.86)}
    summary = da.summarise([{"centred/cooccur": {"pooled": corr, "layers": [corr]}}] * 2,
                           {"centred/cooccur": {"pooled": corr, "layers": [corr]}})
    text = da.table(da.Config(attention="linear", seeds=2), summary)
    row = text.splitlines()[2]
    assert row.startswith("| pooled layers | centred/cooccur | -0.810 ± 0.000 | -0.900 ± 0.000 |")
    assert "-0.810 [-0.850, -0.770]" in row and row.endswith("| -0.8277 | -0.8776 |")
    control = {"centred/cooccur": {"pooled": corr | {"pearson": 0.25}, "layers": [corr]}}
    rows = da.table(da.Config(attention="linear", seeds=2), summary, control).splitlines()
    assert rows[:3] == text.splitlines() and len(rows) == 4
    assert rows[3].startswith("| untrained (init control) | centred/cooccur | — | — | 0.250 [-0.850, -0.770]")


@pytest.mark.slow  # ~1 min on an idle 2-core machine: two tiny ensembles, attention, STOC and retention compile
def test_smoke_panel_writes_json_table_and_scatter(tmp_path):
    out = tmp_path / "panel"
    assert da.main(["--preset", "smoke", "--seeds", "2", "--out", str(out), "--cache-dir", str(tmp_path / "data"),
                    "--pt-steps", "2", "--cpt-steps", "1", "--bootstrap", "5", "--min-count", "5"]) == 0
    res = json.loads((out / "di_attention.json").read_text())
    assert set(res["summary"]) == {"centred/cooccur", "uncentred/cooccur", "centred/all", "uncentred/all"}
    pooled = res["summary"]["centred/cooccur"]["pearson"]["pooled"]
    assert pooled["n"] == 2 and -1 <= pooled["mean"] <= 1
    assert len(res["summary"]["centred/cooccur"]["pearson"]["layers"]) == 2  # the smoke port has 2 layers
    assert set(res["by_slot"]["centred/cooccur"]) <= {"name", "relation", "template", "object"}
    z = np.load(out / "attention.npz")
    assert z["z_ELM"].shape == z["z_init_ELM"].shape == (2, 2, z["slots"].size)
    change = da.training_change(out / "attention.npz", num_boot=5)
    assert set(change) == {"centred_cooccur", "uncentred_cooccur", "centred_all", "uncentred_all"}
    assert set(res["init_control"]) == set(res["summary"]) and len(res["init_control"]["centred/all"]["layers"]) == 2
    assert len(res["per_seed"]) == 2 and len(res["stoc"]["per_seed"]) == 2 and len(res["retention"]["per_seed"]) == 2
    assert sum(res["token_types"].values()) > 50 and res["token_types"]["other"] == 0
    assert "-0.7842" in (out / "table.md").read_text() and (out / "scatter.png").stat().st_size > 10_000
    assert (out / "pt" / "ensemble.json").exists() and (out / "cpt" / "ensemble.json").exists()
    again = da.run(da.parse(["--preset", "smoke", "--seeds", "2", "--out", str(out), "--cache-dir",
                             str(tmp_path / "data"), "--pt-steps", "2", "--cpt-steps", "1", "--bootstrap", "5",
                             "--min-count", "5"]))  # reuses the saved ensembles: the same numbers
    np.testing.assert_array_equal(again["summary"]["centred/cooccur"]["pearson"]["pooled"]["mean"], pooled["mean"])


def test_measure_options_parse_and_refuse_unknown_names(tmp_path):
    cfg = da.parse(["--preset", "names150", "--out", str(tmp_path), "--measures", "fact,occurrence", "--skip-legacy",
                    "--pt-checkpoint"])
    assert (cfg.measures, cfg.legacy, cfg.pt_checkpoint) == (("fact", "occurrence"), False, True)
    assert da.parse(["--out", str(tmp_path)]).measures == da.MEASURES
    assert da.parse(["--out", str(tmp_path), "--measures", ""]).measures == ()
    with pytest.raises(SystemExit):
        da.parse(["--out", str(tmp_path), "--measures", "fact,cosine"])
    with pytest.raises(ValueError, match="measures"):
        da.Config(measures=("fact", "fact"))
