"""The training loop shell: metrics log, progress bar, checkpoints, resume, non-finite guard.

The loop is deterministic given the step: ``batch_at(t)`` must be a pure function of t (the data layer derives
each epoch's order from (seed, epoch)), so a run resumed from the checkpoint at step t reproduces the
uninterrupted run exactly on CPU. Checkpoints (``train/checkpoint.CheckpointDir``) hold the whole ``TrainState``
(params, optimiser state, step). On resume from step t the metrics log drops records after t, so a resumed log
holds every step once. A non-finite loss, gradient or updated state stops the run with ``NonFiniteError``; the
step function has already kept the previous state, and the last good checkpoint on disk is left untouched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from typing import Callable, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from cfka_jax.train.checkpoint import CheckpointDir
from cfka_jax.train.step import TrainState


class NonFiniteError(RuntimeError):
    """Raised when a training step produced a NaN/Inf loss, gradient or parameter."""


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
        bad = {k: v for k, v in dataclasses.asdict(self).items() if k != "progress" and (
            not isinstance(v, int) or isinstance(v, bool))}
        if bad:
            raise ValueError(f"loop cadence fields must be integers, got {bad}")
        if self.steps < 0 or self.log_every < 1 or self.eval_every < 0 or self.ckpt_every < 0 \
                or self.keep_checkpoints < 1:
            raise ValueError(f"invalid loop cadence {self}: need steps >= 0, log_every >= 1, eval_every >= 0, "
                             f"ckpt_every >= 0, keep_checkpoints >= 1")


def _jsonable(metrics: dict) -> dict:
    return {k: (float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()) for k, v in metrics.items()}


class MetricsLog:
    """A run's ``metrics.jsonl``: one JSON object per line (``kind`` = ``train`` | ``eval``, ``step``, metrics).

    The one writer and reader of the file (in a multi-host run only process 0 writes). ``truncate_after(t)`` drops
    the records of steps after t (written after the checkpoint a run resumes from), rewriting the file atomically.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)

    def write(self, record: dict) -> None:
        if jax.process_index() != 0:  # multi-host: one writer
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def records(self) -> list[dict]:
        """Every record, in file order (a torn last line from a killed write is ignored)."""
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        out = []
        for i, line in enumerate(lines):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as err:
                if i == len(lines) - 1:
                    break
                raise ValueError(f"{self.path}, line {i + 1}: invalid JSON ({err.msg})") from None
        return out

    def truncate_after(self, step: int) -> None:
        if jax.process_index() != 0:
            return
        records = self.records()
        keep = [r for r in records if int(r.get("step", 0)) <= step]
        if len(keep) != len(records) or (self.path.exists() and not self.path.read_text().endswith("\n")):
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
            tmp.replace(self.path)

    def evals(self) -> list[dict]:
        return [r for r in self.records() if r.get("kind") == "eval"]


class LoopResult(NamedTuple):
    """The final state and the run's whole metrics history (records from before a resume included)."""

    state: TrainState
    history: list[dict]


def restore_state(ckpts: CheckpointDir, state: TrainState) -> TrainState:
    """The newest intact checkpoint restored into the structure of ``state``, or ``state`` when there is none."""
    found = ckpts.restore_latest(state)  # only the structure, shapes and dtypes of ``state`` are used
    return state if found is None else TrainState(*found[0])


def run_loop(state: TrainState, step_fn: Callable, batch_at: Callable[[int], dict], *, cfg: LoopConfig,
             out_dir: pathlib.Path, evaluate: Callable[[object, int], dict] | None = None,
             on_record: Callable[[dict], None] | None = None) -> LoopResult:
    """Trains from the newest checkpoint in ``out_dir/checkpoints`` (or from ``state``) up to ``cfg.steps``.

    Writes ``out_dir/metrics.jsonl`` (train records every ``log_every`` steps, eval records) and checkpoints;
    ``on_record(record)`` is called after each new record is written (a TensorBoard / W&B sink).
    """
    out_dir = pathlib.Path(out_dir)
    ckpts = CheckpointDir(out_dir / "checkpoints", cfg.keep_checkpoints)
    state = restore_state(ckpts, state)
    log, start = MetricsLog(out_dir / "metrics.jsonl"), int(state.step)
    log.truncate_after(start)
    history = log.records()
    sink = on_record if on_record is not None else (lambda r: None)
    record = lambda r: (log.write(r), history.append(r), sink(r))  # noqa: E731
    if evaluate is not None and start == 0 and not any(r.get("kind") == "eval" for r in history):
        record({"kind": "eval", "step": 0, **_jsonable(evaluate(state.params, 0))})
    bar = tqdm(total=cfg.steps, initial=start, disable=not cfg.progress, desc=out_dir.name)
    t0 = time.perf_counter()
    for t in range(start, cfg.steps):
        state, metrics = step_fn(state, batch_at(t))
        if not bool(metrics["finite"]):
            raise NonFiniteError(f"non-finite loss/gradient/parameters at step {t} (loss={float(metrics['loss'])}); "
                                 f"the run stopped, last good checkpoint: step {ckpts.latest_step()} in "
                                 f"{ckpts.directory}")
        done = t + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            record({"kind": "train", "step": done, "time_s": time.perf_counter() - t0, **_jsonable(metrics)})
        if evaluate is not None and ((cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps):
            record({"kind": "eval", "step": done, **_jsonable(evaluate(state.params, done))})
        if (cfg.ckpt_every and done % cfg.ckpt_every == 0) or done == cfg.steps:
            ckpts.save(done, state)
        bar.update(1)
    bar.close()
    return LoopResult(state, history)
