"""GPT-NeoX (Pythia) in Flax NNX, ported from HF ``modeling_gpt_neox.py``.

Quirks of the architecture:

* Parallel residual (``use_parallel_residual=True``, all Pythia models):
  ``x + attn(LN1(x)) + mlp(LN2(x))``; when false, the sequential ``y = x + attn(LN1(x)); y + mlp(LN2(y))``.
* Partial RoPE: only the first ``R = int(H * rotary_pct)`` dims of each head rotate (rotate-half layout,
  base ``rotary_emb_base``); the rest pass through. ``int`` truncates (H = 14, pct = 0.33 gives R = 4).
* Biases on every block linear and LayerNorm (``attention_bias`` switches the attention ones); none on
  ``embed_out``.
* Untied ``embed_out`` (HF 5 calls it ``lm_head`` in memory but still saves ``embed_out.weight``); tying is
  supported when ``tie_word_embeddings`` is set (logits = x @ embed_in^T).
* Fused ``query_key_value``: HF interleaves per head, output row ``n*3H + j*H + h`` for j in (q, k, v). The
  converter de-interleaves it, so the NNX kernel's columns are blocked ``[Q | K | V]``, each head-major (N, H).
* Exact (erf) GELU for ``hidden_act="gelu"``; ``gelu_new``-style names use the tanh approximation.
* Attention scale ``1/sqrt(H)``; no GQA (K = N).
"""

from __future__ import annotations

import functools

import flax.nnx as nnx
import jax

from cfka_jax.models import layers
from cfka_jax.models.pythia.config import PythiaConfig
from cfka_jax.shapes import Array, Float

_ACT = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_fast": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


class PythiaAttention(nnx.Module):
    """Fused-QKV self-attention with partial RoPE."""

    def __init__(self, cfg: PythiaConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d = cfg.hidden_size
        self.query_key_value = layers.linear(cfg, d, 3 * d, bias=cfg.attention_bias, rngs=rngs)
        self.dense = layers.linear(cfg, d, d, bias=cfg.attention_bias, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        b, s, d = x_BSD.shape
        n, h = self.cfg.num_attention_heads, self.cfg.head_dim
        qkv_BS3NH = self.query_key_value(x_BSD.reshape(b * s, d)).reshape(b, s, 3, n, h)  # 2-D projection
        q_BSNH = layers.apply_rope(qkv_BS3NH[:, :, 0], ctx.cos, ctx.sin)
        k_BSNH = layers.apply_rope(qkv_BS3NH[:, :, 1], ctx.cos, ctx.sin)
        out_BSNH, probs, kv = layers.cached_attention(q_BSNH, k_BSNH, qkv_BS3NH[:, :, 2], ctx, kv)
        return self.dense(out_BSNH.reshape(b * s, n * h)).reshape(b, s, d), probs, kv


class PythiaMLP(nnx.Module):
    """``dense_4h_to_h(act(dense_h_to_4h(x)))``."""

    def __init__(self, cfg: PythiaConfig, *, rngs: nnx.Rngs):
        self.act = cfg.hidden_act
        self.dense_h_to_4h = layers.linear(cfg, cfg.hidden_size, cfg.intermediate_size, bias=True, rngs=rngs)
        self.dense_4h_to_h = layers.linear(cfg, cfg.intermediate_size, cfg.hidden_size, bias=True, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"]) -> Float[Array, "B S D"]:
        x_TD = x_BSD.reshape(-1, x_BSD.shape[-1])  # 2-D projections: plain matmuls in the weight gradients
        return self.dense_4h_to_h(_ACT[self.act](self.dense_h_to_4h(x_TD))).reshape(x_BSD.shape)


class PythiaLayer(nnx.Module):
    """One GPT-NeoX block (parallel or sequential residual)."""

    def __init__(self, cfg: PythiaConfig, *, rngs: nnx.Rngs):
        self.parallel = cfg.use_parallel_residual
        norm = functools.partial(layers.LayerNorm, cfg.hidden_size, eps=cfg.layer_norm_eps, dtype=cfg.dtype)
        self.input_layernorm = norm(rngs=rngs)
        self.post_attention_layernorm = norm(rngs=rngs)
        self.attention = PythiaAttention(cfg, rngs=rngs)
        self.mlp = PythiaMLP(cfg, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        attn_BSD, probs, kv = self.attention(self.input_layernorm(x_BSD), ctx, kv)
        if self.parallel:
            y_BSD = x_BSD + attn_BSD + self.mlp(self.post_attention_layernorm(x_BSD))
        else:
            y_BSD = x_BSD + attn_BSD
            y_BSD = y_BSD + self.mlp(self.post_attention_layernorm(y_BSD))
        return y_BSD, kv, probs


class PythiaModel(layers.DecoderLM):
    """GPT-NeoX causal LM: ``embed_in``, ``layers``, ``final_layer_norm``, ``embed_out`` (absent when tied)."""

    EMBED, FINAL_NORM, HEAD = "embed_in", "final_layer_norm", "embed_out"

    def __init__(self, cfg: PythiaConfig, *, rngs: nnx.Rngs):
        norm = functools.partial(layers.LayerNorm, eps=cfg.layer_norm_eps, dtype=cfg.dtype)
        self._build(cfg, lambda r: PythiaLayer(cfg, rngs=r), norm, rngs=rngs)

    def _rope(self) -> tuple[int, float]:
        return self.cfg.rotary_dim, self.cfg.rotary_emb_base

    def _kv_shape(self) -> tuple[int, int]:
        return self.cfg.num_key_value_heads, self.cfg.head_dim
