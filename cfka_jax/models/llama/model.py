"""Llama (Llama-2, Llama-3/3.1/3.2, TinyLlama) in Flax NNX, ported from HF ``modeling_llama.py``: the shared
rotary GQA / SwiGLU decoder of ``models/gqa.py`` with Llama 3's RoPE scaling.

Quirks of the architecture:

* Pre-norm RMSNorm blocks: ``y = x + attn(RMS1(x)); y + mlp(RMS2(y))``; SwiGLU MLP ``down(silu(gate(x)) * up(x))``
  (``mlp_bias`` puts a bias on all three; no released Llama uses it).
* Grouped-query attention (Llama-3, 3.2, TinyLlama: K < N; Llama-2 7B/13B: K = N): query head n reads KV head
  ``n // (N/K)``; ``attention_bias`` switches the bias of q/k/v *and* o_proj (off in every released Llama).
* Explicit ``head_dim`` allowed (Llama-3.2 writes it; N * H may differ from D).
* Full-width rotate-half RoPE with base ``rope_theta`` (1e4 Llama-2/TinyLlama, 5e5 Llama-3); Llama 3.1/3.2 scale
  the inverse frequencies (``rope_scaling`` of type ``llama3``, :func:`llama3_inv_freq`), with no attention factor.
* Optionally tied embeddings (Llama-3.2 1B/3B): logits = x @ embed_tokens^T and no ``lm_head``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from cfka_jax.models import gqa, layers
from cfka_jax.models.llama.config import Llama3Scaling
from cfka_jax.shapes import Array, Float

F32 = jnp.float32
LlamaAttention, LlamaMLP, LlamaLayer = gqa.Attention, gqa.SwiGLU, gqa.Block


def llama3_inv_freq(inv_freq: Float[Array, " R2"], s: Llama3Scaling) -> Float[Array, " R2"]:
    """The ``llama3`` scaling of RoPE inverse frequencies (:class:`~cfka_jax.models.llama.config.Llama3Scaling`),
    in float32 in HF's order of operations (``transformers.modeling_rope_utils._compute_llama3_parameters``)."""
    old = F32(s.original_max_position_embeddings)
    low_wavelen, high_wavelen = old / F32(s.low_freq_factor), old / F32(s.high_freq_factor)
    wavelen = F32(2 * math.pi) / inv_freq
    scaled = jnp.where(wavelen > low_wavelen, inv_freq / F32(s.factor), inv_freq)
    smooth = (old / wavelen - F32(s.low_freq_factor)) / F32(s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / F32(s.factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return jnp.where(medium, smoothed, scaled)


class LlamaModel(gqa.Decoder):
    """Llama causal LM: ``embed_tokens``, ``layers``, ``norm``, ``lm_head`` (absent when tied)."""

    def rope_frequencies(self) -> Float[Array, " R2"]:
        inv_freq = layers.rope_inv_freq(*self._rope())
        return inv_freq if self.cfg.rope_scaling is None else llama3_inv_freq(inv_freq, self.cfg.rope_scaling)
