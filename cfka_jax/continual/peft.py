"""LoRA adapters and freeze masks for the model ports (spec ``cfka_stoc.md`` §4.4 freeze, §4.6 LoRA).

LoRA replaces each targeted ``nnx.Linear`` attribute (matched by attribute name: ``q_proj``, ``query_key_value``,
``dense``, ...) with a :class:`LoRALinear` holding the original layer as ``base`` plus ``lora_a [D_in, r]``
(uniform in ``±1/sqrt(D_in)``, PEFT's Kaiming-uniform default) and ``lora_b [r, D_out] = 0`` as
``nnx.LoRAParam``::

    y = base(x) + (dropout(x) @ lora_a @ lora_b) * alpha / r

so a fresh adapter leaves the model unchanged. Training selects the adapters with a filter
(:func:`trainable_filter`), either through ``nnx.Optimizer(model, tx, wrt=filter)`` or a split
``nnx.split(model, filter, ...)`` for a pure jitted step; the base kernels are then never touched.

Freezing (§4.4): the input embedding plus blocks ``0 .. N-1``. With tied embeddings (Qwen2.5-0.5B) the frozen
embedding is also the LM head; an untied head (Pythia ``embed_out``) stays trainable. The default LoRA targets and
the embedding's attribute come from the model's family (``models/family.py``: ``lora_targets``, ``embed``).

Scanned models (``scan_layers=True``: the blocks are one module whose parameters are stacked on a leading L axis)
hold both. LoRA wraps the stacked linears with stacked adapters (``lora_a [L, D_in, r]``, ``lora_b [L, r, D_out]``,
made under ``nnx.vmap`` so ``nnx.scan`` hands each block its own); freezing blocks ``0 .. N-1`` becomes a *row
mask* in :func:`trainable_mask` (a 1-D bool array over L on every stacked leaf, ``train/optim.trains``): the
step zeroes the frozen rows' gradients and updates, so they stay bit-identical, while the stacked leaf keeps
its optimiser state for all L rows.

Export: :func:`merge_and_unload` returns a plain model (adapters folded into the kernels) that
``cfka_jax.models.save_pretrained`` writes as an ordinary HF checkpoint. :func:`merge_lora` /
:func:`unmerge_lora` fold the adapters in and out in place (unmerging subtracts, so it is exact only up to
float rounding).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.models import family
from cfka_jax.shapes import Array, Float
from cfka_jax.train.optim import masked_tx  # noqa: F401 (re-exported: the freeze/LoRA optimiser mask)


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """LoRA settings (spec §4.6 project defaults: r = 128, alpha = 256, dropout 0.05, all block linears).

    Attributes:
        rank: adapter rank r.
        alpha: scale numerator; the update is multiplied by ``alpha / rank``.
        dropout: dropout rate on the adapter input (training mode only); 0 disables.
        target_modules: attribute names of the ``nnx.Linear`` layers to adapt; empty means the family default
            (``Family.lora_targets``).
    """

    rank: int = 128
    alpha: float = 256.0
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ()

    def __post_init__(self):
        if self.rank < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if isinstance(self.target_modules, (list, str)):
            names = (self.target_modules,) if isinstance(self.target_modules, str) else self.target_modules
            object.__setattr__(self, "target_modules", tuple(names))

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


class LoRALinear(nnx.Module):
    """``base(x) + (dropout(x) @ lora_a @ lora_b) * scale`` around a frozen ``nnx.Linear``."""

    def __init__(self, base: nnx.Linear, *, rank: int, alpha: float, dropout: float, rngs: nnx.Rngs):
        self.base = base
        d_in, d_out = base.in_features, base.out_features
        dtype = base.kernel[...].dtype
        bound = 1.0 / math.sqrt(d_in)
        self.lora_a = nnx.LoRAParam(jax.random.uniform(rngs.params(), (d_in, rank), dtype, -bound, bound))
        self.lora_b = nnx.LoRAParam(jnp.zeros((rank, d_out), dtype))
        self.scale = alpha / rank
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout > 0 else None
        self.merged = False

    def delta(self) -> Float[Array, "D_in D_out"]:
        """The kernel update ``scale * lora_a @ lora_b`` (computed at float32 matmul precision)."""
        ab = jnp.matmul(self.lora_a[...], self.lora_b[...], precision=jax.lax.Precision.HIGHEST)
        return (ab * self.scale).astype(self.lora_a[...].dtype)

    def __call__(self, x: Float[Array, "... D_in"]) -> Float[Array, "... D_out"]:
        y = self.base(x)
        if self.merged:
            return y
        h = x if self.dropout is None else self.dropout(x)
        h = h.astype(self.lora_a[...].dtype)
        return y + ((h @ self.lora_a[...]) @ self.lora_b[...] * self.scale).astype(y.dtype)


def _scanned(model: nnx.Module) -> bool:
    return bool(getattr(getattr(model, "cfg", None), "scan_layers", False))


def _lora_for(child: nnx.Linear, cfg: LoRAConfig, rngs: nnx.Rngs, stacked: int | None) -> LoRALinear:
    """A :class:`LoRALinear` around ``child``; around a stacked linear (leading axis of ``stacked`` blocks) one
    adapter per block, stacked the same way (made under ``nnx.vmap``, as ``models/layers.make_stacked`` makes
    the blocks)."""
    def make(base, r):
        return LoRALinear(base, rank=cfg.rank, alpha=cfg.alpha, dropout=cfg.dropout, rngs=r)

    if stacked is None:
        return make(child, rngs)
    return nnx.split_rngs(splits=stacked)(nnx.vmap(make, in_axes=(0, 0), out_axes=0))(child, rngs)


def _lora_layers(model: nnx.Module) -> list[LoRALinear]:
    return [m for _, m in nnx.iter_modules(model) if isinstance(m, LoRALinear)]


def apply_lora(model: nnx.Module, cfg: LoRAConfig, *, rngs: nnx.Rngs) -> nnx.Module:
    """Wrap every targeted ``nnx.Linear`` attribute of ``model`` in a :class:`LoRALinear`, in place.

    Returns:
        ``model`` (for chaining).

    Raises:
        ValueError: scanned layers, adapters already present, or a target name that matches no ``nnx.Linear``
            (the message lists the linear attribute names the model has).
    """
    if _lora_layers(model):
        raise ValueError("model already has LoRA adapters")
    targets = cfg.target_modules or family.of(model).lora_targets
    blocks = model.cfg.num_hidden_layers if _scanned(model) else None
    found, linear_names = set(), set()
    for path, module in list(nnx.iter_modules(model)):
        stacked = blocks if blocks is not None and path[:1] == ("layers",) else None
        for name, child in list(vars(module).items()):
            if not isinstance(child, nnx.Linear):
                continue
            linear_names.add(name)
            if name in targets:
                setattr(module, name, _lora_for(child, cfg, rngs, stacked))
                found.add(name)
    missing = sorted(set(targets) - found)
    if missing:
        raise ValueError(f"LoRA target modules {missing} match no nnx.Linear; linear layers: {sorted(linear_names)}")
    return model


def merge_lora(model: nnx.Module) -> nnx.Module:
    """Fold every adapter into its base kernel in place (``kernel += scale * A @ B``); calls skip the adapter."""
    for layer in _lora_layers(model):
        if not layer.merged:
            layer.base.kernel[...] = layer.base.kernel[...] + layer.delta()
            layer.merged = True
    return model


def unmerge_lora(model: nnx.Module) -> nnx.Module:
    """Undo :func:`merge_lora` in place (``kernel -= scale * A @ B``; exact up to float rounding)."""
    for layer in _lora_layers(model):
        if layer.merged:
            layer.base.kernel[...] = layer.base.kernel[...] - layer.delta()
            layer.merged = False
    return model


def merge_and_unload(model: nnx.Module) -> nnx.Module:
    """A copy of ``model`` with every adapter folded in and every :class:`LoRALinear` replaced by its base
    ``nnx.Linear``: the original architecture, ready for ``save_pretrained``. ``model`` is left unchanged."""
    plain = nnx.clone(model)
    merge_lora(plain)
    for _, module in list(nnx.iter_modules(plain)):
        for name, child in list(vars(module).items()):
            if isinstance(child, LoRALinear):
                setattr(module, name, child.base)
    return plain


# ----------------------------------------------------------------------------------------------- freezing


def frozen_filter(model: nnx.Module, *, num_frozen_blocks: int, freeze_embeddings: bool = True) -> nnx.filterlib.Filter:
    """A path filter selecting the input embedding (if ``freeze_embeddings``) and blocks ``0 .. N-1``.

    On a scanned model a block is a row of every stacked leaf, not a path: the filter then selects the embedding
    only and carries ``frozen_rows = N`` and ``blocks = L``, which :func:`trainable_mask` turns into row masks.

    Raises:
        ValueError: N outside ``[0, L]``.
    """
    num_layers = model.cfg.num_hidden_layers
    if not 0 <= num_frozen_blocks <= num_layers:
        raise ValueError(f"num_frozen_blocks must be in [0, {num_layers}], got {num_frozen_blocks}")
    embed = family.of(model).embed if freeze_embeddings else None
    scanned = _scanned(model)

    def frozen(path: tuple, value: Any) -> bool:
        del value
        if embed is not None and path[:1] == (embed,):
            return True
        if scanned:
            return num_frozen_blocks == num_layers and path[:1] == ("layers",)
        return len(path) > 1 and path[0] == "layers" and isinstance(path[1], int) and path[1] < num_frozen_blocks

    if scanned and 0 < num_frozen_blocks < num_layers:
        frozen.frozen_rows, frozen.blocks = num_frozen_blocks, num_layers
    return frozen


def has_lora(model: nnx.Module) -> bool:
    return bool(_lora_layers(model))


def trainable_filter(
    model: nnx.Module, *, num_frozen_blocks: int = 0, freeze_embeddings: bool = False, lora: bool | None = None
) -> nnx.filterlib.Filter:
    """The filter of trainable variables, for ``nnx.Optimizer(model, tx, wrt=...)`` or ``nnx.split``.

    With LoRA (``lora=None`` detects adapters) only ``nnx.LoRAParam`` trains; otherwise every ``nnx.Param``.
    Either way, the embedding (when ``freeze_embeddings``) and blocks ``0 .. num_frozen_blocks-1`` are excluded.
    """
    lora = has_lora(model) if lora is None else lora
    base = nnx.LoRAParam if lora else nnx.Param
    if not num_frozen_blocks and not freeze_embeddings:
        return base
    frozen = frozen_filter(model, num_frozen_blocks=num_frozen_blocks, freeze_embeddings=freeze_embeddings)
    out = nnx.All(base, nnx.Not(frozen))
    if hasattr(frozen, "frozen_rows"):  # a scanned model's frozen blocks: rows, for trainable_mask
        out = _RowFrozen(out, frozen.frozen_rows, frozen.blocks)
    return out


class _RowFrozen:
    """A trainable filter of a scanned model whose first ``rows`` of ``blocks`` stacked blocks are frozen: as a
    filter it selects whole leaves (every stacked leaf trains in some rows); :func:`trainable_mask` reads the rows."""

    def __init__(self, inner, rows: int, blocks: int):
        self.inner, self.rows, self.blocks = inner, rows, blocks
        self._predicate = nnx.filterlib.to_predicate(inner)

    def __call__(self, path: tuple, value: Any) -> bool:
        return bool(self._predicate(path, value))

    def row_mask(self, path: tuple):
        """True / False, or the 1-D row mask (``np.arange(L) >= rows``) of a stacked block leaf."""
        return np.arange(self.blocks) >= self.rows if path[:1] == ("layers",) else True


def trainable_mask(params: nnx.State, trainable: nnx.filterlib.Filter) -> nnx.State:
    """A tree over ``params`` (e.g. ``nnx.state(model, nnx.Param)``): True where ``trainable`` matches, False
    elsewhere, and on a scanned model with frozen blocks a row mask (``train/optim.trains``) on each trained
    stacked leaf."""
    predicate = nnx.filterlib.to_predicate(trainable)
    rows = trainable.row_mask if isinstance(trainable, _RowFrozen) else (lambda path: True)

    def mask(path, v):
        return rows(path) if predicate(path, v) else False

    return nnx.map_state(mask, params)


def merged_params(params: dict, scale: float) -> dict:
    """The base model's parameters (a pure nested dict, ``nnx.to_pure_dict``) seen through LoRA adapters:
    every ``{base: {kernel, bias?}, lora_a, lora_b}`` node becomes ``{kernel: base.kernel + scale·lora_a@lora_b,
    bias?}``. A pure function of the adapters, so a penalty on the effective weights (EWC under LoRA) has
    gradients with respect to ``lora_a`` and ``lora_b``."""
    if not isinstance(params, dict):
        return params
    if {"base", "lora_a", "lora_b"} <= set(params):
        ab = jnp.matmul(params["lora_a"], params["lora_b"], precision=jax.lax.Precision.HIGHEST)
        base = dict(params["base"])
        base["kernel"] = base["kernel"] + (scale * ab).astype(base["kernel"].dtype)
        return base
    return {k: merged_params(v, scale) for k, v in params.items()}
