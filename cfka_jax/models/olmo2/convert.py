"""Strict HF <-> NNX conversion for OLMo-2: the linear rows of the ``models/gqa.py`` key table plus OLMo-2's
norms, run both ways.

HF keys live under ``model.`` except ``lm_head.weight``. Linear weights are transposed (HF ``[out, in]`` -> kernel
``[in, out]``); biases (``attention_bias``), norm scales and the embedding copy as they are. The norms of a block
are ``post_attention_layernorm`` and ``post_feedforward_layernorm`` (there is no ``input_layernorm``) and
``self_attn.q_norm`` / ``k_norm`` of widths N*H and K*H; the final norm is ``model.norm``.

Tied embeddings: no ``lm_head.weight`` is expected; one present in a tied checkpoint is accepted only if it equals
``model.embed_tokens.weight`` exactly (it then fills nothing). A stored RoPE ``inv_freq`` buffer is accepted only
if it equals the value recomputed from ``rope_theta``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cfka_jax.models import gqa, hub
from cfka_jax.models.olmo2.config import Olmo2Config
from cfka_jax.models.olmo2.model import Olmo2Model

TRANSFORMS = gqa.TRANSFORMS
BLOCK_NORMS = ("post_attention_layernorm", "post_feedforward_layernorm")


def rules(cfg: Olmo2Config) -> list[hub.Rule]:
    """The key table: embedding, block linears, untied head, the final norm, the block post-norms and q/k norms."""
    norms = [hub.Rule("model.norm.weight", "norm.scale")] + gqa.norm_rules(BLOCK_NORMS)
    return gqa.linear_rules(cfg) + norms + gqa.norm_rules(("q_norm", "k_norm"), block="self_attn.")


def extras(cfg: Olmo2Config) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter, each with its check (see the module docstring)."""
    h = cfg.head_size
    return gqa.extras(cfg, 1.0 / np.float64(cfg.rope_theta) ** (np.arange(0, h, 2, dtype=np.float64) / h))


def load(cfg: Olmo2Config, tensors: Mapping[str, np.ndarray]) -> Olmo2Model:
    """An :class:`Olmo2Model` filled from HF tensors (``hub.load_model``: one error listing every problem)."""
    return hub.load_model(Olmo2Model, cfg, tensors, rules(cfg), TRANSFORMS, extras(cfg))


def export(model: Olmo2Model) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` (inverse of :func:`load`)."""
    return hub.export_model(model, rules(model.cfg), TRANSFORMS)
