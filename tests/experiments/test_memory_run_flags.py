"""The memory options of ``cfka corpus-cpt`` and ``cfka knowedit`` (#26): ``--loss-chunk``, ``--final-checkpoint``
and (knowedit) ``--remat`` / ``--opt-state-dtype`` parse into the config; bad values are refused naming the flag;
the defaults are the lean path (rematerialised blocks, the tiled head loss for the plain NLL); an old run folder's
config (without the new fields, or written under version 1's defaults) is refused in one line naming the flags that
resume it, and resumes with them."""

import dataclasses

import pytest

from cfka_jax.experiments import corpus_cpt as cc
from cfka_jax.experiments import knowedit as ke
from cfka_jax.runs.folder import RunFolder

CC = ["--data", "corpus", "--model", "model", "--out", "run"]
KE = ["--data", "test.json", "--model", "model", "--out", "run"]


pytestmark = pytest.mark.usefixtures("cli_inputs")  # tests/experiments/conftest.py


def test_corpus_cpt_flags_parse_and_default_to_auto():
    cfg = cc.config_from_args(CC)
    assert (cfg.loss_chunk, cfg.final_checkpoint) == (None, "full")
    cfg = cc.config_from_args(CC + ["--loss-chunk", "256", "--final-checkpoint", "params"])
    assert (cfg.loss_chunk, cfg.final_checkpoint) == (256, "params")


def test_knowedit_flags_parse_and_default_to_the_lean_path():
    cfg = ke.FLAGS.parse(KE)
    assert (cfg.remat, cfg.opt_state_dtype, cfg.loss_chunk, cfg.final_checkpoint) == (None, None, None, "full")
    cfg = ke.FLAGS.parse(KE + ["--remat", "True", "--opt-state-dtype", "bfloat16", "--loss-chunk", "128",
                               "--final-checkpoint", "none", "--dtype", "bfloat16"])
    assert (cfg.remat, cfg.opt_state_dtype, cfg.loss_chunk, cfg.final_checkpoint, cfg.dtype) == \
        (True, "bfloat16", 128, "none", "bfloat16")


@pytest.mark.parametrize("parse", [cc.config_from_args, ke.FLAGS.parse], ids=["corpus-cpt", "knowedit"])
def test_bad_values_exit_2(parse, capsys):
    base = CC if parse is cc.config_from_args else KE
    for bad in (["--final-checkpoint", "some"], ["--loss-chunk", "x"], ["--opt-state-dtype", "float16"]):
        with pytest.raises(SystemExit) as err:
            parse(base + bad)
        assert err.value.code == 2
        assert bad[0] in capsys.readouterr().err


@pytest.mark.parametrize("make", [lambda **kw: cc.CorpusCPTConfig(data=("c",), model="m", out="o", **kw),
                                  lambda **kw: ke.KnowEditRun(data="t.json", model="m", out="o", **kw)],
                         ids=["corpus-cpt", "knowedit"])
def test_out_of_range_values_are_refused_naming_the_flag(make):
    with pytest.raises(ValueError, match="--loss-chunk"):
        make(loss_chunk=-1)
    assert make(loss_chunk=0).loss_chunk == 0  # the full logits
    with pytest.raises(ValueError, match="--final-checkpoint"):
        make(final_checkpoint="some")


def test_an_old_knowedit_folder_resumes_with_its_old_defaults_and_ignores_final_checkpoint(tmp_path):
    cfg = ke.KnowEditRun(data="t.json", model="m", out=str(tmp_path))
    p = cfg.scale
    folder = RunFolder(tmp_path / "naive")
    folder.start(cfg, p)
    stored = folder.read_json("config.json")
    for name in ("remat", "opt_state_dtype", "loss_chunk", "final_checkpoint"):  # as written before the fields
        del stored["run"][name]
    del stored["config_version"]  # and written before config versions: version 1
    (folder.path / "config.json").write_text(__import__("json").dumps(stored))
    with pytest.raises(ValueError, match=r"config version 1") as err:
        folder.check(cfg, p)  # today's defaults (remat on, the tiled loss) are another run
    assert "--remat False" in str(err.value) and "--loss-chunk 0" in str(err.value) and "\n" not in str(err.value)
    old = dataclasses.replace(cfg, remat=False, loss_chunk=0)
    assert folder.check(old, p)
    assert folder.check(dataclasses.replace(old, final_checkpoint="params"), p)  # changes no result
    with pytest.raises(ValueError, match="--loss-chunk 0"):  # it ran on the full logits
        folder.check(dataclasses.replace(old, loss_chunk=64), p)


@pytest.mark.parametrize("parse", [cc.config_from_args, ke.FLAGS.parse], ids=["corpus-cpt", "knowedit"])
def test_accelerator_loop_options_reach_the_loop_and_bad_ones_are_refused(parse, capsys):
    """``--accumulate``, ``--profile`` and ``--keep-checkpoints`` (as on ``cfka pt`` / ``cfka cpt``) become the
    training loop's settings; unset, the loop keeps its defaults; an accumulation that does not divide the preset's
    batch is refused naming both."""
    base = CC if parse is cc.config_from_args else KE
    cfg = parse(base)
    schedule = cfg.scale.cpt
    assert cfg.loop(schedule) == schedule.loop(progress=cfg.progress)
    batch = schedule.batch
    cfg = parse(base + ["--accumulate", str(batch), "--profile", "2:4", "--keep-checkpoints", "3"])
    loop = cfg.loop(schedule)
    assert (loop.accumulate, loop.profile, loop.keep_checkpoints) == (batch, "2:4", 3)
    assert dataclasses.replace(loop, accumulate=1, profile=None, keep_checkpoints=2) == schedule.loop(
        progress=cfg.progress)
    for bad, words in ((["--accumulate", str(batch + 1)], f"must divide the preset's batch of {batch} rows"),
                       (["--keep-checkpoints", "0"], "--keep-checkpoints"), (["--profile", "4:2"], "--profile")):
        with pytest.raises((SystemExit, ValueError)) as err:  # corpus-cpt checks the run config after parsing
            parse(base + bad)
        said = capsys.readouterr().err if isinstance(err.value, SystemExit) else str(err.value)
        assert words in said and getattr(err.value, "code", 2) == 2
