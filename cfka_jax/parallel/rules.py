"""Logical axes of the ports' parameters and the one rule table that maps them to mesh axes.

Two declarative tables, so no model code carries sharding annotations (the idea of MaxText's logical axis rules):

* :data:`PARAM_AXES`: key-path pattern → the logical name of each dimension of the parameter (HF-layout kernels
  are stored ``[in, out]``; Pythia's per-head fused QKV keeps whole heads contiguous, so splitting its output
  dimension over ``tensor`` keeps heads whole when the head count divides);
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

PARAM_AXES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"\['(embed_tokens|embed_in)'\]\['embedding'\]", ("vocab", "embed")),
    (r"\['embed_out'\]\['kernel'\]", ("embed", "vocab")),
    (r"\['(q_proj|k_proj|v_proj|query_key_value)'\]\['kernel'\]", ("embed", "heads")),
    (r"\['(q_proj|k_proj|v_proj|query_key_value)'\]\['bias'\]", ("heads",)),
    (r"\['(o_proj|dense)'\]\['kernel'\]", ("heads", "embed")),
    (r"\['(gate_proj|up_proj|dense_h_to_4h)'\]\['kernel'\]", ("embed", "mlp")),
    (r"\['dense_h_to_4h'\]\['bias'\]", ("mlp",)),
    (r"\['(down_proj|dense_4h_to_h)'\]\['kernel'\]", ("mlp", "embed")),
)
"""Key-path pattern → logical axis name per dimension (first match wins)."""

LOGICAL_RULES: dict[str, str | tuple[str, ...] | None] = {
    "batch": ("data", "fsdp"),
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "mlp": "tensor",
}
"""Logical axis → mesh axis (or axes). ``embed`` over ``fsdp`` shards every weight matrix (FSDP); ``heads``,
``mlp`` and ``vocab`` over ``tensor`` give Megatron-style tensor parallelism; the batch runs over data × fsdp."""


def logical_axes(path: str, ndim: int) -> tuple[str | None, ...]:
    """The logical axis names of a leaf at key path ``path`` (``jax.tree_util.keystr``) with ``ndim`` dims."""
    for pattern, axes in PARAM_AXES:
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


def tree_shardings(tree: Any, mesh: jax.sharding.Mesh, rules: dict = LOGICAL_RULES) -> Any:
    """A pytree of ``NamedSharding`` like ``tree`` (params, optimiser state or a whole ``TrainState``)."""

    def one(path, leaf):
        shape = getattr(leaf, "shape", ())
        return NamedSharding(mesh, spec_for(tuple(shape), logical_axes(jax.tree_util.keystr(path), len(shape)),
                                            mesh, rules))

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
