"""From a model to a finished run folder: the optimiser, the jitted step, the loop and the final record.

    run = train_lm(model, batch_at, opt=..., loop=..., folder=RunFolder(out), evaluate_factory=..., penalty=...)
    final = finish_run(folder, evaluate, run, extra={...})

The model is split once (``nnx.split(model, nnx.Param, ...)``); everything after that works on the pure ``params``
pytree (convention 5). ``evaluate_factory(graphdef, rest)`` returns ``evaluate(params, step) -> dict``, recorded
in the run's metrics log. Results stay in memory: :class:`TrainedRun` holds the final state and the whole metrics
history (records written before a resume included), so nothing is read back from disk to report a run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from cfka_jax.runs.folder import RunFolder
from cfka_jax.train.loop import LoopConfig, run_loop
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import TrainState, init_state, make_train_step, master_params, token_nll_loss


@dataclasses.dataclass(frozen=True)
class TrainedRun:
    """A finished (or resumed-and-finished) training run, in memory."""

    state: TrainState
    graphdef: Any
    rest: Any
    history: list[dict]

    @property
    def params(self):
        return self.state.params

    @property
    def step(self) -> int:
        return int(self.state.step)

    def evals(self) -> list[dict]:
        """The eval records, in step order."""
        return [r for r in self.history if r.get("kind") == "eval"]

    def eval_at(self, step: int) -> dict:
        """The metrics of the last eval record at ``step`` ({} if none)."""
        found = [r for r in self.evals() if r["step"] == step]
        return {k: v for k, v in found[-1].items() if k not in ("kind", "step")} if found else {}


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a recipe returns: the final metrics (as in ``final.json``), the metrics history and the model."""

    final: dict
    history: list[dict]
    params: Any
    graphdef: Any
    rest: Any

    def model(self) -> nnx.Module:
        """The trained model (float32 master parameters merged into the architecture)."""
        return nnx.merge(self.graphdef, self.params, self.rest)


def train_lm(model: nnx.Module, batch_at: Callable[[int], dict], *, opt: OptimConfig, loop: LoopConfig,
             folder: RunFolder, evaluate_factory: Callable | None = None, penalty=None, penalty_args=None,
             loss_fn=token_nll_loss, trainable=None, compute_dtype=None, mesh=None, post_update=None,
             on_record=None) -> TrainedRun:
    """Trains ``model`` (resuming from ``folder``'s checkpoints) and returns the run in memory.

    Args:
      model: the NNX model holding the initial parameters.
      batch_at: step → batch (deterministic).
      opt, loop: optimiser and loop settings.
      folder: the run folder (metrics log, checkpoints).
      evaluate_factory: ``(graphdef, rest) → evaluate(params, step)``, or None.
      penalty, penalty_args: ``penalty(params, penalty_args) → scalar`` added to the loss (EWC), or None; the
        operands are passed to the jitted step as arguments.
      loss_fn: ``(logits_BSV, batch) → (loss, count)`` (``train/step.py``).
      trainable: ``params → pytree of bools`` (False = frozen), or None.
      compute_dtype: mixed precision (e.g. bfloat16 for a bf16-config model): float32 master parameters, the
        forward/backward pass in ``compute_dtype``, float32 loss (``train/step.py``).
      mesh: a ``jax.sharding.Mesh`` (``parallel/mesh.py``): the state is placed by the logical axis rules
        (``parallel/rules.py``), batch rows are split over ``data`` × ``fsdp``; None runs on one device.
      post_update: an optax transformation applied to the AdamW update (GPM's projection), or None.
      on_record: called with every new metrics record (``train/loop.run_loop``; e.g. ``train/tracking.py``).
    """
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = jax.tree.map(jnp.copy, params)  # the step donates its state; the caller's arrays stay valid
    if compute_dtype is not None:
        params = master_params(params)
    tx = make_optimizer(opt, trainable(params) if trainable is not None else None, post=post_update)
    state, state_sharding = init_state(params, tx), None
    if mesh is not None:
        state, state_sharding, batch_at = _shard(state, batch_at, mesh)
    step = make_train_step(graphdef, rest, tx, penalty=penalty, loss_fn=loss_fn, compute_dtype=compute_dtype,
                           state_sharding=state_sharding)
    step_fn = step if penalty is None else (lambda state, batch: step(state, batch, penalty_args))
    evaluate = evaluate_factory(graphdef, rest) if evaluate_factory is not None else None
    done = run_loop(state, step_fn, batch_at, cfg=loop, out_dir=folder.path, evaluate=evaluate, on_record=on_record)
    return TrainedRun(done.state, graphdef, rest, done.history)


def _shard(state: TrainState, batch_at: Callable[[int], dict], mesh):
    """(placed state, its shardings, batch_at placing each batch's rows over the batch mesh axes)."""
    from cfka_jax.parallel.rules import batch_sharding, place, tree_shardings

    shardings = tree_shardings(state, mesh)
    rows = batch_sharding(mesh)
    width = mesh.shape["data"] * mesh.shape["fsdp"]

    def placed(t: int) -> dict:
        batch = batch_at(t)
        if batch["tokens"].shape[0] % width:
            raise ValueError(f"batch of {batch['tokens'].shape[0]} rows cannot be split over data × fsdp = {width} "
                             f"devices of --mesh {dict(mesh.shape)}")
        return place(batch, rows)

    return place(state, shardings), shardings, placed


def best_step(history: list[dict], key: str) -> dict:
    """The eval record with the highest ``key`` (the reference reports the best-hFTA step, decision #13)."""
    evals = [r for r in history if r.get("kind") == "eval" and key in r]
    if not evals:
        return {}
    best = max(evals, key=lambda r: r[key])
    return {f"best[{key}]/{k}": v for k, v in best.items() if k == "step" or (k.count("/") == 1 and "FTA" in k)}


def finish_run(folder: RunFolder, evaluate, run: TrainedRun, extra: dict,
               best_keys: tuple[str, ...] = ("Original/hFTA", "Continual/hFTA")) -> RunResult:
    """Write ``final.json``: the final step's evaluation (from the history, or evaluated now when the loop had it
    from an earlier process), ``extra`` and the best-step records of ``best_keys``."""
    last = run.eval_at(run.step)
    final = {"step": run.step, **(last if last else evaluate(run.params, run.step)), **extra}
    for key in best_keys:
        final.update(best_step(run.history, key))
    folder.write_final(final)
    return RunResult(final, run.history, run.params, run.graphdef, run.rest)
