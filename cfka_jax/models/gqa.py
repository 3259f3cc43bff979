"""The decoder Qwen2/2.5, Qwen3 and Llama share: pre-norm RMSNorm blocks, rotary grouped-query attention with
separate q/k/v/o projections, a SwiGLU MLP; its HF key table and its registry facts.

The architecture, as HF ``modeling_qwen2.py`` / ``modeling_qwen3.py`` / ``modeling_llama.py`` compute it:

* block: ``y = x + attn(RMS1(x)); y + mlp(RMS2(y))``; MLP ``down_proj(silu(gate_proj(x)) * up_proj(x))``;
* attention: N query heads share K KV heads (query head n reads KV head ``n // (N/K)``); q/k/v project D -> N*H,
  K*H, K*H and o_proj N*H -> D (N*H may differ from D with an explicit ``head_dim``); an optional per-head
  RMSNorm over H on q and k (Qwen3's ``q_norm`` / ``k_norm``) comes after the projection and *before* the
  full-width rotate-half RoPE; scale ``1/sqrt(H)``;
* optionally tied embeddings: logits = x @ embed_tokens^T and no ``lm_head``.

A family's config provides what the modules read: the HF sizes (``hidden_size``, ``intermediate_size``,
``num_hidden_layers``, ``num_attention_heads``, ``vocab_size``), ``kv_heads`` (K) and ``head_size`` (H),
``rms_norm_eps``, ``rope_theta``, ``hidden_act``, ``tie_word_embeddings``, the bias switches ``qkv_bias``,
``o_bias`` and ``mlp_bias``, ``qk_norm``, and the non-HF ``dtype``, ``initializer_range``, ``scan_layers``,
``remat``, ``attention_kind``, ``attention_impl``. Each family folder keeps its config, its RoPE frequencies
(:class:`Decoder` subclasses override ``rope_frequencies`` for scaled RoPE) and its registry entry
(:func:`family`). A family whose blocks differ reuses the modules by subclassing: ``Attention._qkv`` transforms the
flat projections before the heads split (OLMo's q/k/v clamp, OLMo-2's whole-projection q/k norms), a block or
decoder brings its own norms, and its key table is :func:`linear_rules` plus its :func:`norm_rules`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import flax.nnx as nnx
import jax
import numpy as np

from cfka_jax.models import hub, layers
from cfka_jax.models.family import Family, Traits
from cfka_jax.shapes import Array, Float

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PARAM_AXES = (
    (r"\['embed_tokens'\]\['embedding'\]", ("vocab", "embed")),
    (r"\['(q_proj|k_proj|v_proj)'\]\['kernel'\]", ("embed", "heads")),
    (r"\['(q_proj|k_proj|v_proj)'\]\['bias'\]", ("heads",)),
    (r"\['o_proj'\]\['kernel'\]", ("heads", "embed")),
    (r"\['(gate_proj|up_proj)'\]\['kernel'\]", ("embed", "mlp")),
    (r"\['(gate_proj|up_proj)'\]\['bias'\]", ("mlp",)),
    (r"\['down_proj'\]\['kernel'\]", ("mlp", "embed")),
)
"""Logical axes of the parameters (``parallel/rules``); HF-layout kernels are ``[in, out]``."""
TRANSFORMS: dict[str, hub.Transform] = {"identity": hub.IDENTITY, "transpose": hub.TRANSPOSE}
_L = "model.layers.{i}."


class Attention(nnx.Module):
    """GQA self-attention with separate q/k/v/o projections and optional per-head q/k RMSNorm."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, n, k, h = cfg.hidden_size, cfg.num_attention_heads, cfg.kv_heads, cfg.head_size
        self.q_proj = layers.linear(cfg, d, n * h, bias=cfg.qkv_bias, rngs=rngs)
        self.k_proj = layers.linear(cfg, d, k * h, bias=cfg.qkv_bias, rngs=rngs)
        self.v_proj = layers.linear(cfg, d, k * h, bias=cfg.qkv_bias, rngs=rngs)
        self.o_proj = layers.linear(cfg, n * h, d, bias=cfg.o_bias, rngs=rngs)
        if cfg.qk_norm:
            self.q_norm = layers.RMSNorm(h, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)
            self.k_norm = layers.RMSNorm(h, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)

    def _qkv(self, x_TD: Float[Array, "T D"]) -> tuple[Array, Array, Array]:
        """The flat projections q ``[T, N*H]``, k and v ``[T, K*H]`` of the flattened tokens, before the heads
        split (a family transforms them here: OLMo's clamp, OLMo-2's whole-projection norms)."""
        return self.q_proj(x_TD), self.k_proj(x_TD), self.v_proj(x_TD)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        b, s, d = x_BSD.shape
        n, k, h = self.cfg.num_attention_heads, self.cfg.kv_heads, self.cfg.head_size
        x_TD = x_BSD.reshape(b * s, d)  # 2-D projections: their weight gradients are one plain matmul
        q_TX, k_TX, v_TX = self._qkv(x_TD)
        q_BSNH, k_BSKH, v_BSKH = q_TX.reshape(b, s, n, h), k_TX.reshape(b, s, k, h), v_TX.reshape(b, s, k, h)
        if self.cfg.qk_norm:
            q_BSNH, k_BSKH = self.q_norm(q_BSNH), self.k_norm(k_BSKH)
        q_BSNH = layers.apply_rope(q_BSNH, ctx.cos, ctx.sin)
        k_BSKH = layers.apply_rope(k_BSKH, ctx.cos, ctx.sin)
        out_BSNH, probs, kv = layers.cached_attention(q_BSNH, k_BSKH, v_BSKH, ctx, kv)
        return self.o_proj(out_BSNH.reshape(b * s, n * h)).reshape(b, s, d), probs, kv


class SwiGLU(nnx.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))`` (biases on all three with ``mlp_bias``)."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        d, f, bias = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = layers.linear(cfg, d, f, bias=bias, rngs=rngs)
        self.up_proj = layers.linear(cfg, d, f, bias=bias, rngs=rngs)
        self.down_proj = layers.linear(cfg, f, d, bias=bias, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"]) -> Float[Array, "B S D"]:
        x_TD = x_BSD.reshape(-1, x_BSD.shape[-1])
        return self.down_proj(jax.nn.silu(self.gate_proj(x_TD)) * self.up_proj(x_TD)).reshape(x_BSD.shape)


class Block(nnx.Module):
    """One pre-norm decoder block: ``input_layernorm``, ``self_attn``, ``post_attention_layernorm``, ``mlp``."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        norm = functools.partial(layers.RMSNorm, cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=cfg.dtype)
        self.input_layernorm = norm(rngs=rngs)
        self.post_attention_layernorm = norm(rngs=rngs)
        self.self_attn = Attention(cfg, rngs=rngs)
        self.mlp = SwiGLU(cfg, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        attn_BSD, probs, kv = self.self_attn(self.input_layernorm(x_BSD), ctx, kv)
        y_BSD = x_BSD + attn_BSD
        return y_BSD + self.mlp(self.post_attention_layernorm(y_BSD)), kv, probs


class Decoder(layers.DecoderLM):
    """The causal LM: ``embed_tokens``, ``layers`` (:class:`Block`), ``norm``, ``lm_head`` (absent when tied)."""

    EMBED, FINAL_NORM, HEAD = "embed_tokens", "norm", "lm_head"

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        norm = functools.partial(layers.RMSNorm, eps=cfg.rms_norm_eps, dtype=cfg.dtype)
        self._build(cfg, lambda r: Block(cfg, rngs=r), norm, rngs=rngs)

    def _rope(self) -> tuple[int, float]:
        return self.cfg.head_size, self.cfg.rope_theta

    def _kv_shape(self) -> tuple[int, int]:
        return self.cfg.kv_heads, self.cfg.head_size


# ------------------------------------------------------------------------------------------ HF keys and registry


def rules(cfg) -> list[hub.Rule]:
    """The HF key table (keys under ``model.`` except ``lm_head.weight``; linear weights transposed, HF ``[out,
    in]`` -> kernel ``[in, out]``): biases, q/k norms and the head only where the config has them."""
    table = [hub.Rule("model.norm.weight", "norm.scale")]
    table += norm_rules(("input_layernorm", "post_attention_layernorm"))
    if cfg.qk_norm:
        table += norm_rules(("q_norm", "k_norm"), block="self_attn.")
    return linear_rules(cfg) + table


def norm_rules(names: tuple[str, ...], block: str = "") -> list[hub.Rule]:
    """Rules copying the scale (HF ``weight``) of each block norm ``model.layers.{i}.<block><name>``."""
    return [hub.Rule(_L + f"{block}{name}.weight", f"layers.{{i}}.{block}{name}.scale") for name in names]


def linear_rules(cfg) -> list[hub.Rule]:
    """The embedding, the block linears (q/k/v/o, gate/up/down; biases as ``qkv_bias``, ``o_bias``,
    ``mlp_bias``) and the untied head: the rows every decoder on these modules shares, whatever its norms."""
    table = [hub.Rule("model.embed_tokens.weight", "embed_tokens.embedding")]
    projs = [("self_attn", p, cfg.qkv_bias) for p in ("q_proj", "k_proj", "v_proj")]
    projs += [("self_attn", "o_proj", cfg.o_bias)]
    for block, proj, bias in projs + [("mlp", p, cfg.mlp_bias) for p in ("gate_proj", "up_proj", "down_proj")]:
        table.append(hub.Rule(_L + f"{block}.{proj}.weight", f"layers.{{i}}.{block}.{proj}.kernel", "transpose"))
        if bias:
            table.append(hub.Rule(_L + f"{block}.{proj}.bias", f"layers.{{i}}.{block}.{proj}.bias"))
    if not cfg.tie_word_embeddings:
        table.append(hub.Rule("lm_head.weight", "lm_head.kernel", "transpose"))
    return table


def extras(cfg, inv_freq: np.ndarray) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter: a stored RoPE ``inv_freq`` buffer (older checkpoints) only
    if it equals ``inv_freq``; with tied embeddings an ``lm_head.weight`` only if it equals the embedding."""
    found = [(r"model\.(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq", hub.equals(inv_freq))]
    if cfg.tie_word_embeddings:
        found.append((re.escape("lm_head.weight"), hub.tied_to("model.embed_tokens.weight")))
    return found


def traits(name: str, cfg, **changes) -> Traits:
    """RMSNorm, sequential residual, full-width RoPE, separate q/k/v/o, SwiGLU; biases and q/k norms as ``cfg``;
    ``changes`` replace any of these (a family's own norms, norm position, q/k clamp)."""
    eps = changes.pop("norm_eps") if "norm_eps" in changes else cfg.rms_norm_eps
    fields = dict(family=name, tied=cfg.tie_word_embeddings, norm="rmsnorm", norm_eps=eps, parallel_residual=False,
                  head_dim=cfg.head_size, kv_heads=cfg.kv_heads, rotary_dim=cfg.head_size, qk_norm=cfg.qk_norm,
                  qkv="separate", mlp="swiglu", hidden_act=cfg.hidden_act, attn="self_attn", mlp_bias=cfg.mlp_bias)
    return Traits(**{**fields, **changes})


def family(name: str, model_types: tuple[str, ...], config_cls: type, model_cls: type[Decoder], *,
           load: Callable, export: Callable, from_size: Callable, traits_of: Callable | None = None) -> Family:
    """The registry entry of a family built on this decoder (register it with ``family.register``);
    ``traits_of(cfg)`` replaces :func:`traits` for a family whose norms or attention differ."""
    return Family(name=name, model_types=model_types, config_cls=config_cls, model_cls=model_cls, load=load,
                  export=export, from_size=from_size, traits=traits_of or functools.partial(traits, name),
                  embed=model_cls.EMBED, head=model_cls.HEAD, final_norm=model_cls.FINAL_NORM,
                  lora_targets=LORA_TARGETS, param_axes=PARAM_AXES)
