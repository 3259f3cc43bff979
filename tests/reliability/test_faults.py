"""Faults of the training engine: non-finite updates, kills, damaged checkpoints, re-used run folders, empty
evaluation sets. Each either recovers exactly or is rejected with one message naming the file or field, and
writes nothing on rejection."""

import gc
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfka_jax.data.packing import pack
from cfka_jax.eval.perplexity import perplexity_metric
from cfka_jax.eval.sets import named_sets
from cfka_jax.runs.folder import RunFolder, RunFolderError
from cfka_jax.train.checkpoint import CheckpointDir, CheckpointError
from cfka_jax.train.loop import LoopConfig, MetricsLog, NonFiniteError, run_loop
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import init_state, make_train_step
from tests.helpers import batch, split, tiny_model

OPT = OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=8)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _setup(tx=None):
    graphdef, params, rest = split(tiny_model())
    tx = tx or make_optimizer(OPT)
    return init_state(params, tx), make_train_step(graphdef, rest, tx)


def _leaves_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_guard_catches_non_finite_parameters_from_a_finite_loss_and_gradient():
    """An optimiser whose update is NaN (e.g. an infinite learning rate) with a finite loss and gradient."""
    nan_update = optax.GradientTransformation(lambda p: optax.EmptyState(),
                                              lambda g, s, p=None: (jax.tree.map(lambda x: x * jnp.nan, g), s))
    state, step = _setup(nan_update)
    before = jax.tree.map(np.asarray, state.params)
    state, metrics = step(state, batch(0))
    assert np.isfinite(float(metrics["loss"])) and np.isfinite(float(metrics["grad_norm"]))
    assert not bool(metrics["finite"]) and int(state.step) == 0
    _leaves_equal(state.params, before)


def test_infinite_learning_rate_is_rejected():
    for bad in (dict(peak_lr=float("inf")), dict(peak_lr=float("nan")), dict(min_lr=-1.0), dict(peak_lr=True)):
        with pytest.raises(ValueError, match="lr|finite"):
            OptimConfig(**{**dict(peak_lr=1e-3, min_lr=1e-4, warmup_steps=1, total_steps=4), **bad})


def test_a_nan_run_keeps_only_finite_checkpoints(tmp_path):
    state, step = _setup()
    run_loop(state, step, batch, cfg=LoopConfig(steps=2, ckpt_every=1, progress=False), out_dir=tmp_path)

    def poisoned(t):
        b = batch(t)
        return {**b, "target_mask": b["target_mask"] * (jnp.nan if t >= 3 else 1.0)}

    state, step = _setup()
    with pytest.raises(NonFiniteError, match="last good checkpoint: step 3"):
        run_loop(state, step, poisoned, cfg=LoopConfig(steps=6, ckpt_every=1, progress=False), out_dir=tmp_path)
    restored, at = CheckpointDir(tmp_path / "checkpoints").restore_latest(state)
    assert at == 3 and all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(restored))


def test_resumed_log_holds_every_step_once(tmp_path):
    """A kill after metrics records and before the next checkpoint: the resumed log has each step once."""
    state, step = _setup()
    run_loop(state, step, batch, cfg=LoopConfig(steps=5, log_every=1, ckpt_every=2, progress=False),
             out_dir=tmp_path)
    shutil.rmtree(tmp_path / "checkpoints" / "5")  # as if killed after logging step 5, before its checkpoint
    state, step = _setup()
    done = run_loop(state, step, batch, cfg=LoopConfig(steps=5, log_every=1, ckpt_every=2, progress=False),
                    out_dir=tmp_path)
    steps = [r["step"] for r in MetricsLog(tmp_path / "metrics.jsonl").records() if r["kind"] == "train"]
    assert steps == [1, 2, 3, 4, 5] and [r["step"] for r in done.history if r["kind"] == "train"] == steps


def _damage(ckpt: pathlib.Path) -> None:
    """Truncate every array file of a checkpoint (a disk fault after the write)."""
    files = [p for p in ckpt.rglob("*") if p.is_file() and p.stat().st_size > 0 and "d" in p.parent.name]
    assert files, f"no array files under {ckpt}"
    for p in files:
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 3])


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # "Event loop is closed" (below)
def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    state, step = _setup()
    run_loop(state, step, batch, cfg=LoopConfig(steps=4, ckpt_every=2, progress=False), out_dir=tmp_path)
    ckpts = CheckpointDir(tmp_path / "checkpoints")
    _damage(tmp_path / "checkpoints" / "4")
    fresh, _ = _setup()
    with pytest.warns(UserWarning, match=r"skipped unreadable checkpoint\(s\) \[4\].*resuming from step 2"):
        restored, at = ckpts.restore_latest(fresh)
    assert at == 2
    _damage(tmp_path / "checkpoints" / "2")
    with pytest.raises(CheckpointError, match="no intact checkpoint") as err:
        ckpts.restore_latest(fresh)
    assert str(tmp_path / "checkpoints") in str(err.value) and "Traceback" not in str(err.value)
    gc.collect()  # what orbax left behind is finalised here, inside the test, not in a later one


def test_checkpoint_of_another_structure_is_an_error_not_skipped(tmp_path):
    state, step = _setup()
    run_loop(state, step, batch, cfg=LoopConfig(steps=1, progress=False), out_dir=tmp_path)
    other = init_state({"w": jnp.zeros((3,))}, make_optimizer(OPT))
    with pytest.raises(CheckpointError, match="does not match") as err:
        CheckpointDir(tmp_path / "checkpoints").restore_latest(other)
    assert "missing" in str(err.value) and "unexpected" in str(err.value)


KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from tests.helpers import batch, split, tiny_model
    from cfka_jax.train.loop import LoopConfig, run_loop
    from cfka_jax.train.optim import OptimConfig, make_optimizer
    from cfka_jax.train.step import init_state, make_train_step

    def killing_batch(t):
        if t == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        return batch(t)

    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=8))
    run_loop(init_state(params, tx), make_train_step(graphdef, rest, tx), killing_batch,
             cfg=LoopConfig(steps=8, log_every=1, ckpt_every=2, progress=False), out_dir={out!r})
""")


def test_sigkill_mid_run_resumes_to_the_uninterrupted_state(tmp_path):
    code = KILLED_RUN.format(root=str(ROOT), out=str(tmp_path / "killed"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    # step 4's checkpoint is written in the background (LoopConfig.async_checkpoints); SIGKILL one step later may
    # come before its rename, and then step 2 is the newest complete one: a kill loses at most the write in flight
    assert CheckpointDir(tmp_path / "killed" / "checkpoints").latest_step() in (2, 4)
    cfg = LoopConfig(steps=8, log_every=1, ckpt_every=2, progress=False)
    state, step = _setup()
    resumed = run_loop(state, step, batch, cfg=cfg, out_dir=tmp_path / "killed")
    state, step = _setup()
    full = run_loop(state, step, batch, cfg=cfg, out_dir=tmp_path / "full")
    _leaves_equal(resumed.state, full.state)
    steps = [r["step"] for r in resumed.history if r["kind"] == "train"]
    assert steps == list(range(1, 9))


class _Spec:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_run_folder_refuses_another_run_naming_the_fields(tmp_path):
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Spec:
        seed: int = 0
        method: str = "naive"
        progress: bool = True
        out: str = "a"

    folder = RunFolder(tmp_path / "run")
    folder.start(Spec(), {"steps": 3})
    before = (tmp_path / "run" / "config.json").read_text()
    folder.start(Spec(progress=False, out="b"), {"steps": 3})  # fields that change no result may differ
    with pytest.raises(RunFolderError) as err:
        folder.start(Spec(seed=1, method="replay-all"), {"steps": 3})
    assert "run.seed: folder has 0, this run has 1" in str(err.value)
    assert "run.method: folder has 'naive', this run has 'replay-all'" in str(err.value)
    with pytest.raises(RunFolderError, match="preset.steps"):
        folder.start(Spec(), {"steps": 4})
    assert (tmp_path / "run" / "config.json").read_text() == before
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="not an empty folder"):
        RunFolder(tmp_path / "stray").start(Spec(), {})
    assert os.listdir(tmp_path / "stray") == ["notes.txt"]


def test_damaged_run_files_are_named(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RunFolderError, match=r"config.json, line 1: invalid JSON"):
        RunFolder(tmp_path).start(_Spec(), {})
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(RunFolderError, match="expected a JSON object"):
        RunFolder(tmp_path).final() or RunFolder(tmp_path).read_json("config.json")
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n{broken\n{"kind": "train", "step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 2"):
        MetricsLog(tmp_path / "metrics.jsonl").records()
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n{"kind": "tr')  # torn last line
    assert MetricsLog(tmp_path / "metrics.jsonl").records() == [{"kind": "train", "step": 1}]


def test_empty_evaluation_sets_are_errors_not_perfect_scores():
    empty = pack([np.array([5], np.int32)], 4, 0)  # one token: nothing is a target
    with pytest.raises(ValueError, match="no target token"):
        perplexity_metric(lambda p, b: None, empty, batch_size=2)
    with pytest.raises(ValueError, match="no evaluation sets"):
        named_sets({})
    record = named_sets({"A": lambda p: {"acc": 0.5}, "B": lambda p: {"acc": 1.0}})(None, 0)
    assert json.dumps(record) == '{"A/acc": 0.5, "B/acc": 1.0}'
