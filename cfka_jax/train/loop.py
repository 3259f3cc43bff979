"""The training loop shell: metrics to JSONL, progress bar, orbax checkpoints, resume, non-finite guard.

The loop is deterministic given the step: ``batch_at(t)`` must be a pure function of t (the data layer derives
each epoch's order from (seed, epoch)), so a run resumed from the checkpoint at step t reproduces the
uninterrupted run exactly on CPU. Checkpoints hold the whole ``TrainState`` (params, optimiser state, step).
A non-finite loss or gradient stops the run with ``NonFiniteError``; the step function has already kept the
previous state, and the last good checkpoint on disk is left untouched.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Callable

import jax
import numpy as np
import orbax.checkpoint as ocp
from tqdm.auto import tqdm

from cfka_jax.train.step import TrainState


class NonFiniteError(RuntimeError):
    """Raised when a training step produced a NaN/Inf loss or gradient."""


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """Loop cadence. ``eval_every``/``ckpt_every`` = 0 disables periodic evaluation/checkpoints (the end still
    gets both)."""

    steps: int
    log_every: int = 10
    eval_every: int = 0
    ckpt_every: int = 0
    keep_checkpoints: int = 2
    progress: bool = True

    def __post_init__(self):
        if self.steps < 0 or self.log_every < 1 or self.eval_every < 0 or self.ckpt_every < 0:
            raise ValueError(f"invalid loop cadence {self}")


def _jsonable(metrics: dict) -> dict:
    return {k: (float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()) for k, v in metrics.items()}


class JsonlWriter:
    """Appends one JSON object per line to ``path``."""

    def __init__(self, path: pathlib.Path):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def checkpoint_manager(ckpt_dir: pathlib.Path, keep: int) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
    return ocp.CheckpointManager(pathlib.Path(ckpt_dir).absolute(), options=options)


def restore_latest(manager: ocp.CheckpointManager, state: TrainState) -> TrainState:
    """The latest checkpoint restored into the structure of ``state``, or ``state`` itself when there is none.

    Raises:
      ValueError: naming the checkpoint folder when it exists but does not match the state's structure.
    """
    step = manager.latest_step()
    if step is None:
        return state
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    try:
        restored = manager.restore(step, args=ocp.args.StandardRestore(abstract))
    except Exception as err:  # orbax raises several types; name the folder and re-raise as one
        raise ValueError(f"checkpoint {manager.directory / str(step)} does not match the train state: {err}") from err
    return TrainState(*restored) if not isinstance(restored, TrainState) else restored


def run_loop(state: TrainState, step_fn: Callable, batch_at: Callable[[int], dict], *, cfg: LoopConfig,
             out_dir: pathlib.Path, evaluate: Callable[[object, int], dict] | None = None) -> TrainState:
    """Trains from the latest checkpoint in ``out_dir/checkpoints`` (or from ``state``) up to ``cfg.steps``.

    Writes ``out_dir/metrics.jsonl`` (train records every ``log_every`` steps, eval records) and checkpoints.
    """
    out_dir = pathlib.Path(out_dir)
    manager = checkpoint_manager(out_dir / "checkpoints", cfg.keep_checkpoints)
    state = restore_latest(manager, state)
    log = JsonlWriter(out_dir / "metrics.jsonl")
    start = int(state.step)
    if evaluate is not None and start == 0:
        log.write({"kind": "eval", "step": 0, **_jsonable(evaluate(state.params, 0))})
    bar = tqdm(total=cfg.steps, initial=start, disable=not cfg.progress, desc=out_dir.name)
    t0 = time.perf_counter()
    for t in range(start, cfg.steps):
        state, metrics = step_fn(state, batch_at(t))
        if not bool(metrics["finite"]):
            manager.wait_until_finished()
            raise NonFiniteError(f"non-finite loss/gradient at step {t} (loss={float(metrics['loss'])}); the run "
                                 f"stopped, last good checkpoint: step {manager.latest_step()} in {manager.directory}")
        done = t + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            log.write({"kind": "train", "step": done, "time_s": time.perf_counter() - t0, **_jsonable(metrics)})
        if evaluate is not None and ((cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps):
            log.write({"kind": "eval", "step": done, **_jsonable(evaluate(state.params, done))})
        if (cfg.ckpt_every and done % cfg.ckpt_every == 0) or done == cfg.steps:
            manager.save(done, args=ocp.args.StandardSave(state))
        bar.update(1)
    bar.close()
    manager.wait_until_finished()
    return state
