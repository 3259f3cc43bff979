"""``cfka geometry loop`` (experiments/geometry_loop.py): options parse and bad values exit 2 naming the option; the
rounds chain (round k + 1's CPT starts from round k's SFT'd parameters, the control's from round k's CPT model),
checked by parameter fingerprints with the training replaced by known shifts and in a real smoke run; the record has
one row per (seed, round, line); a finished seed is read back, not rerun."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from cfka_jax.claims.results import load_records
from cfka_jax.experiments import geometry
from cfka_jax.experiments import geometry_loop as gl
from tests.helpers import refused_line


def test_options_parse_into_the_frozen_config():
    name, cfg = geometry.configs(["loop", "--world", "ood", "--scale", "small", "--rounds", "4", "--seeds", "0,1,2",
                                  "--record", "loop_ood"])
    assert name == "loop" and isinstance(cfg, gl.LoopStudyConfig)
    assert (cfg.world, cfg.rounds, cfg.seeds, cfg.record, cfg.task) == ("ood", 4, (0, 1, 2), "loop_ood", "longform")
    assert cfg.block == gl.BLOCK_STEPS["small"] and cfg.out == "runs/geometry/loop-small"
    assert geometry.configs(["loop", "--block-steps", "50"])[1].block == 50
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rounds = 5


@pytest.mark.parametrize("argv, words", [
    (["--rounds", "1"], ["--rounds", "1"]), (["--rounds", "0"], ["--rounds"]), (["--rounds", "four"], ["--rounds"]),
    (["--rounds", "-3"], ["--rounds"]), (["--block-steps", "-1"], ["--block-steps"]),
    (["--world", "biography"], ["--world", "biography"]), (["--task", "gsm8k"], ["--task", "gsm8k"]),
    (["--sft-lr", "0"], ["--sft-lr"]), (["--record", "../x"], ["--record"]),
])
def test_bad_values_exit_2_naming_the_option(argv, words, capsys, monkeypatch, tmp_path):
    code, last = refused_line(["geometry", "loop", "--out", "unused", *argv], capsys, monkeypatch, tmp_path)
    assert code == 2 and "error" in last and "Traceback" not in last
    for word in words:
        assert word in last, (word, last)
    assert not list(tmp_path.iterdir())


def test_the_config_refuses_bad_values_built_directly():
    for kwargs, word in (({"rounds": 1}, "--rounds"), ({"rounds": True}, "--rounds"), ({"rounds": 2.0}, "--rounds"),
                         ({"block_steps": -1}, "--block-steps"), ({"world": "biography"}, "--world"),
                         ({"task": "bio"}, "--task"), ({"scale": "paper"}, "--scale"), ({"seeds": (1, 1)}, "seeds")):
        with pytest.raises(ValueError, match=word):
            gl.LoopStudyConfig(**kwargs)


def test_fingerprint_sees_every_leaf():
    a = {"x": np.zeros((2, 3), np.float32), "y": {"0": np.ones(4, np.float32)}}
    b = jax.tree.map(np.copy, a)
    assert gl.params_fingerprint(a) == gl.params_fingerprint(b)
    b["y"]["0"][2] = np.nextafter(np.float32(1), np.float32(2))
    assert gl.params_fingerprint(a) != gl.params_fingerprint(b)
    assert gl.params_fingerprint(a) != gl.params_fingerprint({"x": a["x"].reshape(3, 2), "y": a["y"]})


CPT, SFT = 2, 4
"""The fake training: a CPT block multiplies every parameter by 2, an SFT by 4 (powers of two: exact in float32, so
the expected parameters of every round are known bit for bit)."""


def _fake_training(monkeypatch, calls: list):
    """PT returns its input; a CPT block and an SFT scale every leaf by a known power of two; the measurements are
    constants, so only the chain is real."""
    shift = lambda p, d: jax.tree.map(lambda x: np.asarray(x) * np.asarray(d, np.asarray(x).dtype), p)  # noqa: E731

    def block(self, params, seed):
        calls.append(("cpt", seed))
        return shift(gl._pure(params), CPT), gl.params_fingerprint(params)

    def sft(self, params):
        calls.append(("sft", None))
        return {"L0": 2.0, "L_final": 1.0, "L_min": 0.9, "plast": 1.0, "plast_min": 1.1, "curve": [2.0, 1.0]}, \
            shift(params, SFT)

    state = {"r": 0.5, "r_norm": 0.6, "readout_size": 0.8, "r_bio": 0.3, "r_bio_norm": 0.4, "acc": 0.9}
    monkeypatch.setattr(gl, "_train", lambda graphdef, rest, params, *a, **k: gl._pure(params))
    monkeypatch.setattr(gl.BlockTrainer, "run", block)
    monkeypatch.setattr(gl.Measure, "sft", sft)
    monkeypatch.setattr(gl.Measure, "state", lambda self, params: dict(state))


def _base_params(seed: int):
    """The smoke scale's freshly built model (the fake PT returns it unchanged)."""
    from flax import nnx

    from cfka_jax.experiments.geometry_transmission_ood import OOD_SCALES
    from cfka_jax.geometry.ood import make_world

    s = OOD_SCALES["smoke"]
    world = make_world(dataclasses.replace(s.world, seed=seed))
    model = dataclasses.replace(s.model, seed=seed).build(world.vocab_size)
    return gl._pure(nnx.split(model, nnx.Param, ...)[1])


def test_rounds_chain_record_rows_and_resume(monkeypatch, tmp_path):
    calls = []
    _fake_training(monkeypatch, calls)
    out, results = tmp_path / "loop", tmp_path / "results"
    argv = ["loop", "--scale", "smoke", "--rounds", "3", "--seeds", "0,1", "--out", str(out), "--record", "t_loop",
            "--results", str(results)]
    assert geometry.main(argv) == 0
    # per seed: 1 shared block + 2 × 2 blocks; SFT at the base, at round 1 and per line at rounds 2, 3
    assert [c for c in calls if c[0] == "cpt"] == [("cpt", 1000 * s + k) for s in (0, 1) for k in (1, 2, 2, 3, 3)]
    assert len([c for c in calls if c[0] == "sft"]) == 2 * (1 + 1 + 2 * 2)
    rec = load_records(results)["token-force/t_loop"]
    assert rec.origin == "produced" and rec.unit == "run" and rec.provenance["seeds"] == [0, 1]
    assert rec.provenance["command"].startswith("cfka geometry loop --scale smoke --rounds 3 --seeds 0,1")
    assert len(rec.rows) == 2 * 2 * 4  # seeds × lines × rounds 0..3
    fp = lambda p, d: gl.params_fingerprint(jax.tree.map(lambda x: x * np.asarray(d, x.dtype), p))  # noqa: E731
    for seed in (0, 1):
        base = _base_params(seed)
        rows = {(r["line"], r["round"]): r for r in rec.select(seed=seed)}
        assert set(rows) == {(line, k) for line in gl.LINES for k in range(4)}
        assert rows[("loop", 0)] == {**rows[("cpt_only", 0)], "line": "loop"}
        assert rows[("loop", 0)]["fp_start"] is None and rows[("loop", 0)]["fp_cpt"] == fp(base, 1)
        for k in (1, 2, 3):
            loop, ctl = rows[("loop", k)], rows[("cpt_only", k)]
            assert loop["cpt_steps"] == ctl["cpt_steps"] == k * gl.BLOCK_STEPS["smoke"]
            # the loop: block k starts from round k − 1's SFT'd model (round 1 from the base model)
            assert loop["fp_start"] == (rows[("loop", k - 1)]["fp_sft"] if k > 1 else fp(base, 1))
            assert loop["fp_start"] == fp(base, (CPT * SFT) ** (k - 1))
            assert loop["fp_cpt"] == fp(base, (CPT * SFT) ** (k - 1) * CPT)
            assert loop["fp_sft"] == fp(base, (CPT * SFT) ** k)
            # the control: block k starts from block k − 1's CPT model, never from an SFT'd one
            assert ctl["fp_start"] == rows[("cpt_only", k - 1)]["fp_cpt"] == fp(base, CPT ** (k - 1))
            assert (loop["fp_cpt"] == ctl["fp_cpt"]) == (k == 1)
            assert (loop["r_norm"], loop["plast"], loop["base_acc"]) == (0.6, 1.0, 0.9)
    assert (out / "loop.md").stat().st_size > 200 and (out / "loop.png").stat().st_size > 10_000
    assert len(json.loads((out / "loop.json").read_text())["rows"]) == 16
    assert (out / "seed0" / "loop_rows.json").exists() and (out / "seed1" / "loop_curves.json").exists()

    # the same command again: both seeds are read back, none is rerun, and the record is rewritten from them
    monkeypatch.setattr(gl, "run_seed", lambda *a, **k: pytest.fail("a finished seed ran again"))
    mtime = (out / "seed0" / "loop_rows.json").stat().st_mtime_ns
    assert geometry.main(argv) == 0
    assert (out / "seed0" / "loop_rows.json").stat().st_mtime_ns == mtime
    assert load_records(results)["token-force/t_loop"].rows == rec.rows
    # another number of rounds is another study: the seeds run again
    with pytest.raises(pytest.fail.Exception, match="ran again"):
        geometry.main([*argv[:4], "4", *argv[5:]])


@pytest.mark.slow
def test_smoke_run_chains_the_real_rounds(tmp_path):
    out, results = tmp_path / "loop", tmp_path / "results"
    assert geometry.main(["loop", "--scale", "smoke", "--rounds", "3", "--out", str(out), "--record", "t_loop",
                          "--results", str(results)]) == 0
    rec = load_records(results)["token-force/t_loop"]
    rows = {(r["line"], r["round"]): r for r in rec.rows}
    assert set(rows) == {(line, k) for line in gl.LINES for k in range(4)} and rec.provenance["seeds"] == [0]
    for k in (1, 2, 3):
        loop, ctl = rows[("loop", k)], rows[("cpt_only", k)]
        assert loop["fp_start"] == (rows[("loop", k - 1)]["fp_sft"] if k > 1 else rows[("loop", 0)]["fp_cpt"])
        assert ctl["fp_start"] == rows[("cpt_only", k - 1)]["fp_cpt"]
        assert loop["fp_sft"] != loop["fp_cpt"] and (loop["fp_cpt"] == ctl["fp_cpt"]) == (k == 1)
        for row in (loop, ctl):
            assert all(row[c] is not None and np.isfinite(row[c]) for c in gl.COLUMNS)
            assert row["plast"] == pytest.approx(row["l0"] - row["l_final"], abs=1e-5)
            assert row["r_norm"] == pytest.approx(row["r"] / row["readout_size"], rel=1e-5)
    assert rows[("loop", 1)] == {**rows[("cpt_only", 1)], "line": "loop"}
