"""Llama (Llama-2, Llama-3/3.1/3.2, TinyLlama) in Flax NNX, ported from HF ``modeling_llama.py``.

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

import functools
import math

import flax.nnx as nnx
import jax
import jax.numpy as jnp

from cfka_jax.models import layers
from cfka_jax.models.llama.config import Llama3Scaling, LlamaConfig
from cfka_jax.shapes import Array, Float

F32 = jnp.float32


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


def _linear(cfg: LlamaConfig, d_in: int, d_out: int, *, bias: bool, rngs: nnx.Rngs) -> nnx.Linear:
    init = nnx.initializers.normal(cfg.initializer_range)
    return nnx.Linear(d_in, d_out, use_bias=bias, dtype=cfg.dtype, param_dtype=cfg.dtype, kernel_init=init,
                      rngs=rngs)


class LlamaAttention(nnx.Module):
    """GQA self-attention with separate q/k/v/o projections."""

    def __init__(self, cfg: LlamaConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, n, k, h, bias = cfg.hidden_size, cfg.num_attention_heads, cfg.kv_heads, cfg.head_size, cfg.attention_bias
        self.q_proj = _linear(cfg, d, n * h, bias=bias, rngs=rngs)
        self.k_proj = _linear(cfg, d, k * h, bias=bias, rngs=rngs)
        self.v_proj = _linear(cfg, d, k * h, bias=bias, rngs=rngs)
        self.o_proj = _linear(cfg, n * h, d, bias=bias, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        b, s, d = x_BSD.shape
        n, k, h = self.cfg.num_attention_heads, self.cfg.kv_heads, self.cfg.head_size
        x_TD = x_BSD.reshape(b * s, d)
        q_BSNH = layers.apply_rope(self.q_proj(x_TD).reshape(b, s, n, h), ctx.cos, ctx.sin)
        k_BSKH = layers.apply_rope(self.k_proj(x_TD).reshape(b, s, k, h), ctx.cos, ctx.sin)
        v_BSKH = self.v_proj(x_TD).reshape(b, s, k, h)
        out_BSNH, probs, kv = layers.cached_attention(q_BSNH, k_BSKH, v_BSKH, ctx, kv)
        return self.o_proj(out_BSNH.reshape(b * s, n * h)).reshape(b, s, d), probs, kv


class LlamaMLP(nnx.Module):
    """SwiGLU: ``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, cfg: LlamaConfig, *, rngs: nnx.Rngs):
        d, f, bias = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = _linear(cfg, d, f, bias=bias, rngs=rngs)
        self.up_proj = _linear(cfg, d, f, bias=bias, rngs=rngs)
        self.down_proj = _linear(cfg, f, d, bias=bias, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"]) -> Float[Array, "B S D"]:
        x_TD = x_BSD.reshape(-1, x_BSD.shape[-1])
        return self.down_proj(jax.nn.silu(self.gate_proj(x_TD)) * self.up_proj(x_TD)).reshape(x_BSD.shape)


class LlamaLayer(nnx.Module):
    """One pre-norm decoder block."""

    def __init__(self, cfg: LlamaConfig, *, rngs: nnx.Rngs):
        norm = functools.partial(layers.RMSNorm, cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=cfg.dtype)
        self.input_layernorm = norm(rngs=rngs)
        self.post_attention_layernorm = norm(rngs=rngs)
        self.self_attn = LlamaAttention(cfg, rngs=rngs)
        self.mlp = LlamaMLP(cfg, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        attn_BSD, probs, kv = self.self_attn(self.input_layernorm(x_BSD), ctx, kv)
        y_BSD = x_BSD + attn_BSD
        return y_BSD + self.mlp(self.post_attention_layernorm(y_BSD)), kv, probs


class LlamaModel(layers.DecoderLM):
    """Llama causal LM: ``embed_tokens``, ``layers``, ``norm``, ``lm_head`` (absent when tied)."""

    def __init__(self, cfg: LlamaConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        init = nnx.initializers.normal(cfg.initializer_range)
        self.embed_tokens = nnx.Embed(cfg.vocab_size, cfg.hidden_size, dtype=cfg.dtype, param_dtype=cfg.dtype,
                                      embedding_init=init, rngs=rngs)
        if cfg.scan_layers:
            self.layers = layers.make_stacked(lambda r: LlamaLayer(cfg, rngs=r), cfg.num_hidden_layers, rngs)
        else:
            self.layers = nnx.List([LlamaLayer(cfg, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
        self.norm = layers.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)
        if not cfg.tie_word_embeddings:
            self.lm_head = _linear(cfg, cfg.hidden_size, cfg.vocab_size, bias=False, rngs=rngs)

    def _head(self, x_BSD: Float[Array, "B S D"]) -> Float[Array, "B S V"]:
        return self.embed_tokens.attend(x_BSD) if self.cfg.tie_word_embeddings else self.lm_head(x_BSD)

    def _embed(self):
        return self.embed_tokens

    def _final_norm(self):
        return self.norm

    def _rope(self) -> tuple[int, float]:
        return self.cfg.head_size, self.cfg.rope_theta

    def rope_frequencies(self) -> Float[Array, " R2"]:
        inv_freq = layers.rope_inv_freq(*self._rope())
        return inv_freq if self.cfg.rope_scaling is None else llama3_inv_freq(inv_freq, self.cfg.rope_scaling)

    def _kv_shape(self) -> tuple[int, int]:
        return self.cfg.kv_heads, self.cfg.head_size
