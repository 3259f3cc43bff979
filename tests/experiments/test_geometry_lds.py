"""``cfka geometry lds`` (experiments/geometry_lds.py): options parse and bad values exit 2 naming the option; the
smoke run writes a valid produced record seed by seed and resumes finished seeds."""

from __future__ import annotations

import dataclasses

import pytest
from cfka_jax.experiments import geometry
from cfka_jax.experiments.geometry_lds import METHODS, SCALES, LdsConfig

from cfka_jax import cli
from cfka_jax.claims.results import load_records


def test_options_parse_into_the_frozen_config():
    name, cfg = geometry.configs(["lds", "--scale", "small", "--fraction", "0.25", "--subsets", "40", "--seeds",
                                  "0,1,2", "--record", "lds_small", "--mode", "vmap"])
    assert name == "lds" and isinstance(cfg, LdsConfig)
    assert (cfg.fraction, cfg.subsets, cfg.seeds, cfg.record, cfg.mode) == (0.25, 40, (0, 1, 2), "lds_small", "vmap")
    assert cfg.out == "runs/geometry/lds-small" and cfg.num_subsets == 40
    assert geometry.configs(["lds"])[1].num_subsets == SCALES["smoke"].subsets
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.fraction = 0.5


@pytest.mark.parametrize("argv, option", [
    (["--fraction", "0"], "--fraction"), (["--fraction", "1"], "--fraction"), (["--fraction", "1.5"], "--fraction"),
    (["--fraction", "nan"], "--fraction"), (["--subsets", "2"], "--subsets"), (["--subsets", "-4"], "--subsets"),
    (["--mode", "pmap"], "--mode"), (["--lr", "0"], "--lr"), (["--record", "../x"], "--record"),
])
def test_bad_values_exit_2_naming_the_option(argv, option, capsys, monkeypatch):
    """Through ``cfka``'s own entry: refused as parsed (argparse, exit 2) or by the config (one line, exit 2)."""
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    try:
        code = cli.main(["geometry", "lds", "--out", "unused", *argv])
    except SystemExit as info:
        code = info.code
    assert code == 2
    assert option in capsys.readouterr().err


def test_the_config_refuses_bad_values_built_directly():
    for kwargs, word in (({"fraction": 1.0}, "--fraction"), ({"subsets": 2}, "--subsets"),
                         ({"mode": "pmap"}, "--mode"), ({"scale": "paper"}, "scale")):
        with pytest.raises(ValueError, match=word):
            LdsConfig(**kwargs)


@pytest.mark.slow
def test_smoke_run_writes_a_valid_record_and_resumes(tmp_path):
    out, results = tmp_path / "lds", tmp_path / "results"
    argv = ["lds", "--scale", "smoke", "--out", str(out), "--results", str(results), "--seeds", "0",
            "--record", "lds_smoke"]
    assert geometry.main(argv) == 0
    rec = load_records(results)["token-force/lds_smoke"]
    assert rec.origin == "produced" and rec.provenance["seeds"] == [0]
    assert rec.provenance["command"].startswith("cfka geometry lds --scale smoke")
    assert [r["method"] for r in rec.rows] == ["retrain", *METHODS]
    for row in rec.rows[1:]:
        assert -1.0 <= row["lds"] <= 1.0 and row["wall_s"] >= 0 and row["cpu_s"] >= 0 and row["subsets"] == 4
    assert rec.select(method="retrain")[0]["nonfinite_steps"] == 0
    for name in ("lds.json", "lds.md", "lds_rows.json"):
        assert (out / "seed0" / name).exists()
    first = (out / "seed0" / "lds_rows.json").stat().st_mtime_ns
    assert geometry.main(argv) == 0  # the finished seed is resumed, not rerun
    assert (out / "seed0" / "lds_rows.json").stat().st_mtime_ns == first
