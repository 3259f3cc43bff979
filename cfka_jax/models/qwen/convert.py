"""Strict HF <-> NNX conversion for Qwen2/Qwen3: the declarative key table of ``models/gqa.py`` run both ways.

HF keys live under ``model.`` except ``lm_head.weight``. Linear weights are transposed (HF ``[out, in]`` ->
kernel ``[in, out]``); biases, norm scales and the embedding copy as they are.

Tied embeddings: no ``lm_head.weight`` is expected; one present in a tied checkpoint is accepted only if it
equals ``model.embed_tokens.weight`` exactly (it then fills nothing), otherwise loading fails. A stored RoPE
``inv_freq`` buffer (older checkpoints) is accepted only if it equals the value recomputed from ``rope_theta``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cfka_jax.models import gqa, hub
from cfka_jax.models.qwen.config import QwenConfig
from cfka_jax.models.qwen.model import QwenModel

TRANSFORMS = gqa.TRANSFORMS
rules = gqa.rules


def extras(cfg: QwenConfig) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter, each with its check (see the module docstring)."""
    h = cfg.head_size
    return gqa.extras(cfg, 1.0 / np.float64(cfg.rope_theta) ** (np.arange(0, h, 2, dtype=np.float64) / h))


def load(cfg: QwenConfig, tensors: Mapping[str, np.ndarray]) -> QwenModel:
    """A :class:`QwenModel` filled from HF tensors (``hub.load_model``: one error listing every problem)."""
    return hub.load_model(QwenModel, cfg, tensors, rules(cfg), TRANSFORMS, extras(cfg))


def export(model: QwenModel) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` (inverse of :func:`load`)."""
    return hub.export_model(model, rules(model.cfg), TRANSFORMS)
