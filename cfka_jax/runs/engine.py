"""From a model to a finished run folder: the optimiser, the jitted step, the loop and the final record.

    run = train_lm(model, batch_at, update=RunUpdate(opt=...), loop=..., folder=RunFolder(out),
                   objective=RunObjective(penalty=..., penalty_args=...), hooks=RunHooks(evaluate_factory=...))
    final = finish_run(folder, evaluate, run, extra={...})

The model is split once (``nnx.split(model, nnx.Param, ...)``); everything after that works on the pure ``params``
pytree (convention 5). Besides the model, the batches, the loop and the folder, :func:`train_lm` takes four small
frozen option groups, each checked on construction: :class:`RunUpdate` (the optimiser and what it trains),
:class:`RunObjective` (loss, penalty, compute dtype), :class:`RunMemory` (mesh, loss chunk, guard, what the end
keeps, consuming the model's arrays) and :class:`RunHooks` (evaluation, the record callback).
``evaluate_factory(graphdef, rest)`` returns ``evaluate(params, step) -> dict``, recorded
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
from cfka_jax.train.loop import BoundStep, LoopConfig, run_loop
from cfka_jax.train.optim import OptimConfig, make_optimizer, masked_tx, trains
from cfka_jax.train.checkpoint import FINAL_CHECKPOINTS, CheckpointDir, frozen_paths
from cfka_jax.train.step import (GUARDS, Loss, Placement, TrainState, Update, chunked_token_nll_loss, init_state,
                                 make_train_step, token_nll_loss)


@dataclasses.dataclass(frozen=True)
class TrainedRun:
    """A finished (or resumed-and-finished) training run, in memory."""

    state: TrainState
    graphdef: Any
    rest: Any
    history: list[dict]
    final_checkpoint: str = "full"
    held: tuple = ()  # key paths of the frozen parameters (not stored in checkpoints; re-created from the source)

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


def check_run_options(loss_chunk: int | None, final_checkpoint: str, guard: str = "gradient") -> None:
    """The memory options of :func:`train_lm` (recipes call it from their config's ``__post_init__``): ValueError
    naming ``--loss-chunk`` (an integer >= 0, or None: :func:`resolve_loss_chunk`), ``--final-checkpoint``
    (``FINAL_CHECKPOINTS``) or ``--guard`` (``train/step.GUARDS``)."""
    if guard not in GUARDS:
        raise ValueError(f"--guard must be one of {GUARDS}, got {guard!r}")
    if loss_chunk is not None and (isinstance(loss_chunk, bool) or not isinstance(loss_chunk, int) or loss_chunk < 0):
        raise ValueError(f"--loss-chunk must be an integer >= 1 (rows per chunk) or 0 (full logits), got "
                         f"{loss_chunk!r}")
    if final_checkpoint not in FINAL_CHECKPOINTS:
        raise ValueError(f"--final-checkpoint must be one of {FINAL_CHECKPOINTS}, got {final_checkpoint!r}")


@dataclasses.dataclass(frozen=True)
class RunObjective:
    """What a run minimises (:func:`train_lm`'s ``objective``): ``loss_fn(logits_BSV, batch) -> (loss, count)``
    (``train/step.py``; default the mean next-token NLL) plus ``penalty(params, penalty_args) -> scalar`` (EWC; the
    operands are passed to the jitted step as arguments, not baked into the program), the forward/backward pass in
    ``compute_dtype`` when given (mixed precision, e.g. bfloat16 for a bf16-config model: float32 master parameters,
    float32 loss).

    Raises:
      ValueError: naming the field: a non-callable ``loss_fn`` or ``penalty`` (``penalty_args`` are unused
        without a ``penalty``).
    """

    loss_fn: Callable = token_nll_loss
    penalty: Callable | None = None
    penalty_args: Any = None
    compute_dtype: Any = None

    def __post_init__(self):
        if not callable(self.loss_fn):
            raise ValueError(f"RunObjective.loss_fn must be callable (logits_BSV, batch) -> (loss, count), got "
                             f"{self.loss_fn!r}")
        if self.penalty is not None and not callable(self.penalty):
            raise ValueError(f"RunObjective.penalty must be callable (params, penalty_args) -> scalar or None, got "
                             f"{self.penalty!r}")


@dataclasses.dataclass(frozen=True)
class RunUpdate:
    """How a run changes the parameters (:func:`train_lm`'s ``update``): the optimiser settings ``opt``
    (``train/optim.OptimConfig``: clip + AdamW with its schedule), ``optimizer`` (a transformation in place of AdamW,
    the method's optimiser hook, ``runs/methods.optimizer_core``: RecAdam, clipped and masked like AdamW, the
    ``core`` of ``train/optim.make_optimizer``; None: AdamW), ``post_update`` (an optax transformation applied to the
    update, GPM's projection; None: none) and ``trainable`` (``params → pytree of bools``, False = frozen; None:
    every parameter trains).

    Raises:
      ValueError: naming the field: ``opt`` not an ``OptimConfig``, a non-callable ``trainable``.
    """

    opt: OptimConfig
    trainable: Callable | None = None
    optimizer: Any = None
    post_update: Any = None

    def __post_init__(self):
        if not isinstance(self.opt, OptimConfig):
            raise ValueError(f"RunUpdate.opt must be a train.optim.OptimConfig, got {type(self.opt).__name__}")
        if self.trainable is not None and not callable(self.trainable):
            raise ValueError(f"RunUpdate.trainable must be callable (params -> pytree of bools) or None, got "
                             f"{self.trainable!r}")


@dataclasses.dataclass(frozen=True)
class RunMemory:
    """Where a run's state lives and what it holds (:func:`train_lm`'s ``memory``; checked by
    :func:`check_run_options`, the flags a recipe's config maps to).

    ``mesh``: a ``jax.sharding.Mesh`` (``parallel/mesh.py``): the state is placed by the logical axis rules
    (``parallel/rules.py``), batch rows are split over ``data`` × ``fsdp``; None runs on one device.
    ``loss_chunk``: compute the default NLL ``loss_fn`` from the final hidden states, ``loss_chunk`` predicting rows
    at a time (:func:`with_loss_chunk`; no ``B × S × V`` logits); None or 0: the full logits.
    ``guard``: the step's finite guard (``train/step.GUARDS``): ``"gradient"`` (the default) decides before the
    update and updates in place, ``"state"`` keeps the previous state while the new one is checked (one state-sized
    temporary); both roll back the same non-finite steps and give bit-identical states.
    ``final_checkpoint``: what :func:`finish_run` keeps of the checkpoints (``train/checkpoint.FINAL_CHECKPOINTS``).
    ``consume``: hand the model's parameter arrays to the run instead of copying them: frozen leaves become the
    state's (no copy), and each trained leaf's buffer is freed once its float32 master exists (a bf16 base model's
    2 B per parameter are not kept alive beside the state). The model is unusable afterwards (its arrays are deleted
    or donated); only for callers that hold no other view of its weights (no EWC anchor, no RHO-1 reference).

    Raises:
      ValueError: naming the flag (``--loss-chunk``, ``--final-checkpoint``, ``--guard``) or the field
        (``consume`` not a bool).
    """

    mesh: Any = None
    loss_chunk: int | None = None
    guard: str = "gradient"
    final_checkpoint: str = "full"
    consume: bool = False

    def __post_init__(self):
        check_run_options(self.loss_chunk, self.final_checkpoint, self.guard)
        if not isinstance(self.consume, bool):
            raise ValueError(f"RunMemory.consume must be a bool, got {self.consume!r}")


@dataclasses.dataclass(frozen=True)
class RunHooks:
    """What a run calls besides the step (:func:`train_lm`'s ``hooks``): ``evaluate_factory(graphdef, rest) →
    evaluate(params, step) → dict`` (its records join the metrics log at the loop's eval interval), and
    ``on_record(record)``, called with every new metrics record (``train/loop.run_loop``; e.g.
    ``train/tracking.py``).

    Raises:
      ValueError: naming the field, for a hook that is not callable.
    """

    evaluate_factory: Callable | None = None
    on_record: Callable | None = None

    def __post_init__(self):
        for name in ("evaluate_factory", "on_record"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"RunHooks.{name} must be callable or None, got {value!r}")


def train_lm(model: nnx.Module, batch_at: Callable[[int], dict], *, update: RunUpdate, loop: LoopConfig,
             folder: RunFolder, objective: RunObjective = RunObjective(), memory: RunMemory = RunMemory(),
             hooks: RunHooks = RunHooks()) -> TrainedRun:
    """Trains ``model`` (resuming from ``folder``'s checkpoints) and returns the run in memory.

    Args:
      model: the NNX model holding the initial parameters.
      batch_at: step → batch (deterministic).
      update: :class:`RunUpdate`, the optimiser settings and what they train.
      loop: the loop settings (``loop.accumulate``: micro-batches per optimiser step, passed to the step builder;
        ``loop.profile``, ``loop.keep_checkpoints``: the loop's trace and retention).
      folder: the run folder (metrics log, checkpoints).
      objective: :class:`RunObjective`, the loss, a penalty and its operands, the compute dtype (default: the
        mean next-token NLL in float32).
      memory: :class:`RunMemory`, the mesh, the loss chunk, the finite guard, what the end keeps, consumption of
        the model's arrays (default: one device, full logits, the ``"gradient"`` guard, every checkpoint kept).
      hooks: :class:`RunHooks`, evaluation and the record callback (default: none).

    The checkpoints hold the ``TrainState`` minus the frozen parameters (``trainable`` False: the run never
    changes them and re-creates them from ``model`` when it resumes; ``train/checkpoint.CheckpointDir.hold``).
    Frozen parameters keep the model's dtype (no float32 master), and the step computes no gradient for them
    (``train/step.trainable_value_and_grad``).
    """
    loss_fn = with_loss_chunk(objective.loss_fn, memory.loss_chunk)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    mask = update.trainable(params) if update.trainable is not None else None
    params = _state_params(params, mask, objective.compute_dtype, memory.consume)
    del model
    held = frozen_paths(params, mask) if mask is not None else ()
    CheckpointDir(folder.checkpoints).hold(tuple(("params", *p) for p in held))
    tx = make_optimizer(update.opt, None, post=update.post_update, core=update.optimizer)
    state, state_sharding = init_state(params, tx if mask is None else masked_tx(tx, mask)), None
    if memory.mesh is not None:
        state, state_sharding, batch_at = _shard(state, batch_at, memory.mesh)
    step = make_train_step(graphdef, rest, tx,
                           loss=Loss(loss_fn=loss_fn, penalty=objective.penalty, compute_dtype=objective.compute_dtype),
                           update=Update(trainable=mask, guard=memory.guard, accumulate=loop.accumulate),
                           placement=Placement(state_sharding=state_sharding))
    step_fn = step if objective.penalty is None else BoundStep(step, objective.penalty_args)
    evaluate = hooks.evaluate_factory(graphdef, rest) if hooks.evaluate_factory is not None else None
    done = run_loop(state, step_fn, batch_at, cfg=loop, out_dir=folder.path, evaluate=evaluate,
                    on_record=hooks.on_record)
    return TrainedRun(done.state, graphdef, rest, done.history, memory.final_checkpoint, held)


def _state_params(params, mask, compute_dtype, consume: bool = False):
    """The parameters the train state starts from: copies (the step donates its state; the caller's arrays stay
    valid), float32 masters of the trained leaves under ``compute_dtype``; frozen leaves (``mask`` False) keep
    their dtype (a bf16 base model's frozen weights stay 2 B per parameter: they are never updated). With
    ``consume`` (:func:`train_lm`) nothing is copied and a cast leaf's original buffer is freed at once."""
    def own(p):
        return p if consume else jnp.copy(p)

    def master(p):  # a new float32 array (astype to the same dtype would hand back the caller's buffer)
        if not (jnp.issubdtype(p.dtype, jnp.floating) and p.dtype != jnp.float32):
            return own(p)
        out = p.astype(jnp.float32)
        if consume:
            out.block_until_ready()
            p.delete()
        return out

    if compute_dtype is None:
        return jax.tree.map(own, params)
    if mask is None:
        return jax.tree.map(master, params)
    return jax.tree.map(lambda m, sub: jax.tree.map(master if trains(m) else own, sub), mask, params)


AUTO_LOSS_CHUNK = 256
"""Predicting rows per chunk of the tiled head loss when a real-model recipe's ``--loss-chunk`` is left unset
(``[256, 8192]`` float32 logit tiles: 8 MiB; docs/models_bench.md measures the peak against the full logits)."""


def resolve_loss_chunk(loss_chunk: int | None, loss_fn) -> int | None:
    """The rows per chunk a real-model run uses: unset (None) → :data:`AUTO_LOSS_CHUNK` when the objective is the
    plain next-token NLL (the only one with a chunked form) and the full logits otherwise; 0 → the full logits;
    n → n (``check_loss_chunk`` refused n with another token objective before anything was written)."""
    if loss_chunk is None:
        return AUTO_LOSS_CHUNK if loss_fn is token_nll_loss else None
    return loss_chunk or None


def check_loss_chunk(loss_chunk: int | None, method, flag: str = "--method") -> None:
    """Before anything is written: ``--loss-chunk N`` computes the plain next-token NLL only, so a method whose
    token loss is another (RHO-1's excess loss reads the full logits) is refused naming both options (left unset,
    such a method runs on the full logits: :func:`resolve_loss_chunk`)."""
    if loss_chunk and method.hooks.token_objective is not None:
        raise ValueError(f"--loss-chunk computes the plain next-token NLL; {flag} {method.name!r} trains with the "
                         f"{method.token_loss} token loss, which needs the full logits (drop --loss-chunk)")


def with_loss_chunk(loss_fn, chunk: int | None):
    """``loss_fn``, or for ``chunk`` the same mean next-token NLL computed in chunks of ``chunk`` predicting rows
    from the final hidden states (``train/step.chunked_token_nll_loss``; equal to the full-logits NLL up to float
    rounding). Only the default objective has a chunked form.

    Raises:
      ValueError: ``chunk`` with another token loss (RHO-1, token weights: they read the full logits).
    """
    if not chunk:  # None or 0: the full logits
        return loss_fn
    if loss_fn is not token_nll_loss:
        raise ValueError(f"--loss-chunk computes the plain next-token NLL; this run's token objective is another "
                         f"({getattr(loss_fn, '__name__', type(loss_fn).__name__)}), which needs the full logits")
    return chunked_token_nll_loss(chunk)


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
    if run.final_checkpoint != "full":  # after final.json: a kill before it leaves the run resumable
        folder.finish_checkpoints(run.final_checkpoint, run.params, run.step, held=run.held)
    return RunResult(final, run.history, run.params, run.graphdef, run.rest)
