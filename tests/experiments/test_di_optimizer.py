"""The DI-law study on the theory model: cells validated, one short cell trained end to end (float64 inside)."""

import json

import jax
import pytest

from cfka_jax.experiments import di_optimizer as dio


def test_cells_refuse_bad_settings():
    with pytest.raises(ValueError, match="optimiser"):
        dio.Cell("x", "sgdm", 1e-3)
    with pytest.raises(ValueError, match="lr"):
        dio.Cell("x", "adam", 1e-3)  # Adam needs a learning rate
    with pytest.raises(ValueError, match="lr"):
        dio.Cell("x", "gd", 0.3, raw=True)  # the factorised model's GD rate is the cell's lr


def test_short_adam_cell_learns_and_orders_attention_by_di(tmp_path):
    # Adam from the small init converges fast on the multi-relation world (final KL ~1e-11 after 2000 steps,
    # Pearson(DI, |z|) -0.98); 600 steps already give a strongly DI-ordered attention.
    try:
        assert dio.main(["--out", str(tmp_path), "--steps", "600", "--only", "3"]) == 0
    finally:
        jax.config.update("jax_enable_x64", False)
    row = json.loads((tmp_path / "di_optimizer.json").read_text())["rows"][0]
    assert row["optimiser"] == "adam" and row["steps"] == 600
    assert row["final_kl"] < 1e-3
    assert row["pearson"] < -0.8


@pytest.mark.parametrize("argv, flag", [(["--steps", "0"], "--steps"), (["--only", "9"], "--only"),
                                        (["--only", "x"], "--only"), (["--steps", "-1"], "--steps")])
def test_bad_flags_are_refused_naming_them_before_anything_runs(tmp_path, capsys, argv, flag):
    with pytest.raises(SystemExit) as err:
        dio.main(["--out", str(tmp_path / "out"), *argv])
    assert err.value.code == 2
    message = capsys.readouterr().err
    assert flag in message and message.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_config_file_gives_the_options(tmp_path):
    (tmp_path / "c.toml").write_text('steps = 5\nonly = [0, 3]\nout = "o"\n')
    cfg = dio.FLAGS.parse(["--config", str(tmp_path / "c.toml"), "--steps", "7"])
    assert (cfg.steps, cfg.only, cfg.out) == (7, (0, 3), "o") and [c.name for c in cfg.cells()] == [
        dio.CELLS[0].name, dio.CELLS[3].name]
