"""Seed ensembles: E copies of one architecture trained in ONE jitted program (``vmap`` over a leading seed axis).

    graphdef, params_E, rest = split_members(models)              # E models of one architecture, stacked
    state = init_ensemble(params_E, tx)                           # TrainState with a leading E axis everywhere
    step = make_train_step(graphdef, rest, tx, ensemble="vmap")   # or make_ensemble_step(graphdef, rest, tx)
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
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from cfka_jax.train.step import ENSEMBLE_MODES, LossFn, TrainState, make_train_step, token_nll_loss


def stack_members(trees: Sequence[Any]) -> Any:
    """Stack E pytrees of identical structure along a new leading axis E."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


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
    """``step(state_E, batch) -> (state_E, metrics_E)``: ``make_train_step(..., ensemble=mode)``.

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
    return make_train_step(graphdef, rest, tx, loss_fn=loss_fn, donate=donate, compute_dtype=compute_dtype,
                           ensemble=mode, shared_batch=shared_batch)


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
