import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import init_state, make_train_step, Loss
from cfka_jax.train.loop import LoopConfig, NonFiniteError, run_loop
from tests.helpers import batch, split, tiny_model

OPT = OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=6)


def _setup(penalty=None):
    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(OPT)
    return init_state(params, tx), make_train_step(graphdef, rest, tx, loss=Loss(penalty=penalty))


def test_resume_reproduces_uninterrupted_run(tmp_path):
    state, step = _setup()
    full = run_loop(state, step, batch, cfg=LoopConfig(steps=6, log_every=1, progress=False), out_dir=tmp_path / "a").state
    state, step = _setup()
    run_loop(state, step, batch, cfg=LoopConfig(steps=3, ckpt_every=3, progress=False), out_dir=tmp_path / "b")
    state, step = _setup()  # a fresh process would start from init and find the checkpoint
    resumed = run_loop(state, step, batch, cfg=LoopConfig(steps=6, progress=False), out_dir=tmp_path / "b").state
    assert int(resumed.step) == 6
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(a, b)
    records = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6] and all(r["finite"] == 1.0 for r in records)


def test_non_finite_stops_and_keeps_last_checkpoint(tmp_path):
    state, step = _setup()
    run_loop(state, step, batch, cfg=LoopConfig(steps=2, ckpt_every=2, progress=False), out_dir=tmp_path)

    def bad_batch(t):
        b = batch(t)
        return {**b, "target_mask": b["target_mask"] * jnp.nan}

    state, step = _setup()
    with pytest.raises(NonFiniteError, match="step 2"):
        run_loop(state, step, bad_batch, cfg=LoopConfig(steps=4, ckpt_every=1, progress=False), out_dir=tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == ["2"]


def test_mismatched_checkpoint_names_folder(tmp_path):
    state, step = _setup()
    run_loop(state, step, batch, cfg=LoopConfig(steps=1, progress=False), out_dir=tmp_path)
    other = init_state({"w": jnp.zeros((3,))}, make_optimizer(OPT))
    with pytest.raises(ValueError, match="checkpoints"):
        run_loop(other, step, batch, cfg=LoopConfig(steps=2, progress=False), out_dir=tmp_path)


class _Flag:
    """A step's ``finite`` flag that records, whenever the host reads it, how many steps had been dispatched."""

    def __init__(self, t: int, ok: bool, reads: list, dispatched: list):
        self.t, self.ok, self.reads, self.dispatched = t, ok, reads, dispatched

    def _read(self) -> bool:
        self.reads.append((self.t, self.dispatched[0]))
        return self.ok

    __bool__ = _read

    def __float__(self) -> float:
        return float(self._read())


def _fake_step(reads: list, bad: int | None = None):
    dispatched = [0]

    def step(state, batch):
        t = dispatched[0]
        dispatched[0] += 1
        return state, {"loss": 0.5, "finite": _Flag(t, t != bad, reads, dispatched)}

    return step


def test_the_guard_reads_each_flag_only_after_the_next_step_is_queued():
    reads = []
    seen = []
    run_loop(init_state({"w": jnp.zeros((2,))}, make_optimizer(OPT)), _fake_step(reads), lambda t: {},
             cfg=LoopConfig(steps=7, log_every=1, progress=False), state_at=lambda done: done == 3,
             on_state=lambda done, s: seen.append(done))
    first = {}
    for t, dispatched in reads:
        first.setdefault(t, dispatched)
    assert sorted(first) == list(range(7)) and seen == [3]
    # step index 2 (done = 3) has its state read and step 6 is the last: settled at once (t + 1 dispatched); every
    # other step's flag is first read only once the following step has been dispatched (t + 2)
    assert first == {t: t + 1 if t in (2, 6) else t + 2 for t in range(7)}


def test_a_loss_that_goes_nan_at_step_k_stops_there_one_step_late(tmp_path):
    k = 3

    def poisoned(t):
        b = batch(t)
        return {**b, "target_mask": b["target_mask"] * (jnp.nan if t == k else 1.0)}

    state, step = _setup()
    kept = []
    with pytest.raises(NonFiniteError, match=f"at step {k} "):
        run_loop(state, step, poisoned, cfg=LoopConfig(steps=6, log_every=1, progress=False), out_dir=tmp_path,
                 on_metrics=lambda done, m: kept.append(done))
    assert kept == [1, 2, 3]  # steps 0..k-1; nothing recorded for step k or the one dispatched after it
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert not (tmp_path / "checkpoints").exists() or not any(
        p.name.isdigit() for p in (tmp_path / "checkpoints").iterdir())
    reads = []  # the fake's flag at step k: the loop stops at k, after k + 1 was queued
    with pytest.raises(NonFiniteError, match=f"at step {k} "):
        run_loop(init_state({"w": jnp.zeros((2,))}, make_optimizer(OPT)), _fake_step(reads, bad=k), lambda t: {},
                 cfg=LoopConfig(steps=6, progress=False))
    assert reads[-1] == (k, k + 2)


def test_in_memory_loop_matches_the_folder_loop(tmp_path):
    state, step = _setup()
    folder = run_loop(state, step, batch, cfg=LoopConfig(steps=4, progress=False), out_dir=tmp_path).state
    state, step = _setup()
    losses = []
    memory = run_loop(state, step, batch, cfg=LoopConfig(steps=4, progress=False),
                      on_metrics=lambda done, m: losses.append(float(m["loss"]))).state
    assert len(losses) == 4 and not (tmp_path / "x").exists()
    jax.tree.map(np.testing.assert_array_equal, folder, memory)
