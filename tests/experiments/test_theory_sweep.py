"""Smoke test of `cfka sweep` (experiments/theory_sweep.py) on a tiny grid."""

import csv
import json

import pytest

from cfka_jax.experiments import theory_sweep as exp


def test_tiny_sweep_writes_csv_and_plots(tmp_path):
    out = tmp_path / "sweep"
    argv = ["--ks", "0,1", "--alphas", "0.9,1", "--seeds", "2", "--steps", "20", "--log-every", "10",
            "--batch-size", "4", "--chunk-runs", "4", "--out", str(out)]
    assert exp.main(argv) == 0
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert len(rows) == 4 and {"old_prob", "old_prob_theory", "probe_var_theory"} <= set(rows[0])
    for name in ("sweep_trajectories", "sweep_distance_vs_k", "sweep_amplitude_vs_alpha"):
        assert (out / f"{name}.png").stat().st_size > 10_000
    assert json.loads((out / "config.json").read_text())["num_seeds"] == 2


def test_config_file_and_overrides(tmp_path):
    toml = tmp_path / "grid.toml"
    toml.write_text('ks = [0, 2]\nalphas = [0.5]\nnum_seeds = 3\nreplay = "generative"\n')
    cfg = exp.load_config(["--config", str(toml), "--seeds", "5"])
    assert cfg.ks == (0.0, 2.0) and cfg.alphas == (0.5,) and cfg.num_seeds == 5 and cfg.replay == "generative"
    js = tmp_path / "grid.json"
    js.write_text(json.dumps({"ks": [1], "steps": 40, "log_every": 20}))
    assert exp.load_config(["--config", str(js)]).steps == 40
    js.write_text(json.dumps({"kk": [1]}))
    with pytest.raises(ValueError):
        exp.load_config(["--config", str(js)])
