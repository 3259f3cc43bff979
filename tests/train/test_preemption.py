"""Asynchronous checkpoints, SIGTERM and the synchronous layout of earlier versions: each resumes bit for bit."""

import functools
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.train import checkpoint
from cfka_jax.train.checkpoint import CheckpointDir
from cfka_jax.train.loop import LoopConfig, MetricsLog, Preempted, run_loop
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import init_state, make_train_step
from cfka_jax.train.throughput import WALL_CLOCK
from tests.helpers import batch, split, tiny_model

OPT = OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=30)
ROOT = pathlib.Path(__file__).resolve().parents[2]


@functools.cache
def _built():
    """One model, optimiser and jitted step for every run of this file (compiled once)."""
    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(OPT)
    return params, tx, make_train_step(graphdef, rest, tx)


def _setup():
    params, tx, step = _built()
    return init_state(jax.tree.map(jnp.copy, params), tx), step  # fresh buffers: the step donates its state


def _leaves_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _untimed(history):
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in history]


TERMINATED_RUN = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from tests.helpers import batch, split, tiny_model
    from cfka_jax.train.loop import LoopConfig, run_loop
    from cfka_jax.train.optim import OptimConfig, make_optimizer
    from cfka_jax.train.step import init_state, make_train_step

    def slow_batch(t):
        time.sleep(0.1)  # time for the test to send SIGTERM mid-run
        return batch(t)

    def report(done, metrics):
        print("done", done, flush=True)

    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=30))
    run_loop(init_state(params, tx), make_train_step(graphdef, rest, tx), slow_batch, on_metrics=report,
             cfg=LoopConfig(steps=30, log_every=1, ckpt_every=7, progress=False), out_dir={out!r})
    print("finished", flush=True)
""")


@pytest.mark.slow  # ~25 s: a subprocess run (JAX import + compile) and two in-process runs of 30 steps
def test_sigterm_mid_run_checkpoints_and_resumes_bit_exactly(tmp_path):
    out = tmp_path / "terminated"
    code = TERMINATED_RUN.format(root=str(ROOT), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line.strip())
        if line.startswith("done 3"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, err = proc.communicate(timeout=300)
    seen += rest.split("\n")
    assert proc.returncode == 143, err[-2000:]
    assert "finished" not in seen
    stopped = CheckpointDir(out / "checkpoints").latest_step()
    assert stopped is not None and 3 < stopped < 30, (stopped, seen)
    assert f"SIGTERM: stopped after step {stopped} of 30" in err and "Resume by running the same command" in err
    assert (out / "checkpoints" / str(stopped) / checkpoint.ITEM).is_dir()  # written by the CheckpointManager
    assert [r["step"] for r in MetricsLog(out / "metrics.jsonl").records()][-1] == stopped

    cfg = LoopConfig(steps=30, log_every=1, ckpt_every=7, progress=False)
    state, step = _setup()
    resumed = run_loop(state, step, batch, cfg=cfg, out_dir=out)
    state, step = _setup()
    full = run_loop(state, step, batch, cfg=cfg, out_dir=tmp_path / "full")
    _leaves_equal(resumed.state, full.state)
    assert _untimed(resumed.history) == _untimed(full.history)
    assert [r["step"] for r in resumed.history if r["kind"] == "train"] == list(range(1, 31))
    assert CheckpointDir(out / "checkpoints").steps() == [28, 30]  # retention: the newest two


def test_sigterm_in_process_raises_preempted_after_the_checkpoint(tmp_path, capsys):
    """The handler only asks: the step in flight finishes, is checkpointed, and the loop raises Preempted (exit
    status 143) naming the step and how to resume; the previous SIGTERM handler is back afterwards."""
    state, step = _setup()

    def terminating(t):
        if t == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return batch(t)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Preempted) as stop:
        run_loop(state, step, terminating, cfg=LoopConfig(steps=6, log_every=1, progress=False), out_dir=tmp_path)
    assert stop.value.code == 143 and stop.value.step == 3
    assert "stopped after step 3 of 6" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before
    assert CheckpointDir(tmp_path / "checkpoints").steps() == [3]
    state, step = _setup()
    resumed = run_loop(state, step, batch, cfg=LoopConfig(steps=6, log_every=1, progress=False), out_dir=tmp_path)
    state, step = _setup()
    full = run_loop(state, step, batch, cfg=LoopConfig(steps=6, log_every=1, progress=False),
                    out_dir=tmp_path / "full")
    _leaves_equal(resumed.state, full.state)
    assert _untimed(resumed.history) == _untimed(full.history)


def test_synchronous_layout_of_earlier_versions_resumes(tmp_path):
    """A run folder whose checkpoint was written by the synchronous CheckpointDir (the item directly in
    ``<step>/``, :func:`checkpoint.save`) resumes exactly, and retention later prunes it like any other."""
    cfg = LoopConfig(steps=8, log_every=1, ckpt_every=2, progress=False)
    state, step = _setup()
    at4 = run_loop(state, step, batch, cfg=LoopConfig(steps=4, log_every=1, progress=False)).state
    old = tmp_path / "old" / "checkpoints" / "4"
    checkpoint.save(old, at4, step=4, force=True)  # what CheckpointDir.save wrote before the manager
    assert (old / "_METADATA").exists() and not (old / checkpoint.ITEM).exists()
    state, step = _setup()
    resumed = run_loop(state, step, batch, cfg=cfg, out_dir=tmp_path / "old")
    state, step = _setup()
    full = run_loop(state, step, batch, cfg=cfg, out_dir=tmp_path / "full")
    _leaves_equal(resumed.state, full.state)
    assert [r["step"] for r in resumed.history if r["kind"] == "train"] == [5, 6, 7, 8]
    assert CheckpointDir(tmp_path / "old" / "checkpoints").steps() == [6, 8]


def test_retention_keeps_the_newest_n(tmp_path):
    state, step = _setup()
    run_loop(state, step, batch, cfg=LoopConfig(steps=5, ckpt_every=1, keep_checkpoints=3, progress=False),
             out_dir=tmp_path)
    assert CheckpointDir(tmp_path / "checkpoints").steps() == [3, 4, 5]
    with pytest.raises(ValueError, match="keep_checkpoints >= 1"):
        LoopConfig(steps=5, keep_checkpoints=0)


def test_asynchronous_save_is_complete_after_wait(tmp_path):
    state, _ = _setup()
    ckpts = CheckpointDir(tmp_path, keep=2, asynchronous=True)
    ckpts.save(1, state)
    ckpts.wait()
    restored, at = ckpts.restore_latest(state)
    ckpts.close()
    assert at == 1
    _leaves_equal(restored, state)
    assert json.loads((tmp_path / "1" / "_CHECKPOINT_METADATA").read_text())  # orbax finalised the step


def test_a_step_is_replaced_when_written_again(tmp_path):
    """A run that fell back past a damaged checkpoint writes that step again: the damaged folder is replaced."""
    state, _ = _setup()
    ckpts = CheckpointDir(tmp_path, keep=2, asynchronous=True)
    ckpts.save(2, state)
    ckpts.close()
    for p in (tmp_path / "2").rglob("*"):
        if p.is_file():
            p.write_bytes(b"x")
    ckpts = CheckpointDir(tmp_path, keep=2, asynchronous=True)
    ckpts.save(2, state)
    ckpts.close()
    restored, at = ckpts.restore_latest(state)
    assert at == 2
    _leaves_equal(restored, state)
