"""``cfka cpt --grid``: the grid's syntax is checked as it is parsed, the members before anything is written (exit
2, one line naming the key, the working folder untouched)."""

import os

import pytest

from cfka_jax.experiments import cpt


def test_grid_options_parse(tmp_path):
    cfg = cpt.parse(["--method", "replay-all + ewc", "--grid", "lr=1e-3,3e-4;alpha=0.5,0.8;seeds=0,1", "--out",
                     str(tmp_path / "g"), "--grid-mode", "vmap"])
    assert cfg.grid == "lr=1e-3,3e-4;alpha=0.5,0.8;seeds=0,1" and cfg.grid_mode == "vmap" and cfg.spec().lr is None
    assert cpt.parse(["--lr", "3e-4", "--warmup", "0"]).spec().scale.cpt.peak_lr == 3e-4


@pytest.mark.parametrize("argv, key", [
    (["--grid", "foo=1"], "unknown axis 'foo'"), (["--grid", "update=full,lora"], "axis 'update' cannot vary"),
    (["--grid", "lr="], "axis 'lr' has an empty value"), (["--grid", "seeds=0,0"], "axis 'seed' repeats a value"),
    (["--grid", "alpha=0.5,0.9"], "axis 'alpha': method 'naive' mixes no replay"),
    (["--method", "replay-all", "--grid", "alpha=0.5,1.0"], "member alpha1: replay needs 0 < alpha < 1"),
    (["--grid", "absent.toml"], "no such grid file"), (["--grid-mode", "vmap"], "--grid-mode vmap applies to --grid"),
    (["--method", "stoc", "--grid", "seeds=0,1"], "does not take --method 'stoc'")])
def test_bad_grids_exit_2_before_writing(argv, key, tmp_path, monkeypatch, capsys):
    from tests.reliability.inputs import refused

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    last = refused(["cpt", *argv, "--out", "g"], tmp_path, capsys)
    assert key in last and "--grid" in last, last
    assert os.listdir(tmp_path) == []
