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

Checkpoints are written asynchronously (``LoopConfig.async_checkpoints``, orbax's ``CheckpointManager``): the
loop goes on training while the files are written and waits for the last write before it returns. With
``out_dir``, SIGTERM (a preemption, ``scancel``, ``kubectl delete``) does not kill the run: the handler only asks
for a stop, and at the next step boundary the loop settles that step, checkpoints it, waits for the write, prints
how to resume and raises :class:`Preempted` (a ``SystemExit`` with status 143 = 128 + SIGTERM). Running the same
command again resumes from that step and ends bit for bit where the uninterrupted run ends (on CPU).

Every train record carries the run's throughput (``train/throughput.py``): ``tokens_per_s``, ``step_time_s``,
``flops_per_step`` (and ``flops_source``), the devices' ``peak_flops`` (``peak_source``) and ``mfu`` (None with
``mfu_reason`` when the peak is unknown). ``LoopConfig.profile`` (``--profile START:STOP``) writes a
``jax.profiler`` trace of those steps into ``out_dir/profile/`` (``train/profiling.py``).

Without ``out_dir`` the loop keeps everything in memory (no checkpoints, no metrics file): the form the in-memory
trainers use (the seed ensemble, CKL's epochs, TAALM's meta-training, the geometry fine-tunes and the plasticity
curve), with ``on_metrics`` / ``on_state`` hooks for what they record.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import sys
import threading
import time
from typing import Callable, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from cfka_jax import jsonio
from cfka_jax.train.accumulate import check_accumulate
from cfka_jax.train.checkpoint import CheckpointDir
from cfka_jax.train.profiling import StepTracer, parse_profile
from cfka_jax.train.step import TrainState
from cfka_jax.train.throughput import Throughput


class NonFiniteError(RuntimeError):
    """Raised when a training step produced a NaN/Inf loss, gradient or parameter."""


class Preempted(SystemExit):
    """The run stopped on SIGTERM after checkpointing step ``step`` (exit status 143; module docstring)."""

    def __init__(self, step: int, message: str):
        super().__init__(143)
        self.step, self.message = step, message

    def __str__(self) -> str:
        return self.message


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """Loop cadence. ``eval_every``/``ckpt_every`` = 0 disables periodic evaluation/checkpoints (the end still
    gets both). ``keep_checkpoints``: how many of the newest checkpoints are kept (``--keep-checkpoints``; two, so
    a checkpoint damaged on disk still leaves one to resume from). ``async_checkpoints``: write them in the
    background (module docstring). ``accumulate``: micro-batches per optimiser step (``--accumulate``; the batch
    is split into that many, ``train/accumulate.py``; the step builder reads it, ``runs/engine.train_lm``).
    ``profile``: ``"START:STOP"``, a profiler trace of those steps (``--profile``, ``train/profiling.py``)."""

    steps: int
    log_every: int = 10
    eval_every: int = 0
    ckpt_every: int = 0
    keep_checkpoints: int = 2
    progress: bool = True
    async_checkpoints: bool = True
    accumulate: int = 1
    profile: str | None = None

    def __post_init__(self):
        ints = ("steps", "log_every", "eval_every", "ckpt_every", "keep_checkpoints", "accumulate")
        bad = {k: getattr(self, k) for k in ints if not isinstance(getattr(self, k), int)
               or isinstance(getattr(self, k), bool)}
        if bad:
            raise ValueError(f"loop cadence fields must be integers, got {bad}")
        if self.steps < 0 or self.log_every < 1 or self.eval_every < 0 or self.ckpt_every < 0 \
                or self.keep_checkpoints < 1:
            raise ValueError(f"invalid loop cadence {self}: need steps >= 0, log_every >= 1, eval_every >= 0, "
                             f"ckpt_every >= 0, keep_checkpoints >= 1")
        check_accumulate(self.accumulate)
        parse_profile(self.profile)


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
        jsonio.append_jsonl(self.path, record)  # one line in one write: a kill tears at most the last line

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
            jsonio.write_jsonl_atomic(self.path, keep)

    def evals(self) -> list[dict]:
        return [r for r in self.records() if r.get("kind") == "eval"]


class LoopResult(NamedTuple):
    """The final state and the run's whole metrics history (records from before a resume included)."""

    state: TrainState
    history: list[dict]


class BoundStep:
    """``step(state, batch, *inputs)`` as the loop's ``step_fn(state, batch)``, keeping the jitted step's
    ``lower`` (the FLOP count of ``train/throughput.py`` reads the lowered program)."""

    def __init__(self, step: Callable, *inputs):
        self.step, self.inputs = step, inputs

    def __call__(self, state, batch):
        return self.step(state, batch, *self.inputs)

    def lower(self, state, batch):
        return self.step.lower(state, batch, *self.inputs)


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

    Raises:
      NonFiniteError: a non-finite step (module docstring).
      Preempted: SIGTERM arrived (with ``out_dir``; module docstring).
      ValueError: ``cfg.profile`` without ``out_dir`` (the trace goes into the run folder).
    """
    if cfg.profile is not None and out_dir is None:
        raise ValueError("--profile writes its trace into the run folder; this loop has none (out_dir is None)")
    ckpts = (CheckpointDir(pathlib.Path(out_dir) / "checkpoints", cfg.keep_checkpoints,
                           asynchronous=cfg.async_checkpoints) if out_dir is not None else None)
    tracer = StepTracer(parse_profile(cfg.profile), pathlib.Path(out_dir or ".") / "profile")
    stop = _StopRequest() if out_dir is not None else None
    try:
        return _loop(state, step_fn, batch_at, cfg, out_dir, ckpts, tracer, stop, evaluate, on_record, on_metrics,
                     on_state, state_at, start, stop_on_nonfinite, desc)
    finally:
        tracer.close()
        if stop is not None:
            stop.restore()
        if ckpts is not None:
            ckpts.close()  # the last (asynchronous) checkpoint is on disk when the loop returns or stops


class _StopRequest:
    """SIGTERM asks for a stop at the next step boundary (installed from the main thread only; the previous
    handler is put back when the loop ends).

    Several processes (a TPU slice, a multi-node job started with ``--distributed``) must stop at the same step,
    or the checkpoint's collective write waits forever: there JAX's preemption service (``jax.distributed``'s
    SIGTERM notifier, which spreads one host's notice to all) picks the step, and :meth:`at` asks it
    (``multihost_utils.reached_preemption_sync_point``); no Python handler is installed. Not tested here (one
    process only)."""

    def __init__(self):
        self.requested, self._previous = False, None
        self._hosts = jax.process_count() > 1
        if not self._hosts and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def at(self, done: int) -> bool:
        """Whether to stop after ``done`` steps (every process calls it at every step boundary)."""
        if self._hosts:
            from jax.experimental import multihost_utils

            return multihost_utils.reached_preemption_sync_point(done)
        return self.requested

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


def _loop(state, step_fn, batch_at, cfg, out_dir, ckpts, tracer, stop, evaluate, on_record, on_metrics, on_state,
          state_at, start, stop_on_nonfinite, desc) -> LoopResult:
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
    t0, meter = time.perf_counter(), None

    def settle(t: int, metrics: dict) -> None:
        """Step t's guard and records (its state is not needed)."""
        if stop_on_nonfinite and not bool(metrics["finite"]):
            if ckpts is not None:
                ckpts.wait()  # the last good checkpoint may still be being written
            where = (f"; the run stopped, last good checkpoint: step {ckpts.latest_step()} in {ckpts.directory}"
                     if ckpts is not None else "; the run stopped")
            raise NonFiniteError(f"non-finite loss/gradient/parameters at step {t} "
                                 f"(loss={float(metrics['loss'])}){where}")
        done = t + 1
        if on_metrics is not None:
            on_metrics(done, metrics)
        if done % cfg.log_every == 0 or done == cfg.steps:
            record({"kind": "train", "step": done, "time_s": time.perf_counter() - t0, **_jsonable(metrics),
                    **meter.record(done)})

    def wants_eval(done: int) -> bool:
        return evaluate is not None and ((cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps)

    def wants_ckpt(done: int) -> bool:
        return ckpts is not None and ((cfg.ckpt_every and done % cfg.ckpt_every == 0) or done == cfg.steps)

    pending = None
    for t in range(start, cfg.steps):
        batch = batch_at(t)
        if meter is None:
            meter = Throughput.of(step_fn, state, batch)
            meter.start(t)
        tracer.before(t, state)
        state, metrics = step_fn(state, batch)
        meter.add(batch)
        if pending is not None:  # the previous step's flag: this step is already queued behind it
            settle(*pending)
            pending = None
        done = t + 1
        at_state = state_at is not None and state_at(done)
        stopping = stop is not None and stop.at(done) and done < cfg.steps
        if done == cfg.steps or wants_eval(done) or wants_ckpt(done) or at_state or stopping:
            settle(t, metrics)
            if wants_eval(done):
                record({"kind": "eval", "step": done, **_jsonable(evaluate(state.params, done))})
            if wants_ckpt(done) or stopping:
                ckpts.save(done, state)
            if at_state and on_state is not None:
                on_state(done, state)
        else:
            pending = (t, metrics)
        tracer.after(done, state)
        bar.update(1)
        if stopping:
            bar.close()
            _preempt(ckpts, done, cfg.steps)
    bar.close()
    return LoopResult(state, history)


def _preempt(ckpts: CheckpointDir, done: int, steps: int) -> None:
    """Wait for step ``done``'s checkpoint, say how to resume, raise :class:`Preempted`."""
    ckpts.close()
    message = (f"SIGTERM: stopped after step {done} of {steps}; checkpoint {ckpts.directory / str(done)} is "
               f"written. Resume by running the same command again (same output folder): training continues "
               f"from step {done}.")
    print(message, file=sys.stderr, flush=True)
    raise Preempted(done, message)
