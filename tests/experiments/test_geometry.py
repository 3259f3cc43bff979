"""`cfka geometry` (experiments/geometry.py): every subcommand parses; smoke runs write their tables and plots."""

import dataclasses
import json
import math

import pytest

from cfka_jax.experiments import geometry
from cfka_jax.experiments.geometry_common import SCALES, markdown_table
from cfka_jax.experiments.geometry_transmission import checkpoints, resets_for


def test_subcommands_parse_into_frozen_configs(tmp_path):
    command, cfg = geometry.configs(["onestep", "--scale", "small", "--arch", "pythia", "--eta", "1e-5",
                                     "--out", str(tmp_path)])
    assert (command, cfg.scale, cfg.arch, cfg.eta, cfg.out) == ("onestep", "small", "pythia", 1e-5, str(tmp_path))
    _, cfg = geometry.configs(["energy", "--taus", "inf,1.5", "--normalize", "kept"])
    assert cfg.taus == (math.inf, 1.5) and cfg.normalize == "kept" and cfg.out == "runs/geometry/energy-smoke"
    _, cfg = geometry.configs(["attribution", "--vocab", "full"])
    assert cfg.vocab == "full"
    _, cfg = geometry.configs(["coldstart", "--lr", "3e-4"])
    assert cfg.lr == 3e-4 and cfg.eta == 1e-5
    _, cfg = geometry.configs(["transmission", "--cache-dir", str(tmp_path)])
    assert cfg.cache_dir == str(tmp_path) and cfg.resets == ("none", "readout", "readout_only", "paper_last4")
    _, cfg = geometry.configs(["transmission", "--resets", "none,paper_last4"])
    assert cfg.resets == ("none", "paper_last4")
    for bad in ("readout,paper_last4", "none,readout_only", "none,readout,top9"):
        with pytest.raises(ValueError):
            geometry.configs(["transmission", "--resets", bad])
    _, cfg = geometry.configs(["coldstart", "--start", "base", "--steps", "0,25,200"])
    assert cfg.start == "base" and cfg.steps == (0, 25, 200)
    _, cfg = geometry.configs(["erosion", "--taus", "1.8,1.0", "--seeds", "3,4", "--lr", "3e-4"])
    assert cfg.taus == (1.8, 1.0) and cfg.run_seeds == (3, 4) and cfg.lr == 3e-4
    assert geometry.configs(["erosion", "--scale", "small"])[1].run_seeds == (0, 1, 2)
    _, cfg = geometry.configs(["crosslingual", "--topk", "8"])
    assert cfg.topk == 8 and cfg.out == "runs/geometry/crosslingual-smoke"
    _, cfg = geometry.configs(["select", "--fraction", "0.1", "--seeds", "5"])
    assert cfg.fraction == 0.1 and cfg.seeds == (5,)
    for bad in (["erosion", "--taus", "inf"], ["crosslingual", "--topk", "0"], ["select", "--fraction", "0"]):
        with pytest.raises(ValueError):
            geometry.configs(bad)
    with pytest.raises(SystemExit) as info:  # an integer option below 0: refused as it is parsed, exit 2
        geometry.configs(["coldstart", "--steps", "-1"])
    assert info.value.code == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.scale = "small"
    with pytest.raises(SystemExit):
        geometry.configs(["onestep", "--scale", "paper"])
    with pytest.raises(SystemExit) as info:  # refused by the argparse type, exit 2
        geometry.configs(["energy", "--taus", "0"])
    assert info.value.code == 2


def test_help_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as info:
        geometry.main(["--help"])
    assert info.value.code == 0 and "usage: cfka geometry" in capsys.readouterr().out


def test_checkpoint_fractions_resets_and_scales():
    assert checkpoints(400) == [20, 40, 80, 160, 400] and checkpoints(6) == [1, 2, 6]
    assert list(resets_for(3)) == ["none", "readout", "readout_only", "paper_last4"]
    assert resets_for(3)["paper_last4"].blocks == 3 and resets_for(2)["paper_last4"].blocks == 1
    assert set(SCALES) == {"smoke", "small"}
    assert markdown_table(["a", "b"], [[1, 0.123456]]) == "| a | b |\n|---|---|\n| 1 | 0.1235 |\n"


@pytest.mark.slow
@pytest.mark.parametrize("command, extra, files", [
    ("onestep", [], ["onestep.json", "onestep.md", "onestep_pairs.json", "onestep_scatter.png"]),
    ("coldstart", [], ["coldstart.json", "coldstart.md", "coldstart_sign.png"]),
    ("attribution", [], ["attribution.json", "attribution.md", "attribution_auc.png"]),
    ("energy", ["--taus", "inf,1.5"], ["energy.json", "energy.md", "energy_hist.json", "energy_histogram.png"]),
    ("erosion", ["--taus", "1.5"], ["erosion.json", "erosion.md", "erosion_seed0.json", "erosion_curves.png",
                                    "erosion_prediction.png"]),
    ("crosslingual", [], ["crosslingual.json", "crosslingual.md", "crosslingual_recall.png"]),
    ("select", [], ["select.json", "select.md", "select_rows.json", "select_accuracy.png"]),
])
def test_smoke_runs_write_tables_and_plots(tmp_path, command, extra, files):
    out = tmp_path / command
    assert geometry.main([command, "--scale", "smoke", "--out", str(out), *extra]) == 0
    for name in files:
        assert (out / name).stat().st_size > (10_000 if name.endswith(".png") else 50), name
    data = json.loads((out / f"{command}.json").read_text())
    if command == "attribution":
        assert {"ch1", "ch1-ch2", "ch1-ch2-inputln", "exact", "datainf"} <= set(data["metrics"])
    if command == "energy":
        assert [r["tau"] for r in data["runs"]] == ["inf", 1.5] and data["runs"][0]["masked_fraction"] == 0.0
    if command == "erosion":
        assert list(data["variants"]) == ["plain", "tau=1.5", "isolated"]
        assert data["variants"]["plain"]["masked_fraction_base"] == [0.0, 0.0]
        mtime = (out / "erosion_seed0.json").stat().st_mtime_ns
        assert geometry.main([command, "--scale", "smoke", "--out", str(out), *extra]) == 0  # resumes the seed
        assert (out / "erosion_seed0.json").stat().st_mtime_ns == mtime
    if command == "select":
        assert set(data["summary"]) == {"random", "ch1", "ch1-ch2-inputln", "datainf", "hyperinf", "less", "oracle"}
        assert all(r["selected"] == 2 for d in data["seeds"] for r in d["rows"])
    if command == "crosslingual":
        assert {"ch1/topk_unique", "ch1-ch2-inputln/topk_unique", "random (100 draws)"} <= set(data["summary"])


@pytest.mark.slow
def test_transmission_smoke(tmp_path):
    from cfka_jax.claims.papers import token_force_transmission as tr
    from cfka_jax.claims.results import load_records

    out, results = tmp_path / "transmission", tmp_path / "results"
    assert geometry.main(["transmission", "--scale", "smoke", "--out", str(out), "--cache-dir",
                          str(tmp_path / "cache"), "--record", "t_bio", "--results", str(results)]) == 0
    data = json.loads((out / "transmission.json").read_text())
    assert data["checkpoints"] == [1, 2, 6] and set(data["R"]) == {"0", "1", "2", "3", "4", "5", "6"}
    assert data["correlations"]["rho_task/readout/L_final"]["n"] == 15
    assert (out / "transmission_R.png").stat().st_size > 10_000
    rec = load_records(results)["token-force/t_bio"]  # seed 0 into --out: the record's rows are its numbers
    assert rec.provenance["seeds"] == [0] and (out / "transmission_rows.json").exists()
    assert len(rec.select(kind="R")) == 7 * 7 and len(rec.select(kind="sft")) == 5 * (1 + 3 * 4)
    for cell in data["sft"]:
        (row,) = rec.select(kind="sft", cpt_step=cell["checkpoint"], reset=cell["reset"], task=cell["task"])
        assert row["l_final"] == float(f"{cell['L_final']:.6g}") and row["l0"] == float(f"{cell['L0']:.6g}")
    (row,) = rec.select(kind="R", cpt_step=6, probe="bio")
    assert row["r_mean"] == float(f"{data['R']['6']['bio']:.6g}")
    (pt,) = rec.select(kind="pt")
    assert 0.0 <= pt["original_hfta"] <= 1.0 and pt["cpt_original_hfta"] is not None
    assert tr.bio_losses(rec)[0] == 6  # the rule reads the produced record


def test_sweep_cache_resumes_only_the_same_sft_config(tmp_path):
    from cfka_jax.geometry.plasticity import SFTConfig
    from cfka_jax.experiments.geometry_transmission import _sweep_cache

    sft = SFTConfig(steps=4, lr=1e-3)
    cell = {"L0": 2.0, "L_final": 1.0}
    (tmp_path / "sweep.json").write_text(json.dumps({"sft": dataclasses.asdict(sft),
                                                     "cells": [[20, "readout", "task_major", cell]]}))
    path, cells = _sweep_cache(tmp_path, sft)
    assert path == tmp_path / "sweep.json" and cells == {(20, "readout", "task_major"): cell}
    assert _sweep_cache(tmp_path, SFTConfig(steps=5, lr=1e-3))[1] == {}
    assert _sweep_cache(tmp_path / "empty", sft)[1] == {}


def test_transmission_ood_world_flags():
    _, cfg = geometry.configs(["transmission", "--world", "ood", "--seeds", "0,1",
                               "--resets", "none,readout,paper_last4,last4"])
    assert (cfg.world, cfg.seeds, cfg.resets) == ("ood", (0, 1), ("none", "readout", "paper_last4", "last4"))
    assert geometry.configs(["transmission"])[1].world == "biography"
    with pytest.raises(ValueError, match="resets"):  # last4 (k = 4 literally) only on the ood world's 6 blocks
        geometry.configs(["transmission", "--resets", "none,last4"])
    from cfka_jax.experiments.geometry_transmission_ood import OOD_SCALES

    for s in OOD_SCALES.values():
        assert s.model.layers >= 6
    small = OOD_SCALES["small"]
    assert len(small.checkpoints) >= 8 and len(small.seeds) >= 3


def _fake_run(scale, sign):
    """R and SFT curves whose gain is ``sign`` × twice the relative drop on each task's own probe."""
    from cfka_jax.geometry.ood import TASKS

    r = {0: {p: 1.0 for p in (*TASKS, "bio")}}
    curves = {}
    for c in (1, 2, 3):
        r[c] = {d: 1.0 - 0.05 * c * (i + 1) for i, d in enumerate(TASKS)}
        r[c]["bio"] = 1.0 - 0.01 * c
        for d in TASKS:
            drop = 1.0 - r[c][d]
            curves[(c, "none", d)] = {"L_final": 1.0 + scale, "L_min": 1.0 + scale}
            curves[(c, "readout", d)] = {"L_final": 1.0 + scale - sign * 2 * drop,
                                         "L_min": 1.0 + scale - sign * 2 * drop}
    return {"R": r, "curves": curves}


def test_transmission_ood_correlations_pool_seeds():
    from cfka_jax.experiments.geometry_transmission_ood import correlations

    corr = correlations({0: _fake_run(0.0, 1.0), 1: _fake_run(0.5, 1.0)}, (1, 2, 3), ("none", "readout"))
    assert corr["seed0/rho_task/readout/L_final"]["n"] == 9 and corr["rho_task/readout/L_final"]["n"] == 18
    assert corr["rho_task/readout/L_final"]["rho"] == pytest.approx(1.0)
    assert corr["seed1/rho_task/readout/L_min"]["rho"] == pytest.approx(1.0)
    # bio's drop is the checkpoint's only, so ties within a checkpoint: ρ_bio < 1 but positive here
    assert 0.0 < corr["rho_bio/readout/L_final"]["rho"] < 1.0
    flipped = correlations({0: _fake_run(0.0, -1.0)}, (1, 2, 3), ("none", "readout"))
    assert flipped["rho_task/readout/L_final"]["rho"] == pytest.approx(-1.0)


@pytest.mark.slow
def test_transmission_ood_smoke(tmp_path):
    from cfka_jax.claims.results import load_records

    out, results = tmp_path / "ood", tmp_path / "results"
    argv = ["transmission", "--world", "ood", "--scale", "smoke", "--out", str(out),
            "--resets", "none,readout,paper_last4,last4", "--record", "t_ood", "--results", str(results)]
    assert geometry.main(argv) == 0
    data = json.loads((out / "transmission.json").read_text())
    assert data["checkpoints"] == [2, 4, 8] and set(data["R"]["0"]) == {"0", "2", "4", "8"}
    assert data["correlations"]["rho_task/last4/L_final"]["n"] == 9
    assert data["correlations_norm"]["rho_task/last4/L_final"]["n"] == 9
    assert {r["reset"] for r in data["sft"]} == {"none", "readout", "paper_last4", "last4"}
    assert (out / "reset_gain_vs_drop.png").stat().st_size > 10_000 and (out / "seed0.json").exists()
    rec = load_records(results)["token-force/t_ood"]
    assert rec.origin == "produced" and rec.provenance["seeds"] == [0] and rec.provenance["wall_s"] > 0
    assert "--record t_ood" in rec.provenance["command"] and "--world ood" in rec.provenance["command"]
    assert len(rec.rows) == 3 * (1 + 3 * 4)  # tasks × (base + checkpoints × resets)
    seed = json.loads((out / "seed0.json").read_text())
    for row in rec.rows:  # R / size is the seed's R over the checkpoint's readout size; the record keeps 6 digits
        c, d = str(row["cpt_step"]), row["task"]
        assert seed["R_norm"][c][d] == seed["R"][c][d] / seed["readout_size"][c]
        assert row["r_norm"] == float(f"{seed['R_norm'][c][d]:.6g}") and row["acc"] == float(f"{seed['acc'][c][d]:.6g}")
        assert 0.0 <= row["acc"] <= 1.0 and 0.0 < row["chance"] <= 1.0
    base = {r["task"]: r for r in rec.select(cpt_step=0)}
    assert all(r["base_acc"] == base[r["task"]]["acc"] for r in rec.rows)
    mtime = (out / "seed0.json").stat().st_mtime_ns
    assert geometry.main(argv) == 0  # the second call reads seed0.json back and rewrites the record from it
    assert (out / "seed0.json").stat().st_mtime_ns == mtime
    assert json.loads((out / "transmission.json").read_text())["R"] == data["R"]
    assert load_records(results)["token-force/t_ood"].rows == rec.rows


def test_transmission_record_is_a_plain_name_in_either_world():
    with pytest.raises(ValueError, match="--record must be a plain name"):
        geometry.configs(["transmission", "--world", "ood", "--record", "../t"])
    for world in ("ood", "biography"):
        _, cfg = geometry.configs(["transmission", "--world", world, "--record", "t", "--results", "r"])
        assert (cfg.record, cfg.results, cfg.world) == ("t", "r", world)


def _bio_seed_result(seed):
    """What one Biography seed measures, made up: R per probe at CPT steps 0, 1, 2; SFT curves from the base model
    (none) and checkpoints 1, 2 (none, readout) on two tasks; one ρ row that is NaN (too few points)."""
    r_at = {c: {"task_major": 0.5 + 0.1 * c, "bio": 0.02 / (c + 1)} for c in (0, 1, 2)}
    curves = {}
    for c in (0, 1, 2):
        for reset in (("none",) if c == 0 else ("none", "readout")):
            for t in ("task_major", "task_company"):
                final = 1.0 + 0.1 * c - (0.05 * c if reset == "readout" else 0.0) + 0.01 * seed
                curves[(c, reset, t)] = {"L0": 2.0 + c, "L_final": final, "L_min": final - 0.01,
                                         "plast": 2.0 + c - final}
    corr = {"rho_task/readout/L_final": {"rho": 0.5, "p": 0.25, "n": 4},
            "rho_bio/readout/L_min": {"rho": float("nan"), "p": float("nan"), "n": 4}}
    return r_at, curves, corr, {"Original/hFTA": 0.875, "Original/sFTA": 0.75}, {"Original/hFTA": 0.25,
                                                                                   "Original/sFTA": 0.3333333333}


def test_transmission_bio_record_rows_of_a_finished_seed():
    from cfka_jax.experiments.geometry_transmission import record_rows

    rows = record_rows(4, *_bio_seed_result(4))
    assert {r["seed"] for r in rows} == {4} and [r["kind"] for r in rows].count("pt") == 1
    assert rows[0] == {"kind": "pt", "seed": 4, "original_hfta": 0.875, "original_sfta": 0.75,
                       "cpt_original_hfta": 0.25, "cpt_original_sfta": 0.333333}
    r_rows = [r for r in rows if r["kind"] == "R"]
    assert len(r_rows) == 3 * 2 and {"kind": "R", "seed": 4, "cpt_step": 1, "probe": "bio", "r_mean": 0.01} in r_rows
    sft = [r for r in rows if r["kind"] == "sft"]
    assert len(sft) == 2 * (1 + 2 * 2)  # tasks × (base + checkpoints × resets)
    row = next(r for r in sft if (r["cpt_step"], r["reset"], r["task"]) == (2, "readout", "task_company"))
    assert row == {"kind": "sft", "seed": 4, "cpt_step": 2, "reset": "readout", "task": "task_company",
                   "l0": 4.0, "l_final": 1.14, "l_min": 1.13, "plasticity": 2.86}
    rho = [r for r in rows if r["kind"] == "rho"]
    assert rho == [{"kind": "rho", "seed": 4, "statistic": "rho_task", "reset": "readout", "loss": "L_final",
                    "rho": 0.5, "p": 0.25, "n": 4},
                   {"kind": "rho", "seed": 4, "statistic": "rho_bio", "reset": "readout", "loss": "L_min",
                    "rho": None, "p": None, "n": 4}]


def test_transmission_bio_record_as_seeds_finish(tmp_path, monkeypatch):
    """--world biography --seeds 0,1 --record: the record is rewritten after each seed from the seeds' rows files
    (seed 1 starts with seed 0 in it), with the command, config, seeds and seconds; a rerun keeps the finished
    seeds and a longer seed list runs only the new one. The seeds themselves are made up (a real one is the slow
    smoke test below)."""
    from cfka_jax.claims.results import load_records
    from cfka_jax.experiments import geometry_transmission as gt

    out, results = tmp_path / "bio", tmp_path / "results"
    ran = []

    def fake_seed(cfg, s, bundle, probes, train, seed, seed_dir):
        assert seed_dir == out / f"seed{seed}" and set(probes) == set(train) | {"bio", "original"}
        held = load_records(results)["token-force/t_bio"].provenance["seeds"] if ran else []
        assert held == ran  # the record already holds every seed finished before this one
        ran.append(seed)
        return gt.record_rows(seed, *_bio_seed_result(seed))

    monkeypatch.setattr(gt, "_bio_seed", fake_seed)
    argv = ["transmission", "--scale", "smoke", "--resets", "none,readout", "--out", str(out), "--cache-dir",
            str(tmp_path / "cache"), "--record", "t_bio", "--results", str(results)]
    assert geometry.main([*argv, "--seeds", "0,1"]) == 0 and ran == [0, 1]
    rec = load_records(results)["token-force/t_bio"]
    prov = rec.provenance
    assert rec.origin == "produced" and prov["seeds"] == prov["seeds_planned"] == [0, 1]
    assert prov["command"] == (f"cfka geometry transmission --scale smoke --cache-dir {tmp_path / 'cache'} "
                               f"--resets none,readout --seeds 0,1 --out {out} --record t_bio --results {results}")
    assert prov["config"]["resets"] == ["none", "readout"] and "seeds" not in prov["config"]
    assert set(prov["seed_seconds"]) == {"0", "1"} and prov["wall_s"] >= 0 and prov["cpu_s"] >= 0
    assert set(rec.regime) == {"model", "params", "pt_quality", "world", "dose"}
    assert "d = 32, 2 blocks" in rec.regime["model"] and "resets none / readout" in rec.regime["dose"]
    assert rec.rows == tuple(gt.record_rows(0, *_bio_seed_result(0)) + gt.record_rows(1, *_bio_seed_result(1)))
    rows_file = json.loads((out / "seed1" / "transmission_rows.json").read_text())
    assert rows_file["seed"] == 1 and rows_file["regime"] == rec.regime
    assert geometry.main([*argv, "--seeds", "0,1"]) == 0 and ran == [0, 1]  # both finished: nothing runs
    assert load_records(results)["token-force/t_bio"].rows == rec.rows
    assert geometry.main([*argv, "--seeds", "0,1,2"]) == 0 and ran == [0, 1, 2]
    assert load_records(results)["token-force/t_bio"].provenance["seeds"] == [0, 1, 2]
    assert geometry.main([*argv, "--seeds", "0", "--sft-lr", "0.01"]) == 0 and ran == [0, 1, 2, 0]  # another config


def test_transmission_record_rows_of_a_finished_seed():
    from cfka_jax.experiments.geometry_transmission_ood import record_rows
    from cfka_jax.geometry.ood import TASKS

    run = _fake_run(0.0, 1.0)
    run["R_norm"] = {c: {p: v / 2.0 for p, v in r.items()} for c, r in run["R"].items()}
    run["readout_size"] = dict.fromkeys(run["R"], 2.0)
    run["acc"] = {c: {p: 0.9 - 0.1 * c for p in r} for c, r in run["R"].items()}
    run["chance"] = dict.fromkeys((*TASKS, "bio"), 0.25)
    for cell in run["curves"].values():
        cell.update(L0=3.0, plast=3.0 - cell["L_final"])
    run["curves"].update({(0, "none", d): {"L0": 3.0, "L_final": 1.0, "L_min": 1.0, "plast": 2.0} for d in TASKS})
    rows = record_rows(7, run, (1, 2, 3), ("none", "readout"))
    assert len(rows) == len(TASKS) * (1 + 3 * 2) and {r["seed"] for r in rows} == {7}
    row = next(r for r in rows if r["task"] == "ident_b" and r["cpt_step"] == 2 and r["reset"] == "readout")
    assert (row["r"], row["r_norm"], row["readout_size"]) == (0.8, 0.4, 2.0)
    assert (row["acc"], row["base_acc"], row["chance"], row["r_bio"]) == (0.7, 0.9, 0.25, 0.98)
    assert row["l_final"] == pytest.approx(1.0 - 2 * 0.2) and row["l0"] == 3.0


def test_a_subcommand_reads_its_options_from_a_config_file(tmp_path):
    (tmp_path / "e.toml").write_text('scale = "small"\ntaus = "inf,1.5"\nlr = 0.5\n')
    name, cfg = geometry.configs(["energy", "--config", str(tmp_path / "e.toml"), "--lr", "0.01"])
    assert name == "energy" and (cfg.scale, cfg.taus, cfg.lr, cfg.out) == ("small", (math.inf, 1.5), 0.01,
                                                                            "runs/geometry/energy-small")
    (tmp_path / "bad.toml").write_text('taus = "inf,inf"\n')
    with pytest.raises(ValueError, match=r"bad\.toml: key 'taus': thresholds must be a non-empty list"):
        geometry.configs(["energy", "--config", str(tmp_path / "bad.toml")])
