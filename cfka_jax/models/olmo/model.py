"""OLMo (OLMo-1B/7B, OLMo-7B-0424/0724; HF ``model_type`` ``"olmo"``) in Flax NNX, ported from HF
``modeling_olmo.py``: the rotary GQA / SwiGLU decoder of ``models/gqa.py`` with parameter-free LayerNorms and an
optional clamp of q, k and v.

Quirks of the architecture:

* Pre-norm blocks ``y = x + attn(LN1(x)); y + mlp(LN2(y))`` whose LayerNorms (and the final norm) have *no*
  parameters: ``(x - mean) / sqrt(var + 1e-5)`` over D, statistics in float32, the epsilon fixed at 1e-5 (not a
  config field). The checkpoint holds no norm tensors at all.
* ``clip_qkv = c``: each entry of the q, k and v projections is clamped to ``[-c, c]`` right after its
  projection, before the heads split and before RoPE (OLMo-7B-0424/0724: c = 8).
* SwiGLU MLP ``down(silu(gate(x)) * up(x))`` without biases; ``attention_bias`` (off in every release) switches
  the bias of q/k/v and o_proj.
* Grouped-query attention possible (K = N in every release); full-width rotate-half RoPE with base ``rope_theta``;
  scale ``1/sqrt(H)``.
* Optionally tied embeddings (OLMo-1B): logits = x @ embed_tokens^T and no ``lm_head``.
"""

from __future__ import annotations

from typing import Any

import flax.nnx as nnx
import jax
import jax.numpy as jnp

from cfka_jax.models import gqa
from cfka_jax.models.olmo.config import LAYER_NORM_EPS
from cfka_jax.shapes import Array, Float

F32 = jnp.float32


def plain_layer_norm(x: Float[Array, "... D"], eps: float) -> Float[Array, "... D"]:
    """``(x - mean) / sqrt(var + eps)`` over the last axis, in float32 (biased variance), cast back to x.dtype."""
    xf = x.astype(F32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    return ((xf - mean) * jax.lax.rsqrt(var + eps)).astype(x.dtype)


class PlainLayerNorm(nnx.Module):
    """LayerNorm without scale or bias (HF ``OlmoLayerNorm``); holds no parameters."""

    def __init__(self, dim: int, *, eps: float = LAYER_NORM_EPS, dtype: Any = F32, rngs: nnx.Rngs | None = None):
        del dtype, rngs  # nothing to create: the output has the input's dtype
        self.dim, self.eps = dim, eps

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... D"]:
        return plain_layer_norm(x, self.eps)


class OlmoAttention(gqa.Attention):
    """GQA self-attention whose q, k and v projections are clamped to ``[-clip_qkv, clip_qkv]`` when set."""

    def _qkv(self, x_TD: Float[Array, "T D"]) -> tuple[Array, Array, Array]:
        q_TX, k_TX, v_TX = super()._qkv(x_TD)
        c = self.cfg.clip_qkv
        if c is None:
            return q_TX, k_TX, v_TX
        return jnp.clip(q_TX, -c, c), jnp.clip(k_TX, -c, c), jnp.clip(v_TX, -c, c)


class OlmoBlock(gqa.Block):
    """One pre-norm block: ``input_layernorm`` and ``post_attention_layernorm`` parameter-free, ``self_attn``
    (:class:`OlmoAttention`), ``mlp`` (SwiGLU); the residual form of ``gqa.Block``."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.input_layernorm = PlainLayerNorm(cfg.hidden_size)
        self.post_attention_layernorm = PlainLayerNorm(cfg.hidden_size)
        self.self_attn = OlmoAttention(cfg, rngs=rngs)
        self.mlp = gqa.SwiGLU(cfg, rngs=rngs)


class OlmoModel(gqa.Decoder):
    """OLMo causal LM: ``embed_tokens``, ``layers`` (:class:`OlmoBlock`), ``norm`` (parameter-free), ``lm_head``
    (absent when tied)."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self._build(cfg, lambda r: OlmoBlock(cfg, rngs=r), PlainLayerNorm, rngs=rngs)
