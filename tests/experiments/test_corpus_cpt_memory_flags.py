"""``cfka corpus-cpt``'s memory options: the lean path by default (rematerialised, scanned blocks unless the method
reads per-block key Grams, the tiled head loss for the plain NLL, the in-place finite guard), each turned off by a
flag; the older spellings still parse; bad values refused naming the flag."""

import pytest

from cfka_jax.experiments import corpus_cpt as cc

BASE = ["--data", "corpus", "--model", "model", "--out", "run"]


pytestmark = pytest.mark.usefixtures("cli_inputs")  # tests/experiments/conftest.py


def test_memory_flags_parse_and_default_to_the_lean_path():
    cfg = cc.config_from_args(BASE)
    assert (cfg.remat, cfg.scan_layers, cfg.loss_chunk, cfg.guard, cfg.opt_state_dtype) == (
        True, None, None, "gradient", None)  # scan / loss chunk unset: resolved from the method
    assert cc.scanned(cfg)
    cfg = cc.config_from_args(BASE + ["--no-remat", "--no-scan-layers", "--loss-chunk", "0", "--opt-state-dtype",
                                      "bfloat16"])
    assert (cfg.remat, cfg.scan_layers, cfg.loss_chunk, cfg.opt_state_dtype) == (False, False, 0, "bfloat16")
    assert not cc.scanned(cfg)
    cfg = cc.config_from_args(BASE + ["--remat", "--scan-layers"])  # older command lines: the defaults, explicit
    assert (cfg.remat, cfg.scan_layers) == (True, True)
    with pytest.raises(ValueError, match="--remat and --no-remat"):
        cc.config_from_args(BASE + ["--remat", "--no-remat"])


def test_methods_that_read_per_block_key_grams_run_looped_unless_told():
    old = ["--mc-original", "test.json"]  # the old knowledge's questions, whose keys these methods protect
    assert not cc.scanned(cc.config_from_args(BASE + ["--method", "gpm", *old]))
    assert not cc.scanned(cc.config_from_args(BASE + ["--method", "stoc + nullspace", *old]))
    with pytest.raises(ValueError, match="drop --scan-layers"):
        cc.config_from_args(BASE + ["--method", "gpm", "--scan-layers", *old])
    assert cc.scanned(cc.config_from_args(BASE + ["--method", "stoc + ewc"]))


def test_the_loss_chunk_resolves_from_the_token_objective():
    from cfka_jax.runs.engine import AUTO_LOSS_CHUNK, resolve_loss_chunk
    from cfka_jax.train.step import token_nll_loss

    other = lambda logits, batch: (logits.sum(), 1)  # noqa: E731  (a token objective that reads the logits)
    assert resolve_loss_chunk(None, token_nll_loss) == AUTO_LOSS_CHUNK and resolve_loss_chunk(None, other) is None
    assert resolve_loss_chunk(0, token_nll_loss) is None and resolve_loss_chunk(64, token_nll_loss) == 64
    with pytest.raises(ValueError, match="--loss-chunk"):  # an explicit chunk with RHO-1: refused, unset is fine
        cc.config_from_args(BASE + ["--method", "rho1", "--loss-chunk", "64"])
    assert cc.config_from_args(BASE + ["--method", "rho1"]).loss_chunk is None


def test_unknown_state_dtype_refused():
    with pytest.raises(SystemExit):
        cc.config_from_args(BASE + ["--opt-state-dtype", "float16"])
    with pytest.raises(ValueError, match="--opt-state-dtype"):
        cc.CorpusCPTConfig(data=("corpus",), model="model", out="run", opt_state_dtype="float16")


def test_scan_layers_and_guard_flags():
    cfg = cc.config_from_args(BASE + ["--guard", "state"])
    assert cfg.guard == "state"
    with pytest.raises(SystemExit):
        cc.config_from_args(BASE + ["--guard", "none"])
    with pytest.raises(ValueError, match="--guard"):
        cc.CorpusCPTConfig(data=("corpus",), model="model", out="run", guard="none")


def test_blocks_that_cannot_be_stacked_run_looped_unless_told():
    """Qwen3.5's blocks are of two kinds, so its config refuses ``scan_layers``: unset, the run is looped."""
    from cfka_jax.models import family
    from cfka_jax.runs.presets import BIOGRAPHY

    size = BIOGRAPHY["smoke"].model
    cfg = cc.config_from_args(BASE)
    assert not cc.scanned(cfg, family.get("qwen3_5").from_size(size, vocab_size=64))
    assert cc.scanned(cfg, family.get("qwen").from_size(size, vocab_size=64))
