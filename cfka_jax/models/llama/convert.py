"""Strict HF <-> NNX conversion for Llama: a declarative key table run both ways.

HF keys live under ``model.`` except ``lm_head.weight``. Linear weights are transposed (HF ``[out, in]`` -> kernel
``[in, out]``); biases (``attention_bias``, ``mlp_bias``), norm scales and the embedding copy as they are.

Tied embeddings (Llama-3.2 1B/3B): no ``lm_head.weight`` is expected; one present in a tied checkpoint is accepted
only if it equals ``model.embed_tokens.weight`` exactly (it then fills nothing), otherwise loading fails. A stored
RoPE ``inv_freq`` buffer (older checkpoints) is accepted only if it equals the value recomputed from the config,
llama3 scaling included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import flax.nnx as nnx
import numpy as np

from cfka_jax.models import hub, layers
from cfka_jax.models.llama.config import LlamaConfig
from cfka_jax.models.llama.model import LlamaModel, llama3_inv_freq

_L = "model.layers.{i}."
TRANSFORMS: dict[str, hub.Transform] = {"identity": hub.IDENTITY, "transpose": hub.TRANSPOSE}


def rules(cfg: LlamaConfig) -> list[hub.Rule]:
    """The key table for ``cfg`` (biases and the head only where the config has them)."""
    table = [
        hub.Rule("model.embed_tokens.weight", "embed_tokens.embedding"),
        hub.Rule("model.norm.weight", "norm.scale"),
        hub.Rule(_L + "input_layernorm.weight", "layers.{i}.input_layernorm.scale"),
        hub.Rule(_L + "post_attention_layernorm.weight", "layers.{i}.post_attention_layernorm.scale"),
    ]
    for block, projs, bias in (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj"), cfg.attention_bias),
                               ("mlp", ("gate_proj", "up_proj", "down_proj"), cfg.mlp_bias)):
        for proj in projs:
            table.append(hub.Rule(_L + f"{block}.{proj}.weight", f"layers.{{i}}.{block}.{proj}.kernel", "transpose"))
            if bias:
                table.append(hub.Rule(_L + f"{block}.{proj}.bias", f"layers.{{i}}.{block}.{proj}.bias"))
    if not cfg.tie_word_embeddings:
        table.append(hub.Rule("lm_head.weight", "lm_head.kernel", "transpose"))
    return table


def extras(cfg: LlamaConfig) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter, each with its check (see the module docstring)."""
    inv_freq = layers.rope_inv_freq(cfg.head_size, cfg.rope_theta)
    if cfg.rope_scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, cfg.rope_scaling)
    found = [(r"model\.(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq",
              hub.equals(np.asarray(inv_freq, np.float64)))]
    if cfg.tie_word_embeddings:
        found.append((re.escape("lm_head.weight"), hub.tied_to("model.embed_tokens.weight")))
    return found


def load(cfg: LlamaConfig, tensors: Mapping[str, np.ndarray]) -> LlamaModel:
    """A :class:`LlamaModel` filled from HF tensors.

    Raises:
        hub.ConversionError: one error listing every unused key, unfilled parameter and shape or dtype mismatch
            (an integer or boolean tensor for a float parameter is never cast).
    """
    abstract = nnx.eval_shape(lambda: LlamaModel(cfg, rngs=nnx.Rngs(0)))
    return hub.load_into(abstract, tensors, rules(cfg), TRANSFORMS, num_layers=cfg.num_hidden_layers,
                         scan=cfg.scan_layers, extras=extras(cfg))


def export(model: LlamaModel) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` (inverse of :func:`load`)."""
    cfg = model.cfg
    return hub.export_from(model, rules(cfg), TRANSFORMS, num_layers=cfg.num_hidden_layers, scan=cfg.scan_layers)
