"""Strict HF <-> NNX conversion for Llama: the declarative key table of ``models/gqa.py`` run both ways.

HF keys live under ``model.`` except ``lm_head.weight``. Linear weights are transposed (HF ``[out, in]`` -> kernel
``[in, out]``); biases (``attention_bias``, ``mlp_bias``), norm scales and the embedding copy as they are.

Tied embeddings (Llama-3.2 1B/3B): no ``lm_head.weight`` is expected; one present in a tied checkpoint is accepted
only if it equals ``model.embed_tokens.weight`` exactly (it then fills nothing), otherwise loading fails. A stored
RoPE ``inv_freq`` buffer (older checkpoints) is accepted only if it equals the value recomputed from the config,
llama3 scaling included.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cfka_jax.models import gqa, hub, layers
from cfka_jax.models.llama.config import LlamaConfig
from cfka_jax.models.llama.model import LlamaModel, llama3_inv_freq

TRANSFORMS = gqa.TRANSFORMS
rules = gqa.rules


def extras(cfg: LlamaConfig) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter, each with its check (see the module docstring)."""
    inv_freq = layers.rope_inv_freq(cfg.head_size, cfg.rope_theta)
    if cfg.rope_scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, cfg.rope_scaling)
    return gqa.extras(cfg, np.asarray(inv_freq, np.float64))


def load(cfg: LlamaConfig, tensors: Mapping[str, np.ndarray]) -> LlamaModel:
    """A :class:`LlamaModel` filled from HF tensors (``hub.load_model``: one error listing every problem)."""
    return hub.load_model(LlamaModel, cfg, tensors, rules(cfg), TRANSFORMS, extras(cfg))


def export(model: LlamaModel) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` (inverse of :func:`load`)."""
    return hub.export_model(model, rules(model.cfg), TRANSFORMS)
