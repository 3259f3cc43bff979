"""``cfka corpus-cpt --remat --opt-state-dtype``: parsed into the config, bad values refused naming the flag."""

import pytest

from cfka_jax.experiments import corpus_cpt as cc

BASE = ["--data", "corpus", "--model", "model", "--out", "run"]


@pytest.fixture(autouse=True)
def _inputs(tmp_path, monkeypatch):
    """The input options name files and folders that exist (``cli_gen.Flags.inputs`` checks them as it parses)."""
    monkeypatch.chdir(tmp_path)
    for name in ("corpus", "model"):
        (tmp_path / name).mkdir()
    (tmp_path / "test.json").write_text("[]")


def test_memory_flags_parse_and_default_off():
    cfg = cc.config_from_args(BASE)
    assert (cfg.remat, cfg.opt_state_dtype) == (None, None)  # None: absent from old run folders' configs
    cfg = cc.config_from_args(BASE + ["--remat", "--opt-state-dtype", "bfloat16"])
    assert (cfg.remat, cfg.opt_state_dtype) == (True, "bfloat16")


def test_unknown_state_dtype_refused():
    with pytest.raises(SystemExit):
        cc.config_from_args(BASE + ["--opt-state-dtype", "float16"])
    with pytest.raises(ValueError, match="--opt-state-dtype"):
        cc.CorpusCPTConfig(data=("corpus",), model="model", out="run", opt_state_dtype="float16")


def test_scan_layers_and_guard_flags():
    cfg = cc.config_from_args(BASE)
    assert (cfg.scan_layers, cfg.guard) == (False, "state")
    cfg = cc.config_from_args(BASE + ["--scan-layers", "--guard", "gradient"])
    assert (cfg.scan_layers, cfg.guard) == (True, "gradient")
    with pytest.raises(SystemExit):
        cc.config_from_args(BASE + ["--guard", "none"])
    with pytest.raises(ValueError, match="--guard"):
        cc.CorpusCPTConfig(data=("corpus",), model="model", out="run", guard="none")
