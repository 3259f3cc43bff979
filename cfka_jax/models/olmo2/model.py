"""OLMo-2 (HF ``model_type`` ``"olmo2"``) in Flax NNX, ported from HF ``modeling_olmo2.py``: the rotary GQA /
SwiGLU modules of ``models/gqa.py`` in a post-norm block, with q/k RMSNorms over the whole projection.

Quirks of the architecture:

* Post-norm *inside* the residual branch: ``y = x + RMS_a(attn(x)); y + RMS_f(mlp(y))``, the norms
  ``post_attention_layernorm`` and ``post_feedforward_layernorm`` applied to the sublayer *outputs*; the
  sublayers read the raw residual stream (no ``input_layernorm``). A final RMSNorm ``norm`` precedes the head.
* q/k RMSNorm over the whole projection: ``q_norm`` has width N*H and ``k_norm`` K*H; both normalise the flat
  projection (statistics over all heads together) *before* it is split into heads, then RoPE. v is not normed.
* OLMo-2's RMSNorm multiplies by its scale in float32 and casts afterwards (``(w * x_hat).to(dtype)``), unlike
  Llama's cast-then-scale; the two agree in float32 and differ by rounding in bfloat16.
* SwiGLU MLP ``down(silu(gate(x)) * up(x))`` without biases; ``attention_bias`` (off in every release) switches
  the bias of q/k/v and o_proj.
* Grouped-query attention possible (OLMo-2 32B: K < N); full-width rotate-half RoPE with base ``rope_theta``
  (5e5 in the releases); scale ``1/sqrt(H)``; optionally tied embeddings.
"""

from __future__ import annotations

import flax.nnx as nnx
import jax
import jax.numpy as jnp

from cfka_jax.models import gqa, layers
from cfka_jax.shapes import Array, Float

F32 = jnp.float32


def olmo2_rms_norm(x: Float[Array, "... D"], scale: Float[Array, " D"], eps: float) -> Float[Array, "... D"]:
    """``scale * x / sqrt(mean(x^2) + eps)`` in float32, cast to x.dtype at the end (HF ``Olmo2RMSNorm``)."""
    xf = x.astype(F32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    return (scale.astype(F32).reshape((1,) * (x.ndim - 1) + scale.shape) * y).astype(x.dtype)


class Olmo2RMSNorm(layers.RMSNorm):
    """RMSNorm with parameter ``scale`` (HF ``weight``), scaled in float32 before the cast."""

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... D"]:
        return olmo2_rms_norm(x, self.scale[...], self.eps)


class Olmo2Attention(gqa.Attention):
    """GQA self-attention with ``q_norm`` (width N*H) and ``k_norm`` (width K*H) on the flat projections."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        super().__init__(cfg, rngs=rngs)
        n, k, h = cfg.num_attention_heads, cfg.kv_heads, cfg.head_size
        self.q_norm = Olmo2RMSNorm(n * h, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)
        self.k_norm = Olmo2RMSNorm(k * h, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)

    def _qkv(self, x_TD: Float[Array, "T D"]) -> tuple[Array, Array, Array]:
        return self.q_norm(self.q_proj(x_TD)), self.k_norm(self.k_proj(x_TD)), self.v_proj(x_TD)


class Olmo2Block(nnx.Module):
    """One post-norm block: ``self_attn`` (:class:`Olmo2Attention`), ``post_attention_layernorm``, ``mlp``
    (SwiGLU), ``post_feedforward_layernorm``."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.self_attn = Olmo2Attention(cfg, rngs=rngs)
        self.mlp = gqa.SwiGLU(cfg, rngs=rngs)
        self.post_attention_layernorm = Olmo2RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=cfg.dtype,
                                                     rngs=rngs)
        self.post_feedforward_layernorm = Olmo2RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=cfg.dtype,
                                                       rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        attn_BSD, probs, kv = self.self_attn(x_BSD, ctx, kv)
        y_BSD = x_BSD + self.post_attention_layernorm(attn_BSD)
        return y_BSD + self.post_feedforward_layernorm(self.mlp(y_BSD)), kv, probs


class Olmo2Model(gqa.Decoder):
    """OLMo-2 causal LM: ``embed_tokens``, ``layers`` (:class:`Olmo2Block`), ``norm``, ``lm_head`` (absent when
    tied)."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        def norm(dim: int, *, rngs: nnx.Rngs) -> Olmo2RMSNorm:
            return Olmo2RMSNorm(dim, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)

        self._build(cfg, lambda r: Olmo2Block(cfg, rngs=r), norm, rngs=rngs)
