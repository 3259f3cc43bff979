"""Logical axes of the ports' parameters and the one rule table that maps them to mesh axes.

Two declarative tables, so no model code carries sharding annotations (the idea of MaxText's logical axis rules):

* the parameter axes: key-path pattern → the logical name of each dimension of the parameter, one table per model
  family (``Family.param_axes`` in ``models/family.py``, registered here by ``register_param_axes``, since this
  layer sits below the models and knows no family; HF-layout kernels are stored ``[in, out]``; Pythia's per-head
  fused QKV keeps whole heads contiguous, so splitting its output dimension over ``tensor`` keeps heads whole when
  the head count divides);
* :data:`LOGICAL_RULES`: logical name → mesh axis (or None = replicated).

A pattern is searched (``re.search``) in the leaf's key path, so the same table places the parameters, the
AdamW moments that mirror them and whole ``TrainState`` pytrees; a leaf with one more leading dimension than its
pattern (scanned layers, ``L`` first) gets a replicated leading axis. A dimension that its mesh axes do not divide
evenly is replicated rather than padded (tiny test models use prime sizes). Unmatched leaves (step counters,
LoRA factors, norms) are replicated.
"""

from __future__ import annotations

import re
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AxesTable = tuple[tuple[str, tuple[str | None, ...]], ...]
"""``(key-path regex, logical axis name per dimension)`` rows; the first row whose pattern matches wins."""

_REGISTERED: dict[str, AxesTable] = {}


def register_param_axes(name: str, table: AxesTable) -> None:
    """Record a model family's parameter-axis rows (called by ``models/family.register``; this layer knows no
    family itself)."""
    for pattern, axes in table:
        re.compile(pattern)
        if not isinstance(axes, tuple):
            raise ValueError(f"family {name!r}: logical axes of {pattern!r} must be a tuple, got {axes!r}")
    _REGISTERED[name] = tuple(table)


def param_axes() -> AxesTable:
    """The rows of every registered family, in registration order (a family's patterns name its own parameter
    paths; two families with the same HF names, Qwen and Llama, give them the same axes).

    Raises:
        ValueError: no family is registered (import ``cfka_jax.models`` first, or pass a table).
    """
    if not _REGISTERED:
        raise ValueError("no model family has registered its parameter axes; import cfka_jax.models first")
    return tuple(row for table in _REGISTERED.values() for row in table)


LOGICAL_RULES: dict[str, str | tuple[str, ...] | None] = {
    "batch": ("data", "fsdp"),
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "mlp": "tensor",
}
"""Logical axis → mesh axis (or axes). ``embed`` over ``fsdp`` shards every weight matrix (FSDP); ``heads``,
``mlp`` and ``vocab`` over ``tensor`` give Megatron-style tensor parallelism; the batch runs over data × fsdp."""


def logical_axes(path: str, ndim: int, table: AxesTable | None = None) -> tuple[str | None, ...]:
    """The logical axis names of a leaf at key path ``path`` (``jax.tree_util.keystr``) with ``ndim`` dims, from
    ``table`` (default: every registered family's, :func:`param_axes`)."""
    for pattern, axes in param_axes() if table is None else table:
        if re.search(pattern, path) and ndim >= len(axes):
            return (None,) * (ndim - len(axes)) + axes
    return (None,) * ndim


def _axis_size(mesh: jax.sharding.Mesh, mesh_axes) -> int:
    names = (mesh_axes,) if isinstance(mesh_axes, str) else mesh_axes
    size = 1
    for name in names:
        size *= mesh.shape[name]
    return size


def spec_for(shape: tuple[int, ...], axes: tuple[str | None, ...], mesh: jax.sharding.Mesh,
             rules: dict = LOGICAL_RULES) -> P:
    """The PartitionSpec of a leaf: each logical axis mapped by ``rules``, replicated where it does not divide."""
    out = []
    for dim, name in zip(shape, axes):
        mesh_axes = rules.get(name) if name is not None else None
        if mesh_axes is None or dim % _axis_size(mesh, mesh_axes) != 0 or _axis_size(mesh, mesh_axes) == 1:
            out.append(None)
        else:
            out.append(mesh_axes)
    return P(*out)


def tree_shardings(tree: Any, mesh: jax.sharding.Mesh, rules: dict = LOGICAL_RULES,
                   table: AxesTable | None = None) -> Any:
    """A pytree of ``NamedSharding`` like ``tree`` (params, optimiser state or a whole ``TrainState``); parameter
    axes from ``table`` (default: every registered family's)."""
    table = param_axes() if table is None else table

    def one(path, leaf):
        shape = getattr(leaf, "shape", ())
        axes = logical_axes(jax.tree_util.keystr(path), len(shape), table)
        return NamedSharding(mesh, spec_for(tuple(shape), axes, mesh, rules))

    return jax.tree_util.tree_map_with_path(one, tree)


def batch_sharding(mesh: jax.sharding.Mesh, rules: dict = LOGICAL_RULES) -> NamedSharding:
    """Rows of a batch over the ``batch`` mesh axes; positions and vocabulary replicated."""
    return NamedSharding(mesh, P(rules["batch"]))


def place(tree: Any, shardings: Any) -> Any:
    """``jax.device_put`` of ``tree`` with a matching pytree of shardings (a single sharding applies to all)."""
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x: jax.device_put(x, shardings), tree)
    return jax.tree.map(jax.device_put, tree, shardings)


def shard_leading(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """Every leaf split along its leading axis over all mesh axes (a sweep's configuration axis).

    Raises:
      ValueError: a leading axis the device count does not divide (pad the grid to a multiple).
    """
    n = mesh.size
    bad = [x.shape for x in jax.tree.leaves(tree) if not x.shape or x.shape[0] % n]
    if bad:
        raise ValueError(f"a sweep sharded over {n} devices needs leading axes divisible by {n}; got shapes {bad}")
    return place(tree, NamedSharding(mesh, P(mesh.axis_names)))
