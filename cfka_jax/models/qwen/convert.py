"""Strict HF <-> NNX conversion for Qwen2/Qwen3: a declarative key table run both ways.

HF keys live under ``model.`` except ``lm_head.weight``. Linear weights are transposed (HF ``[out, in]`` ->
kernel ``[in, out]``); biases, norm scales and the embedding copy as they are.

Tied embeddings: no ``lm_head.weight`` is expected; one present in a tied checkpoint is accepted only if it
equals ``model.embed_tokens.weight`` exactly (it then fills nothing), otherwise loading fails. A stored RoPE
``inv_freq`` buffer (older checkpoints) is accepted only if it equals the value recomputed from ``rope_theta``.
"""

from __future__ import annotations

import re
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


def extras(cfg: QwenConfig) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter, each with its check (see the module docstring)."""
    h = cfg.head_size
    inv_freq = 1.0 / np.float64(cfg.rope_theta) ** (np.arange(0, h, 2, dtype=np.float64) / h)
    found = [(r"model\.(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq", hub.equals(inv_freq))]
    if cfg.tie_word_embeddings:
        found.append((re.escape("lm_head.weight"), hub.tied_to("model.embed_tokens.weight")))
    return found


def load(cfg: QwenConfig, tensors: Mapping[str, np.ndarray]) -> QwenModel:
    """A :class:`QwenModel` filled from HF tensors.

    Raises:
        hub.ConversionError: one error listing every unused key, unfilled parameter and shape or dtype mismatch
            (an integer or boolean tensor for a float parameter is never cast).
    """
    abstract = nnx.eval_shape(lambda: QwenModel(cfg, rngs=nnx.Rngs(0)))
    return hub.load_into(
        abstract,
        tensors,
        rules(cfg),
        TRANSFORMS,
        num_layers=cfg.num_hidden_layers,
        scan=cfg.scan_layers,
        extras=extras(cfg),
    )


def export(model: QwenModel) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` (inverse of :func:`load`)."""
    cfg = model.cfg
    return hub.export_from(model, rules(cfg), TRANSFORMS, num_layers=cfg.num_hidden_layers, scan=cfg.scan_layers)
