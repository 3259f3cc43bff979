"""Qwen2/2.5 and Qwen3 in Flax NNX, ported from HF ``modeling_qwen2.py`` and ``modeling_qwen3.py``.

Quirks of the architecture:

* Pre-norm RMSNorm blocks: ``y = x + attn(RMS1(x)); y + mlp(RMS2(y))``; SwiGLU MLP
  ``down(silu(gate(x)) * up(x))`` without biases.
* Grouped-query attention: N query heads share K KV heads (query head n reads KV head ``n // (N/K)``).
* Qwen2: bias on q/k/v, none on o_proj; ``head_dim = D / N``.
* Qwen3: per-head RMSNorm ``q_norm``/``k_norm`` over H, applied after the projection and *before* RoPE; no
  q/k/v bias by default (``attention_bias`` switches q/k/v *and* o_proj bias); explicit ``head_dim``, so
  q_proj maps D -> N*H and o_proj maps N*H -> D with N*H possibly != D.
* Full-width rotate-half RoPE with base ``rope_theta`` (1e6 for Qwen2.5); scale ``1/sqrt(H)``.
* Optionally tied embeddings (Qwen2.5-0.5B, Qwen3-0.6B): logits = x @ embed_tokens^T and no ``lm_head``.
"""

from __future__ import annotations

import functools

import flax.nnx as nnx
import jax

from cfka_jax.models import layers
from cfka_jax.models.qwen.config import QwenConfig
from cfka_jax.shapes import Array, Float


def _linear(cfg: QwenConfig, d_in: int, d_out: int, *, bias: bool, rngs: nnx.Rngs) -> nnx.Linear:
    init = nnx.initializers.normal(cfg.initializer_range)
    return nnx.Linear(
        d_in, d_out, use_bias=bias, dtype=cfg.dtype, param_dtype=cfg.dtype, kernel_init=init, rngs=rngs
    )


class QwenAttention(nnx.Module):
    """GQA self-attention with separate q/k/v/o projections and (Qwen3) per-head q/k RMSNorm."""

    def __init__(self, cfg: QwenConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, n, k, h = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_size
        self.q_proj = _linear(cfg, d, n * h, bias=cfg.qkv_bias, rngs=rngs)
        self.k_proj = _linear(cfg, d, k * h, bias=cfg.qkv_bias, rngs=rngs)
        self.v_proj = _linear(cfg, d, k * h, bias=cfg.qkv_bias, rngs=rngs)
        self.o_proj = _linear(cfg, n * h, d, bias=cfg.o_bias, rngs=rngs)
        if cfg.qk_norm:
            self.q_norm = layers.RMSNorm(h, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)
            self.k_norm = layers.RMSNorm(h, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        b, s, d = x_BSD.shape
        n, k, h = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_size
        x_TD = x_BSD.reshape(b * s, d)  # 2-D projections: their weight gradients are one plain matmul
        q_BSNH = self.q_proj(x_TD).reshape(b, s, n, h)
        k_BSKH = self.k_proj(x_TD).reshape(b, s, k, h)
        v_BSKH = self.v_proj(x_TD).reshape(b, s, k, h)
        if self.cfg.qk_norm:
            q_BSNH, k_BSKH = self.q_norm(q_BSNH), self.k_norm(k_BSKH)
        q_BSNH = layers.apply_rope(q_BSNH, ctx.cos, ctx.sin)
        k_BSKH = layers.apply_rope(k_BSKH, ctx.cos, ctx.sin)
        out_BSNH, probs, kv = layers.cached_attention(q_BSNH, k_BSKH, v_BSKH, ctx, kv)
        return self.o_proj(out_BSNH.reshape(b * s, n * h)).reshape(b, s, d), probs, kv


class QwenMLP(nnx.Module):
    """SwiGLU: ``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, cfg: QwenConfig, *, rngs: nnx.Rngs):
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = _linear(cfg, d, f, bias=False, rngs=rngs)
        self.up_proj = _linear(cfg, d, f, bias=False, rngs=rngs)
        self.down_proj = _linear(cfg, f, d, bias=False, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"]) -> Float[Array, "B S D"]:
        x_TD = x_BSD.reshape(-1, x_BSD.shape[-1])
        return self.down_proj(jax.nn.silu(self.gate_proj(x_TD)) * self.up_proj(x_TD)).reshape(x_BSD.shape)


class QwenLayer(nnx.Module):
    """One pre-norm decoder block."""

    def __init__(self, cfg: QwenConfig, *, rngs: nnx.Rngs):
        norm = functools.partial(layers.RMSNorm, cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=cfg.dtype)
        self.input_layernorm = norm(rngs=rngs)
        self.post_attention_layernorm = norm(rngs=rngs)
        self.self_attn = QwenAttention(cfg, rngs=rngs)
        self.mlp = QwenMLP(cfg, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        attn_BSD, probs, kv = self.self_attn(self.input_layernorm(x_BSD), ctx, kv)
        y_BSD = x_BSD + attn_BSD
        return y_BSD + self.mlp(self.post_attention_layernorm(y_BSD)), kv, probs


class QwenModel(layers.DecoderLM):
    """Qwen causal LM: ``embed_tokens``, ``layers``, ``norm``, ``lm_head`` (absent when tied)."""

    def __init__(self, cfg: QwenConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        init = nnx.initializers.normal(cfg.initializer_range)
        self.embed_tokens = nnx.Embed(
            cfg.vocab_size, cfg.hidden_size, dtype=cfg.dtype, param_dtype=cfg.dtype, embedding_init=init, rngs=rngs
        )
        if cfg.scan_layers:
            self.layers = layers.make_stacked(lambda r: QwenLayer(cfg, rngs=r), cfg.num_hidden_layers, rngs)
        else:
            self.layers = nnx.List([QwenLayer(cfg, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
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

    def _kv_shape(self) -> tuple[int, int]:
        return self.cfg.num_key_value_heads, self.cfg.head_size
