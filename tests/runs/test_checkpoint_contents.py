"""What a run's checkpoints hold (#26): frozen parameters are held, not stored, and a resume stays exact; a finished
run keeps only its parameters (``--final-checkpoint params``) or nothing (``none``), and resuming it is refused with
one line naming the folder; ``loss_chunk`` trains like the full-logits loss."""

import dataclasses
import pathlib
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from cfka_jax.runs.engine import RunMemory, RunObjective, RunUpdate, finish_run, train_lm
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.methods import apply_update
from cfka_jax.train.checkpoint import CheckpointDir, CheckpointError, restore, save
from cfka_jax.train.loop import LoopConfig
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import init_state
from cfka_jax.trees import flatten_mapping
from tests.helpers import batch, tiny_model
from tests.tolerances import F32

OPT = OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=4)
LOOP = LoopConfig(steps=4, log_every=1, ckpt_every=2, progress=False)


def _model(update: str, seed: int = 0):
    return apply_update(tiny_model(seed), update, freeze_layers=1, lora_rank=2, seed=0)


def _train(path, batch_at=batch, seed=0, **kw):
    model, trainable = _model("lora", seed)
    return train_lm(model, batch_at, update=RunUpdate(opt=OPT, trainable=trainable), loop=LOOP, folder=RunFolder(path),
                    memory=RunMemory(**kw))


def _bytes(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _stored(ckpt: pathlib.Path) -> set[str]:
    import orbax.checkpoint as ocp

    from cfka_jax.train.checkpoint import item_path

    with ocp.StandardCheckpointer() as c:
        return {".".join(p) for p in flatten_mapping(c.metadata(item_path(ckpt)).item_metadata.tree["state"])}


def _dies_at_step_3(t):
    if t == 3:
        raise KeyboardInterrupt
    return batch(t)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(the uninterrupted LoRA run and its folder, a copy of the folder of the same run killed after step 2's
    checkpoint, and that run resumed), trained once for the module."""
    root = tmp_path_factory.mktemp("contents")
    full = _train(root / "full")
    with pytest.raises(KeyboardInterrupt):
        _train(root / "run", batch_at=_dies_at_step_3)
    shutil.copytree(root / "run", root / "killed")
    return full, root / "full", root / "killed", _train(root / "run")


def _abstract_state():
    """The run's initial state (concrete: restoring a checkpoint with held leaves needs their values)."""
    model, trainable = _model("lora")
    params = nnx.split(model, nnx.Param, ...)[1]
    return init_state(params, make_optimizer(OPT, trainable(params)))


def test_frozen_leaves_are_held_and_a_killed_run_resumes_exactly(runs):
    full, _, killed, resumed = runs
    assert full.held  # LoRA froze the base weights
    ckpt = killed / "checkpoints" / "2"
    stored = _stored(ckpt)
    assert not {".".join(("params", *p)) for p in full.held} & stored
    assert {k for k in stored if k.startswith("params.")}  # the adapters are there
    state = restore(ckpt, _abstract_state())[0]
    whole = save(killed.parent / "whole", state, step=2)  # what the checkpoint held before: the whole state
    assert _bytes(ckpt) < _bytes(whole)
    for a, b in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(full.state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert [(r["step"], r["loss"]) for r in resumed.history] == [(r["step"], r["loss"]) for r in full.history]


def test_resuming_with_other_frozen_weights_is_refused(runs, tmp_path):
    shutil.copytree(runs[2], tmp_path / "run")
    with pytest.raises(CheckpointError, match="source model changed"):
        _train(tmp_path / "run", seed=1)  # another base model under adapters of the same structure


def test_an_abstract_target_cannot_restore_held_leaves(runs):
    full, folder = runs[0], RunFolder(runs[1])
    abstract = nnx.split(nnx.eval_shape(lambda: _model("lora")[0]), nnx.Param, ...)[1]
    with pytest.raises(CheckpointError, match="does not store .* frozen leaves"):
        folder.checkpoint_params(abstract)
    params, step = folder.checkpoint_params(_abstract_state().params)  # concrete: the source's values
    assert step == 4
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(full.params), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("keep", ["params", "none"])
def test_a_finished_run_keeps_params_or_nothing_and_refuses_to_resume(keep, runs, tmp_path):
    full, path = runs[0], tmp_path / "run"
    shutil.copytree(runs[1], path)
    assert CheckpointDir(path / "checkpoints").steps() == [2, 4]  # the intermediate checkpoints are resumable
    finish_run(RunFolder(path), lambda p, s: {}, dataclasses.replace(full, final_checkpoint=keep), extra={})
    folder = RunFolder(path)
    assert CheckpointDir(folder.checkpoints).steps() == []
    assert folder.params_dir.is_dir() == (keep == "params")
    if keep == "params":
        initial = _abstract_state().params
        for reader in (folder.load_params, folder.checkpoint_params):
            params, step = reader(initial)  # held (frozen) leaves come from the source model's values
            assert step == 4
            for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(full.params), strict=True):
                np.testing.assert_array_equal(a, b)
        all_params = save(tmp_path / "all-params", full.params, step=4)
        assert _bytes(folder.params_dir) < _bytes(all_params)  # the export without the held leaves
    with pytest.raises(CheckpointError) as err:
        _train(path)
    message = str(err.value)
    assert "\n" not in message and str(folder.checkpoints) in message and f"--final-checkpoint {keep}" in message


def test_unknown_options_are_refused(tmp_path):
    with pytest.raises(ValueError, match="--final-checkpoint"):
        _train(tmp_path / "a", final_checkpoint="some")
    with pytest.raises(ValueError, match="--loss-chunk"):
        _train(tmp_path / "b", loss_chunk=-1)  # 0 is the full logits
    with pytest.raises(ValueError, match="--loss-chunk"):
        train_lm(tiny_model(), batch, update=RunUpdate(opt=OPT), loop=LOOP, folder=RunFolder(tmp_path / "c"),
                 objective=RunObjective(loss_fn=lambda logits, b: 0.0), memory=RunMemory(loss_chunk=4))


def test_loss_chunk_trains_like_the_full_logits_loss(runs, tmp_path):
    full = runs[0]
    chunked = _train(tmp_path / "run", loss_chunk=4)  # 3 rows x 11 positions: chunks of 4 rows, one partial
    losses = [[r["loss"] for r in run.history if r["kind"] == "train"] for run in (chunked, full)]
    np.testing.assert_allclose(losses[0], losses[1], rtol=F32.few_ulps)
    for a, b in zip(jax.tree.leaves(chunked.params), jax.tree.leaves(full.params), strict=True):
        # AdamW divides each gradient entry by its running RMS: ulp-level differences of the two loss routes
        # become ~1e-5 relative changes of a few coordinates (measured: 1 of 48 entries of one leaf at 1.1e-5)
        np.testing.assert_allclose(a, b, rtol=F32.adam_batched_rtol, atol=F32.one_ulp)
