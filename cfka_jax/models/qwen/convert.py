"""Strict HF <-> NNX conversion for Qwen2/Qwen3: a declarative key table run both ways.

HF keys live under ``model.`` except ``lm_head.weight``. Linear weights are transposed (HF ``[out, in]`` ->
kernel ``[in, out]``); biases, norm scales and the embedding copy as they are.

Tied embeddings: no ``lm_head.weight`` is expected; one present in a tied checkpoint is accepted only if it
equals ``model.embed_tokens.weight`` exactly (it then fills nothing), otherwise loading fails.
"""

from __future__ import annotations

from collections.abc import Mapping

import flax.nnx as nnx
import numpy as np

from cfka_jax.models import hub
from cfka_jax.models.qwen.config import QwenConfig
from cfka_jax.models.qwen.model import QwenModel

_L = "model.layers.{i}."
TRANSFORMS: dict[str, hub.Transform] = {"identity": hub.IDENTITY, "transpose": hub.TRANSPOSE}


def rules(cfg: QwenConfig) -> list[hub.Rule]:
    """The key table for ``cfg`` (biases, q/k norms and the head only where the config has them)."""
    table = [
        hub.Rule("model.embed_tokens.weight", "embed_tokens.embedding"),
        hub.Rule("model.norm.weight", "norm.scale"),
        hub.Rule(_L + "input_layernorm.weight", "layers.{i}.input_layernorm.scale"),
        hub.Rule(_L + "post_attention_layernorm.weight", "layers.{i}.post_attention_layernorm.scale"),
    ]
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        table.append(hub.Rule(_L + f"self_attn.{proj}.weight", f"layers.{{i}}.self_attn.{proj}.kernel", "transpose"))
        if cfg.o_bias if proj == "o_proj" else cfg.qkv_bias:
            table.append(hub.Rule(_L + f"self_attn.{proj}.bias", f"layers.{{i}}.self_attn.{proj}.bias"))
    if cfg.qk_norm:
        for norm in ("q_norm", "k_norm"):
            table.append(hub.Rule(_L + f"self_attn.{norm}.weight", f"layers.{{i}}.self_attn.{norm}.scale"))
    for proj in ("gate_proj", "up_proj", "down_proj"):
        table.append(hub.Rule(_L + f"mlp.{proj}.weight", f"layers.{{i}}.mlp.{proj}.kernel", "transpose"))
    if not cfg.tie_word_embeddings:
        table.append(hub.Rule("lm_head.weight", "lm_head.kernel", "transpose"))
    return table


def load(cfg: QwenConfig, tensors: Mapping[str, np.ndarray]) -> QwenModel:
    """A :class:`QwenModel` filled from HF tensors.

    Raises:
        hub.ConversionError: one error listing every unused key, unfilled parameter and shape mismatch.
    """
    abstract = nnx.eval_shape(lambda: QwenModel(cfg, rngs=nnx.Rngs(0)))
    tied = {"lm_head.weight": "model.embed_tokens.weight"} if cfg.tie_word_embeddings else None
    return hub.load_into(
        abstract, tensors, rules(cfg), TRANSFORMS, num_layers=cfg.num_hidden_layers, scan=cfg.scan_layers, tied=tied
    )


def export(model: QwenModel) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` (inverse of :func:`load`)."""
    cfg = model.cfg
    return hub.export_from(model, rules(cfg), TRANSFORMS, num_layers=cfg.num_hidden_layers, scan=cfg.scan_layers)
