"""Seed ensembles: E copies of one architecture trained in ONE jitted program (``vmap`` over a leading seed axis).

    graphdef, params_E, rest = split_members(models)              # E models of one architecture, stacked
    state = init_ensemble(params_E, tx)                           # TrainState with a leading E axis everywhere
    step = make_train_step(graphdef, rest, tx, placement=Placement(ensemble="vmap"))   # or make_ensemble_step(...)
    state, metrics_E = step(state, batch_E)                       # batch leaves: E B S (per-seed streams)

The step is :func:`~cfka_jax.train.step.make_train_step`'s pure step under ``jax.vmap`` (or ``lax.map``, see
:func:`make_ensemble_step`), jitted once with the state donated — the one step builder's ``ensemble`` form, not a
second builder: member e is the same function of (its state, its
batch) as a lone run, including the finite guard (a member whose update is not finite keeps its previous state;
the others move on). With ``shared_batch`` every member reads the same ``B S`` batch (one stream, in_axes None);
otherwise batch leaves carry the E axis.

Shapes: E members (seeds); the rest as in ``cfka_jax/shapes.py``. When several devices exist,
:func:`member_sharding` splits the E axis over them (a 1-D mesh ``("seed",)``); XLA then runs each device's
members locally, with no communication (members never interact).

Run grids (members that differ in hyperparameters too, ``runs/grid.py``): the per-member numbers are *traced*
values with a leading E axis, so one compiled program serves every member:

    tx_of = lambda sched: grid_tx(opt, sched)                       # AdamW whose learning rate is read from its state
    state = init_grid(params_E, tx_of, stack_members([member_schedule(o) for o in opts]))
    step = make_grid_step(graphdef, rest, tx_of(member_schedule(opt)), in_axes=(0, EWCAnchor(None, None, 0)))
    state, metrics_E = step(state, batch_E, penalty_args)           # λ_E per member, Fisher and anchor shared

* the learning-rate schedule (warm-up, cosine to a floor, constant-then-decay) is :func:`schedule_value`, a pure
  function of (step, :class:`MemberSchedule`) equal to ``optim.lr_schedule`` bit for bit; :func:`grid_tx` is the
  fused clip + AdamW at unit learning rate followed by :func:`scale_by_member_lr`, whose state holds the member's
  schedule. AdamW's update is ``-lr·d`` (d the normalised step plus weight decay), and ``lr·(-1·d)`` rounds the same
  as ``(-lr)·d``, so a member's update equals its lone run's;
* step inputs take per-input ``in_axes`` (0: one per member, None: shared), e.g. the EWC operands with the Fisher
  and anchor shared and λ per member (:func:`make_grid_step`; ``vmap`` or ``lax.map`` over the members).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from cfka_jax.train.optim import OptimConfig, fused_clip_adamw
from cfka_jax.train.step import (ENSEMBLE_MODES, Loss, LossFn, Placement, TrainState, Update, lm_objective,
                                 make_train_step, token_nll_loss)


def stack_members(trees: Sequence[Any]) -> Any:
    """Stack E pytrees of identical structure along a new leading axis E."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def max_rel_diff(a: Any, b: Any) -> float:
    """``max`` over the leaves of two pytrees of ``max |a − b| / max(|a|, |b|)`` (0 for two all-zero leaves): how far
    a member is from its lone run, relative to each leaf's largest entry."""
    out = 0.0
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        size = max(np.max(np.abs(x)), np.max(np.abs(y)))
        out = max(out, float(np.max(np.abs(x - y)) / size) if size > 0 else 0.0)
    return out


def member(tree_E: Any, e: int) -> Any:
    """Member ``e`` of a stacked pytree (the leading axis removed)."""
    return jax.tree.map(lambda x: x[e], tree_E)


def split_members(models: Sequence[nnx.Module]) -> tuple[Any, Any, Any]:
    """``(graphdef, params_E, rest)`` of E models of one architecture.

    Raises:
      ValueError: the models differ in graph (architecture) or in their non-parameter state (``rest`` is shared
        by every member, so it must be identical).
    """
    splits = [nnx.split(m, nnx.Param, ...) for m in models]
    graphdef, _, rest = splits[0]
    for i, (g, _, r) in enumerate(splits[1:], start=1):
        same_rest = jax.tree.structure(r) == jax.tree.structure(rest) and all(
            np.array_equal(a, b) for a, b in zip(jax.tree.leaves(r), jax.tree.leaves(rest)))
        if g != graphdef or not same_rest:
            raise ValueError(f"ensemble member {i} differs from member 0 in architecture or non-parameter state")
    return graphdef, stack_members([p for _, p, _ in splits]), rest


def init_ensemble(params_E: Any, tx: optax.GradientTransformation) -> TrainState:
    """The stacked :class:`TrainState`: ``tx.init`` per member (vmapped), step counters ``E``."""
    num = jax.tree.leaves(params_E)[0].shape[0]
    opt_state = jax.vmap(tx.init)(params_E)
    return TrainState(params_E, opt_state, jnp.zeros((num,), jnp.int32))


def make_ensemble_step(graphdef, rest, tx: optax.GradientTransformation, *, shared_batch: bool = False,
                       loss_fn: LossFn = token_nll_loss, donate: bool = True, compute_dtype=None,
                       mode: str = "vmap"):
    """``step(state_E, batch) -> (state_E, metrics_E)``: ``make_train_step(..., placement=Placement(ensemble=mode))``.

    Args:
      graphdef, rest: the architecture and the shared non-parameter state (:func:`split_members`).
      tx: the optimiser (the same for every member; its state is per member).
      shared_batch: every member reads one ``B S`` batch; else batch leaves are ``E B S``.
      loss_fn, compute_dtype: as in :func:`~cfka_jax.train.step.make_train_step`.
      donate: donate the ensemble state buffers.
      mode: ``vmap`` (batched kernels over E: the form for accelerators, and the one that shards over devices)
        or ``map`` (``lax.map``: the members one after another inside the one program, with the lone run's
        unbatched kernels; XLA:CPU's batched matmuls are slower than its plain ones, ``bench/ensemble.py``).
        Either way member e matches a lone run to float32 rounding, not bit for bit (batched kernels, and a
        step compiled as a loop body, accumulate and fuse differently).
    """
    if mode not in ENSEMBLE_MODES:
        raise ValueError(f"mode must be one of {ENSEMBLE_MODES}, got {mode!r}")
    return make_train_step(graphdef, rest, tx, loss=Loss(loss_fn=loss_fn, compute_dtype=compute_dtype),
                           placement=Placement(donate=donate, ensemble=mode, shared_batch=shared_batch))


def member_sharding(num_members: int, devices: Sequence[jax.Device] | None = None) -> NamedSharding | None:
    """A sharding that splits the leading E axis over ``devices`` (default: all), or None when there is a
    single device or E is not a multiple of the device count (then everything stays on one device)."""
    devices = list(jax.devices() if devices is None else devices)
    if len(devices) < 2 or num_members % len(devices):
        return None
    return NamedSharding(Mesh(np.asarray(devices), ("seed",)), PartitionSpec("seed"))


def shard_members(tree_E: Any, sharding: NamedSharding | None) -> Any:
    """Place every leaf of a stacked pytree with its E axis split by ``sharding`` (identity for None)."""
    if sharding is None:
        return tree_E
    return jax.tree.map(lambda x: jax.device_put(x, sharding), tree_E)


def replicate(tree: Any, sharding: NamedSharding | None) -> Any:
    """Place every leaf of a shared (not per-member) pytree on every device of ``sharding``'s mesh (identity for
    None): the operands every member reads, next to a state split by :func:`member_sharding`."""
    if sharding is None:
        return tree
    full = NamedSharding(sharding.mesh, PartitionSpec())
    return jax.tree.map(lambda x: jax.device_put(x, full), tree)


class MemberSchedule(NamedTuple):
    """One member's learning-rate schedule as float32 numbers (stacked: each field ``E``), the constants of
    ``optim.lr_schedule`` for an :class:`~cfka_jax.train.optim.OptimConfig` (:func:`member_schedule`)."""

    peak_lr: jax.Array
    min_lr: jax.Array
    half_range: jax.Array  # (peak − min)·0.5, rounded once from float64 as lr_schedule's Python arithmetic does
    warmup: jax.Array
    warm_div: jax.Array  # max(warmup, 1)
    decay_start: jax.Array
    decay_span: jax.Array  # max(total − decay_start, 1)


def member_schedule(cfg: OptimConfig) -> MemberSchedule:
    """The numbers of ``cfg``'s schedule (warm-up, cosine or constant-then-decay, floor) as a
    :class:`MemberSchedule`."""
    start = cfg.decay_start
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return MemberSchedule(f32(cfg.peak_lr), f32(cfg.min_lr), f32((cfg.peak_lr - cfg.min_lr) * 0.5),
                          f32(cfg.warmup_steps), f32(max(cfg.warmup_steps, 1)), f32(start),
                          f32(max(cfg.total_steps - start, 1)))


def schedule_value(step: jax.Array, s: MemberSchedule) -> jax.Array:
    """lr(t) = peak·t/warmup for t < warmup, else min + (peak − min)·(1 + cos(π·u))/2 with
    u = clip((t − t_d) / (total − t_d), 0, 1): ``optim.lr_schedule`` with the numbers traced (same float32
    operations in the same order, so the same value bit for bit)."""
    t = jnp.asarray(step, jnp.float32)
    warm = s.peak_lr * t / s.warm_div
    u = jnp.clip((t - s.decay_start) / s.decay_span, 0.0, 1.0)
    cosine = s.min_lr + s.half_range * (1.0 + jnp.cos(jnp.pi * u))
    return jnp.where(t < s.warmup, warm, cosine)


class MemberLRState(NamedTuple):
    """:func:`scale_by_member_lr`'s state: the update count and the member's schedule."""

    count: jax.Array
    schedule: MemberSchedule


def scale_by_member_lr(schedule: MemberSchedule) -> optax.GradientTransformation:
    """Multiplies the update by lr(count) of the schedule held in the state (``init`` stores ``schedule``;
    ``update`` reads the state's, so one compiled update serves members with different schedules)."""

    def init(params):
        del params
        return MemberLRState(jnp.zeros((), jnp.int32), schedule)

    def update(updates, state, params=None):
        del params
        lr = schedule_value(state.count, state.schedule)
        updates = jax.tree.map(lambda u: jnp.asarray(lr, u.dtype) * u, updates)
        return updates, MemberLRState(optax.safe_increment(state.count), state.schedule)

    return optax.GradientTransformation(init, update)


def times_mask(tree: Any, mask: Any) -> Any:
    """``tree`` with each leaf multiplied by its mask entry; ``mask``'s structure is a prefix of ``tree``'s (a
    mask from ``nnx.map_state`` has bare leaves where the parameters have ``nnx.Param`` nodes, which are kept)."""
    leaves, treedef = jax.tree.flatten(mask)
    parts = treedef.flatten_up_to(tree)
    return treedef.unflatten([jax.tree.map(lambda x, m=m: x * jnp.asarray(m, x.dtype), part)
                              for part, m in zip(parts, leaves)])


def mask_by_member(mask: Any) -> optax.GradientTransformation:
    """Multiplies each update leaf by the member's mask (float32 0 / 1 per leaf, held in the state like the
    schedule): a frozen leaf's AdamW update, weight decay included, is exactly zero."""

    def init(params):
        del params
        return mask

    def update(updates, state, params=None):
        del params
        return times_mask(updates, state), state

    return optax.GradientTransformation(init, update)


def float_mask(trainable: Any) -> Any:
    """A trainable mask (bools like the parameters, ``continual/peft.trainable_mask``) as float32 0 / 1 leaves."""
    return jax.tree.map(lambda m: jnp.asarray(m, jnp.float32), trainable)


def masked_value_and_grad(objective: Callable) -> Callable:
    """``value_and_grad(params, *inputs, mask)`` of ``objective(params, *inputs)`` with the gradient multiplied
    by ``mask`` (:func:`float_mask`, one per member): a member's frozen leaves get exactly zero gradient, as a lone
    run's (``train/step.trainable_value_and_grad``), while every member of the one program differentiates the same
    leaves (the members' masks differ: freeze-k per member)."""
    value_and_grad = jax.value_and_grad(objective, has_aux=True)

    def masked(params, *inputs):
        *inputs, mask = inputs
        out, grads = value_and_grad(params, *inputs)
        return out, times_mask(grads, mask)

    return masked


def grid_tx(cfg: OptimConfig, schedule: MemberSchedule, mask: Any = None) -> optax.GradientTransformation:
    """``make_optimizer(cfg)`` (clip + AdamW, float32 state) with the learning rate a traced per-member number:
    the fused clip + AdamW at lr ≡ 1, then :func:`scale_by_member_lr`. Equal to the lone run's update bit for bit
    (module docstring); ``cfg``'s own learning rates are unused (``schedule`` replaces them). With ``mask`` (:func:`float_mask`, per
    member) the update is multiplied by it last (:func:`mask_by_member`); give the step the masked gradient
    (:func:`masked_value_and_grad`) so clipping sees the trained leaves' norm, as a lone masked run's does.

    Raises:
      ValueError: a ``state_dtype`` other than float32 (the unit-rate update is then rounded before scaling).
    """
    if cfg.state_dtype != "float32":
        raise ValueError(f"a run grid keeps the optimiser state in float32, got state_dtype {cfg.state_dtype!r}")
    unit = dataclasses.replace(cfg, peak_lr=1.0, min_lr=1.0, warmup_steps=0, decay="cosine", decay_steps=None)
    return optax.chain(fused_clip_adamw(unit), scale_by_member_lr(schedule),
                       *((mask_by_member(mask),) if mask is not None else ()))


def init_grid(params_E: Any, tx_of: Callable[[Any], optax.GradientTransformation], numbers_E: Any) -> TrainState:
    """The stacked :class:`TrainState` of a grid: member e's optimiser state is ``tx_of(numbers_e).init`` (its
    numbers, e.g. a :class:`MemberSchedule` or ``(schedule, mask)``, stored in it), vmapped; step counters ``E``.
    The state holds copies of the numbers: the step donates it, and the caller may pass the masks as inputs."""
    num = jax.tree.leaves(params_E)[0].shape[0]
    numbers_E = jax.tree.map(jnp.copy, numbers_E)
    opt_state = jax.vmap(lambda p, n: tx_of(n).init(p))(params_E, numbers_E)
    return TrainState(params_E, opt_state, jnp.zeros((num,), jnp.int32))


def _is_axis(a) -> bool:
    return a is None or (isinstance(a, int) and not isinstance(a, bool))


def _part(axes, tree, mapped: bool):
    """The sub-trees of ``tree`` whose axis (a prefix tree of 0 / None) is 0 (``mapped``) or None (the rest), None
    in the other places."""
    return jax.tree.map(lambda a, sub: sub if (a == 0) == mapped else None, axes, tree, is_leaf=_is_axis)


def over_members(lone: Callable, mode: str, in_axes: tuple) -> Callable:
    """``lone(state, *inputs)`` over a leading member axis E of the state and of the inputs whose ``in_axes`` entry
    (a prefix pytree of 0 = per member / None = shared, as ``jax.vmap`` takes) says so: ``vmap`` (batched kernels)
    or ``lax.map`` (the members in turn; the shared parts are closed over, not copied per member).

    Raises:
      ValueError: an unknown mode, or an axis other than 0 / None.
    """
    if mode not in ENSEMBLE_MODES:
        raise ValueError(f"mode must be one of {ENSEMBLE_MODES}, got {mode!r}")
    bad = [a for a in jax.tree.leaves(in_axes, is_leaf=_is_axis) if a not in (0, None)]
    if bad:
        raise ValueError(f"in_axes entries must be 0 (per member) or None (shared), got {bad}")
    if mode == "vmap":
        return lambda state, *inputs: jax.vmap(lone, in_axes=(0, *in_axes))(state, *inputs)

    def body(state, *inputs):
        mapped = [_part(a, x, True) for a, x in zip(in_axes, inputs)]
        shared = [_part(a, x, False) for a, x in zip(in_axes, inputs)]

        def one(args):
            s, m = args
            joined = [jax.tree.map(lambda a, mi, si: mi if a == 0 else si, a, mi, si, is_leaf=_is_axis)
                      for a, mi, si in zip(in_axes, m, shared)]
            return lone(s, *joined)

        return jax.lax.map(one, (state, mapped))

    return body


def make_grid_step(graphdef, rest, tx: optax.GradientTransformation, *, in_axes: tuple = (0,), penalty=None,
                   loss_fn: LossFn = token_nll_loss, trainable=None, compute_dtype=None, mode: str = "vmap",
                   donate: bool = True, member_masks: bool = False):
    """``step(state_E, *inputs) -> (state_E, metrics_E)``: the one step builder's lone step
    (``make_train_step(graphdef, rest, tx, loss=Loss(penalty=, loss_fn=, compute_dtype=),
    update=Update(trainable=))``) over the members
    (:func:`over_members` with ``in_axes``, one per input: the batch and, with a penalty, its operands), jitted once
    with the state donated. ``tx`` is one member's :func:`grid_tx` (its update reads each member's schedule from
    that member's state); build the state with :func:`init_grid` (wrapped in ``optim.masked_tx`` like the step's
    ``tx`` when ``trainable`` is given: ``step.tx`` is the one the step runs).

    ``member_masks``: the members train different leaves (freeze-k per member): the last input is each member's
    :func:`float_mask` (give its ``in_axes`` entry 0), the gradient is masked (:func:`masked_value_and_grad`) and
    ``tx`` must be a masked :func:`grid_tx`; ``trainable`` must then be None."""
    if member_masks:
        if trainable is not None:
            raise ValueError("member_masks and trainable both set which leaves train; give one")
        objective = lm_objective(graphdef, rest, loss_fn=loss_fn, penalty=penalty, compute_dtype=compute_dtype)
        lone = make_train_step(graphdef, rest, tx, loss=Loss(value_and_grad=masked_value_and_grad(objective)),
                               placement=Placement(donate=False))
    else:
        lone = make_train_step(graphdef, rest, tx,
                               loss=Loss(loss_fn=loss_fn, penalty=penalty, compute_dtype=compute_dtype),
                               update=Update(trainable=trainable), placement=Placement(donate=False))
    jitted = jax.jit(over_members(lone, mode, tuple(in_axes)), donate_argnums=(0,) if donate else ())
    jitted.tx = lone.tx
    return jitted
