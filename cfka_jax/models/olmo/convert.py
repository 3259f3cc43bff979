"""Strict HF <-> NNX conversion for OLMo: the linear rows of the ``models/gqa.py`` key table, run both ways.

HF keys live under ``model.`` except ``lm_head.weight``. Linear weights are transposed (HF ``[out, in]`` -> kernel
``[in, out]``); biases (``attention_bias``) and the embedding copy as they are. OLMo's LayerNorms have no
parameters, so the table has no norm rows: a norm tensor in a checkpoint is an unused key and fails the load.

Tied embeddings (OLMo-1B): no ``lm_head.weight`` is expected; one present in a tied checkpoint is accepted only if
it equals ``model.embed_tokens.weight`` exactly (it then fills nothing). A stored RoPE ``inv_freq`` buffer is
accepted only if it equals the value recomputed from ``rope_theta``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cfka_jax.models import gqa, hub
from cfka_jax.models.olmo.config import OlmoConfig
from cfka_jax.models.olmo.model import OlmoModel

TRANSFORMS = gqa.TRANSFORMS


def rules(cfg: OlmoConfig) -> list[hub.Rule]:
    """The key table: embedding, q/k/v/o and gate/up/down (biases with ``attention_bias``), untied head."""
    return gqa.linear_rules(cfg)


def extras(cfg: OlmoConfig) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter, each with its check (see the module docstring)."""
    h = cfg.head_size
    return gqa.extras(cfg, 1.0 / np.float64(cfg.rope_theta) ** (np.arange(0, h, 2, dtype=np.float64) / h))


def load(cfg: OlmoConfig, tensors: Mapping[str, np.ndarray]) -> OlmoModel:
    """An :class:`OlmoModel` filled from HF tensors (``hub.load_model``: one error listing every problem)."""
    return hub.load_model(OlmoModel, cfg, tensors, rules(cfg), TRANSFORMS, extras(cfg))


def export(model: OlmoModel) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` (inverse of :func:`load`)."""
    return hub.export_model(model, rules(model.cfg), TRANSFORMS)
