"""The one training loop: metrics log, progress bar, checkpoints, resume, eval/state/metrics hooks, the finite guard.

The loop is deterministic given the step: ``batch_at(t)`` must be a pure function of t (the data layer derives
each epoch's order from (seed, epoch); it is called once per step, in order, so an in-memory trainer may also draw
its batches from a seeded stream), so a run resumed from the checkpoint at step t reproduces the
uninterrupted run exactly on CPU. Checkpoints (``train/checkpoint.CheckpointDir``) hold the whole ``TrainState``
(params, optimiser state, step). On resume from step t the metrics log drops records after t, so a resumed log
holds every step once. A non-finite loss, gradient or updated state stops the run with ``NonFiniteError``; the
step function has already kept the previous state, and the last good checkpoint on disk is left untouched.

The guard is checked one step late, so the host never waits for the step it just queued: step t+1 is dispatched
(JAX runs asynchronously) before step t's ``finite`` flag is read, and only then are step t's metrics logged.
Steps whose *state* is read on the host (evaluation, checkpoint, ``on_state``, the last step) are settled at once,
before the next step donates that state's buffers; a non-finite step is therefore still reported with its own
index t, and no record or checkpoint of a step at or after it is written.

Without ``out_dir`` the loop keeps everything in memory (no checkpoints, no metrics file): the form the in-memory
trainers use (the seed ensemble, CKL's epochs, TAALM's meta-training, the geometry fine-tunes and the plasticity
curve), with ``on_metrics`` / ``on_state`` hooks for what they record.
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


def _checked_record(record, where: str) -> dict:
    """A metrics record as written by :meth:`MetricsLog.write`: an object with a ``kind`` and a ``step``."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object (a metrics record), got {type(record).__name__}")
    step, kind = record.get("step"), record.get("kind")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{where}: key 'step' must be an integer >= 0, got {step!r}")
    if not isinstance(kind, str):
        raise ValueError(f"{where}: key 'kind' must be a string ('train' or 'eval'), got {kind!r}")
    return record


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
        """Every record, in file order (a torn last line from a killed write is ignored).

        Raises:
          ValueError: naming the file and line of a line that is not JSON (other than a torn last one), not an
            object, or a record without an integer ``step`` >= 0 or a string ``kind``.
        """
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        out = []
        for i, line in enumerate(lines):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                if i == len(lines) - 1:
                    break
                raise ValueError(f"{self.path}, line {i + 1}: invalid JSON ({err.msg})") from None
            out.append(_checked_record(record, f"{self.path}, line {i + 1}"))
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


def run_loop(state: TrainState, step_fn: Callable, batch_at: Callable[[int], object], *, cfg: LoopConfig,
             out_dir: pathlib.Path | None = None, evaluate: Callable[[object, int], dict] | None = None,
             on_record: Callable[[dict], None] | None = None,
             on_metrics: Callable[[int, dict], None] | None = None,
             on_state: Callable[[int, object], None] | None = None, state_at: Callable[[int], bool] | None = None,
             start: int | None = None, stop_on_nonfinite: bool = True, desc: str | None = None) -> LoopResult:
    """Trains from the newest checkpoint in ``out_dir/checkpoints`` (or from ``state``) up to ``cfg.steps``.

    ``step_fn(state, batch_at(t)) -> (state, metrics)`` with a boolean ``metrics["finite"]``. With ``out_dir``,
    writes ``out_dir/metrics.jsonl`` (train records every ``log_every`` steps, eval records) and checkpoints and
    starts at the restored ``state.step``; without it, nothing is written and the loop starts at ``start``
    (default 0). ``on_record(record)`` is called after each new record (a TensorBoard / W&B sink);
    ``on_metrics(done, metrics)`` after every step, once its flag is checked (one step late, module docstring);
    ``on_state(done, state)`` after the steps where ``state_at(done)`` is true (the state is settled first; do not
    keep references to its buffers, the next step donates them). ``stop_on_nonfinite=False`` leaves the flag to
    ``on_metrics`` (a seed ensemble counts it per member: every member's step already kept its own last good
    state, and one diverged seed does not stop the others).
    """
    ckpts = CheckpointDir(pathlib.Path(out_dir) / "checkpoints", cfg.keep_checkpoints) if out_dir is not None else None
    log = MetricsLog(pathlib.Path(out_dir) / "metrics.jsonl") if out_dir is not None else None
    if ckpts is not None:
        state = restore_state(ckpts, state)
    if start is None:
        start = int(state.step) if out_dir is not None else 0
    if log is not None:
        log.truncate_after(start)
    history = log.records() if log is not None else []
    sink = on_record if on_record is not None else (lambda r: None)

    def record(r: dict) -> None:
        if log is not None:
            log.write(r)
        history.append(r)
        sink(r)

    if evaluate is not None and start == 0 and not any(r.get("kind") == "eval" for r in history):
        record({"kind": "eval", "step": 0, **_jsonable(evaluate(state.params, 0))})
    name = desc if desc is not None else (pathlib.Path(out_dir).name if out_dir is not None else "train")
    bar = tqdm(total=cfg.steps, initial=start, disable=not cfg.progress, desc=name)
    t0 = time.perf_counter()

    def settle(t: int, metrics: dict) -> None:
        """Step t's guard and records (its state is not needed)."""
        if stop_on_nonfinite and not bool(metrics["finite"]):
            where = (f"; the run stopped, last good checkpoint: step {ckpts.latest_step()} in {ckpts.directory}"
                     if ckpts is not None else "; the run stopped")
            raise NonFiniteError(f"non-finite loss/gradient/parameters at step {t} "
                                 f"(loss={float(metrics['loss'])}){where}")
        done = t + 1
        if on_metrics is not None:
            on_metrics(done, metrics)
        if done % cfg.log_every == 0 or done == cfg.steps:
            record({"kind": "train", "step": done, "time_s": time.perf_counter() - t0, **_jsonable(metrics)})

    def wants_eval(done: int) -> bool:
        return evaluate is not None and ((cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps)

    def wants_ckpt(done: int) -> bool:
        return ckpts is not None and ((cfg.ckpt_every and done % cfg.ckpt_every == 0) or done == cfg.steps)

    pending = None
    for t in range(start, cfg.steps):
        state, metrics = step_fn(state, batch_at(t))
        if pending is not None:  # the previous step's flag: this step is already queued behind it
            settle(*pending)
            pending = None
        done = t + 1
        at_state = state_at is not None and state_at(done)
        if done == cfg.steps or wants_eval(done) or wants_ckpt(done) or at_state:
            settle(t, metrics)
            if wants_eval(done):
                record({"kind": "eval", "step": done, **_jsonable(evaluate(state.params, done))})
            if wants_ckpt(done):
                ckpts.save(done, state)
            if at_state and on_state is not None:
                on_state(done, state)
        else:
            pending = (t, metrics)
        bar.update(1)
    bar.close()
    return LoopResult(state, history)
