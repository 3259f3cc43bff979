"""Qwen2/2.5 and Qwen3 in Flax NNX, ported from HF ``modeling_qwen2.py`` and ``modeling_qwen3.py``: the shared
rotary GQA / SwiGLU decoder of ``models/gqa.py``.

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

from cfka_jax.models import gqa

QwenAttention, QwenMLP, QwenLayer = gqa.Attention, gqa.SwiGLU, gqa.Block


class QwenModel(gqa.Decoder):
    """Qwen causal LM: ``embed_tokens``, ``layers``, ``norm``, ``lm_head`` (absent when tied)."""
