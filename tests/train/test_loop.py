import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import init_state, make_train_step
from cfka_jax.train.loop import LoopConfig, NonFiniteError, run_loop
from tests.helpers import batch, split, tiny_model

OPT = OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=6)


def _setup(penalty=None):
    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(OPT)
    return init_state(params, tx), make_train_step(graphdef, rest, tx, penalty=penalty)


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
