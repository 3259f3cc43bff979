"""Readout and top-block resets as pure parameter-tree surgery (spec §7.4, pitfalls 10–12).

Every reset restores the **pre-CPT base model's weights** (never a re-initialisation, pitfall 11). Modes
(:class:`ResetConfig`), with the release's flags:

===============  =================================================================================================
``readout_only`` ``--rewind_readout_to_base``. Tied model: a new **untied** head holding the base readout; the CPT
                 input embedding is kept and ``tie_word_embeddings=False`` (pitfall 12). Untied model: the base
                 head is copied.
``readout``      ``--reset_embedding_and_readout_to_base_tied`` ("Reset readout" in the figures): the base input
                 embedding is copied and the head re-tied to it. Untied model (Pythia): ``embed_in`` and
                 ``embed_out`` are both restored.
``readout`` +    ``--reset_embedding_readout_and_last_layers_to_base_tied``: ``top_blocks = k`` restores exactly k
``top_blocks``   top blocks (literal k). ``paper_last4=True`` is the figures' "Reset last 4" = the release's
                 ``--reset_last_l_layers 4``, i.e. embedding/readout **+ 3 blocks** (pitfall 10).
===============  =================================================================================================

The functions work on plain nested dicts (``nnx.to_pure_dict(params)``) and return ``(cfg, params)``: a reset can
change the architecture (untying adds a head). :func:`build` merges them into a model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from cfka_jax.geometry.net import names
from cfka_jax.geometry.readout import readout_matrix

MODES = ("none", "readout_only", "readout")


@dataclasses.dataclass(frozen=True)
class ResetConfig:
    """Which reset to apply. ``top_blocks`` needs ``mode='readout'``; ``paper_last4`` means ``top_blocks=3``."""

    mode: str = "none"
    top_blocks: int = 0
    paper_last4: bool = False
    final_norm: bool = False

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"reset mode must be one of {MODES}, got {self.mode!r}")
        if not isinstance(self.top_blocks, int) or self.top_blocks < 0:
            raise ValueError(f"top_blocks must be a non-negative integer, got {self.top_blocks!r}")
        if self.paper_last4 and self.top_blocks:
            raise ValueError("paper_last4 fixes the block count (3); do not also set top_blocks")
        if (self.blocks or self.final_norm) and self.mode != "readout":
            raise ValueError("top-block and final-norm resets extend the 'readout' reset; set mode='readout'")

    @property
    def blocks(self) -> int:
        """The number of top blocks restored (``paper_last4`` → 3, the release's L = 4)."""
        return 3 if self.paper_last4 else self.top_blocks

    @property
    def name(self) -> str:
        if self.mode == "none":
            return "none"
        tail = f"+{self.blocks}blocks" if self.blocks else ""
        return self.mode + tail + ("+norm" if self.final_norm else "")


def _copy(tree):
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


def untie(params: dict, cfg, readout_VD=None) -> tuple[Any, dict]:
    """A tied model as an untied one: the head kernel holds ``readout_VD`` (default: the current W) transposed.

    With the default this is the *functionally untied* model of spec §3.2 (same logits, separate readout copy).
    """
    if not cfg.tie_word_embeddings:
        raise ValueError("untie needs a tied model")
    w = readout_matrix(params, cfg) if readout_VD is None else readout_VD
    out = _copy(params)
    out[names(cfg)["head"]] = {"kernel": jnp.array(w.T, copy=True)}
    return dataclasses.replace(cfg, tie_word_embeddings=False), out


def _restore_readout(cpt: dict, base: dict, cfg_cpt, cfg_base) -> tuple[Any, dict]:
    n = names(cfg_base)
    out = _copy(cpt)
    out[n["embed"]] = _copy(base[n["embed"]])
    if cfg_base.tie_word_embeddings:
        out.pop(n["head"], None)
        return dataclasses.replace(cfg_cpt, tie_word_embeddings=True), out
    out[n["head"]] = _copy(base[n["head"]])
    return dataclasses.replace(cfg_cpt, tie_word_embeddings=False), out


def reset(cpt: dict, base: dict, cfg_cpt, cfg_base, rc: ResetConfig) -> tuple[Any, dict]:
    """``(cfg, params)`` of the CPT model ``cpt`` after the reset ``rc`` towards the base model ``base``."""
    if cfg_cpt.num_hidden_layers != cfg_base.num_hidden_layers or rc.blocks > cfg_base.num_hidden_layers:
        raise ValueError(f"cannot reset {rc.blocks} blocks of a {cfg_cpt.num_hidden_layers}-block model")
    n = names(cfg_base)
    if rc.mode == "none":
        return cfg_cpt, _copy(cpt)
    if rc.mode == "readout_only":
        if cfg_cpt.tie_word_embeddings:
            return untie(cpt, cfg_cpt, readout_matrix(base, cfg_base))
        out = _copy(cpt)
        out[n["head"]] = {"kernel": jnp.array(readout_matrix(base, cfg_base).T, copy=True)}
        return cfg_cpt, out
    cfg, out = _restore_readout(cpt, base, cfg_cpt, cfg_base)
    num = cfg_base.num_hidden_layers
    for layer in range(num - rc.blocks, num):
        out["layers"][layer] = _copy(base["layers"][layer])
    if rc.final_norm:
        out[n["final_norm"]] = _copy(base[n["final_norm"]])
    return cfg, out


def build(model_cls, cfg, params: dict, rest=None) -> nnx.Module:
    """A ``model_cls(cfg)`` holding ``params`` (a plain nested dict); ``rest`` defaults to the empty state."""
    abstract = nnx.eval_shape(lambda: model_cls(cfg, rngs=nnx.Rngs(0)))
    graphdef, abs_params, abs_rest = nnx.split(abstract, nnx.Param, ...)
    if rest is None:
        if jax.tree.leaves(abs_rest):
            raise ValueError("the model holds non-parameter state; pass rest")
        rest = abs_rest
    expected = jax.tree.map(lambda x: (x.shape, x.dtype), nnx.to_pure_dict(abs_params))
    got = jax.tree.map(lambda x: (x.shape, x.dtype), params)
    if expected != got:
        raise ValueError(f"parameters do not fit {model_cls.__name__}({cfg}): structure, shapes or dtypes differ")
    return nnx.merge(graphdef, params, rest)


def reset_model(cpt_model: nnx.Module, base_model: nnx.Module, rc: ResetConfig) -> nnx.Module:
    """The shell: :func:`reset` on two models' parameters, merged into a new model of the resulting config."""
    cpt = nnx.to_pure_dict(nnx.state(cpt_model, nnx.Param))
    base = nnx.to_pure_dict(nnx.state(base_model, nnx.Param))
    cfg, params = reset(cpt, base, cpt_model.cfg, base_model.cfg, rc)
    return build(type(cpt_model), cfg, params)


def functionally_untied(model: nnx.Module) -> nnx.Module:
    """The *functionally untied* copy of a tied port (spec §3.2, ``--readout_sanity functional_untied``): the same
    logits, with the readout a separate tensor (a copy of the embedding) used only by the head."""
    cfg, params = untie(nnx.to_pure_dict(nnx.state(model, nnx.Param)), model.cfg)
    return build(type(model), cfg, params)
