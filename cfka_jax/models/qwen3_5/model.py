"""Qwen3.5 (HF ``model_type`` ``"qwen3_5_text"``) in Flax NNX, ported from HF ``modeling_qwen3_5.py``: a hybrid of
Gated DeltaNet (linear attention) layers and gated full-attention layers.

Letters: ``cfka_jax.shapes`` (B S T D N K H F V L, A the rotary width) plus, in the linear layers, U value heads,
G key heads, Y key head dim, W value head dim, Z conv kernel width, C = 2GY + UW conv channels.

Quirks of the architecture:

* Pre-norm blocks ``y = x + mix(RMS1(x)); y + mlp(RMS2(y))`` where ``mix`` is ``linear_attn`` or ``self_attn`` as
  ``layer_types[i]`` says (default: every 4th layer full attention); SwiGLU MLP without biases.
* Zero-centred RMSNorm (:class:`CenteredRMSNorm`): ``x̂ · (1 + w)`` in float32, then cast; ``w`` initialised to
  0. Every block norm, the final norm and the full-attention ``q_norm`` / ``k_norm`` are of this kind.
* Full attention (:class:`GatedAttention`): ``q_proj`` maps D -> N·2H, laid out per head as ``[q_n | gate_n]``;
  per-head ``q_norm`` / ``k_norm`` over H, then partial rotate-half RoPE on the first A = ``int(H ·
  partial_rotary_factor)`` dims (0.25 by default); GQA softmax attention, scale ``1/sqrt(H)``; the output is
  multiplied by ``sigmoid(gate)`` before ``o_proj``. ``attention_bias`` switches the q/k/v/o biases.
* Gated DeltaNet (:class:`GatedDeltaNet`): ``in_proj_qkv`` (D -> C), ``in_proj_z`` (D -> UW), ``in_proj_b`` and
  ``in_proj_a`` (D -> U); a causal depthwise convolution of width Z with SiLU over the C channels (``conv1d``, no
  bias), split into q (GY), k (GY), v (UW); ``β = sigmoid(b)``, ``g = −exp(A_log) · softplus(a + dt_bias)``
  (``α = e^g``); the gated delta rule ``S_t = α_t S_{t-1}(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ``, ``o_t = S_t q_t``
  on L2-normalised q, k (``delta.py``); a gated RMSNorm per value head ``w · x̂ · silu(z)`` (``norm``, weight
  initialised to 1, *not* zero-centred); ``out_proj`` (UW -> D).
* The linear layers read no positions; padding tokens (``attention_mask`` 0) are zeroed before the layer (as HF)
  and leave its recurrent state unchanged.
* Optionally tied embeddings.

Caching: :class:`HybridCache` holds the full-attention layers' keys and values (a ``KVCache``'s fields) and, per
linear layer, the conv state (the last Z − 1 conv inputs) and the delta state ``Sᵀ`` (``B U Y W``, float32).
A call with a cache and one new token runs the recurrent form of the delta rule; any other call the chunked
form (``cfg.chunk_size``), started from the cached state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.nnx as nnx
import flax.struct
import jax
import jax.numpy as jnp

from cfka_jax.models import gqa, layers
from cfka_jax.models.outputs import ModelOutput
from cfka_jax.models.qwen3_5 import delta
from cfka_jax.shapes import Array, Bool, Float, Int

F32 = jnp.float32


def centered_rms_norm(x: Float[Array, "... D"], scale: Float[Array, " D"], eps: float) -> Float[Array, "... D"]:
    """``x / sqrt(mean(x²) + eps) · (1 + scale)`` in float32, cast to x.dtype at the end (HF ``Qwen3_5RMSNorm``)."""
    xf = x.astype(F32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    gain = (1.0 + scale.astype(F32)).reshape((1,) * (x.ndim - 1) + scale.shape)
    return (y * gain).astype(x.dtype)


class CenteredRMSNorm(nnx.Module):
    """Zero-centred RMSNorm with parameter ``scale`` (HF ``weight``), initialised to 0 (a gain of 1)."""

    def __init__(self, dim: int, *, eps: float, dtype: Any = F32, rngs: nnx.Rngs):
        del rngs
        self.eps = eps
        self.scale = nnx.Param(jnp.zeros((dim,), dtype))

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... D"]:
        return centered_rms_norm(x, self.scale[...], self.eps)


class GatedRMSNorm(nnx.Module):
    """``w · x̂ · silu(z)`` over the last axis (HF ``Qwen3_5RMSNormGated``): normalise in float32, cast, scale by
    ``w`` (initialised to 1), multiply by ``silu(z)`` in float32, cast to x.dtype."""

    def __init__(self, dim: int, *, eps: float, dtype: Any = F32, rngs: nnx.Rngs):
        del rngs
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), dtype))

    def __call__(self, x: Float[Array, "... W"], z: Float[Array, "... W"]) -> Float[Array, "... W"]:
        y = layers.rms_norm(x, self.scale[...], self.eps)
        return (y.astype(F32) * jax.nn.silu(z.astype(F32))).astype(x.dtype)


@flax.struct.dataclass
class HybridCache:
    """The cache of a Qwen3.5 model (a frozen pytree).

    Attributes:
        k / v: the full-attention layers' keys and values, one ``B K T H`` buffer per full layer, in layer order
            (``layers.LayerKV`` indexes them by the layer's rank among the full layers).
        valid: ``[B, T]`` key slot written and not padding.
        end_index: ``[B]`` slots written so far (the next write slot).
        conv: per linear layer, the last Z − 1 inputs of its short convolution, ``B (Z−1) C``.
        state: per linear layer, the delta-rule state ``Sᵀ``, ``B U Y W`` float32.
    """

    k: tuple[Float[Array, "B K T H"], ...]
    v: tuple[Float[Array, "B K T H"], ...]
    valid: Bool[Array, "B T"]
    end_index: Int[Array, " B"]
    conv: tuple[Float[Array, "B Z1 C"], ...]
    state: tuple[Float[Array, "B U Y W"], ...]


class GatedAttention(nnx.Module):
    """Full attention with the output gate (module docstring): ``q_proj`` D -> N·2H, ``k_proj`` / ``v_proj``
    D -> K·H, ``o_proj`` N·H -> D, zero-centred ``q_norm`` / ``k_norm`` over H."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, n, k, h = cfg.hidden_size, cfg.num_attention_heads, cfg.kv_heads, cfg.head_size
        self.q_proj = layers.linear(cfg, d, n * 2 * h, bias=cfg.attention_bias, rngs=rngs)
        self.k_proj = layers.linear(cfg, d, k * h, bias=cfg.attention_bias, rngs=rngs)
        self.v_proj = layers.linear(cfg, d, k * h, bias=cfg.attention_bias, rngs=rngs)
        self.o_proj = layers.linear(cfg, n * h, d, bias=cfg.attention_bias, rngs=rngs)
        self.q_norm = CenteredRMSNorm(h, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)
        self.k_norm = CenteredRMSNorm(h, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, kv):
        b, s, d = x_BSD.shape
        n, k, h = self.cfg.num_attention_heads, self.cfg.kv_heads, self.cfg.head_size
        x_TD = x_BSD.reshape(b * s, d)
        qg_BSNX = self.q_proj(x_TD).reshape(b, s, n, 2 * h)
        q_BSNH, gate_BSNH = qg_BSNX[..., :h], qg_BSNX[..., h:]
        q_BSNH = layers.apply_rope(self.q_norm(q_BSNH), ctx.cos, ctx.sin)
        k_BSKH = layers.apply_rope(self.k_norm(self.k_proj(x_TD).reshape(b, s, k, h)), ctx.cos, ctx.sin)
        v_BSKH = self.v_proj(x_TD).reshape(b, s, k, h)
        out_BSNH, probs, kv = layers.cached_attention(q_BSNH, k_BSKH, v_BSKH, ctx, kv)
        out_TX = (out_BSNH * jax.nn.sigmoid(gate_BSNH)).reshape(b * s, n * h)
        return self.o_proj(out_TX).reshape(b, s, d), probs, kv


class GatedDeltaNet(nnx.Module):
    """The linear-attention token mixer (module docstring); parameters as HF names them: ``in_proj_qkv``,
    ``in_proj_z``, ``in_proj_b``, ``in_proj_a``, ``conv1d`` (kernel ``Z C``), ``dt_bias`` and ``A_log`` (U each),
    ``norm`` (:class:`GatedRMSNorm` over W), ``out_proj``."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, c, u = cfg.hidden_size, cfg.conv_channels, cfg.linear_num_value_heads
        self.in_proj_qkv = layers.linear(cfg, d, c, bias=False, rngs=rngs)
        self.in_proj_z = layers.linear(cfg, d, cfg.value_width, bias=False, rngs=rngs)
        self.in_proj_b = layers.linear(cfg, d, u, bias=False, rngs=rngs)
        self.in_proj_a = layers.linear(cfg, d, u, bias=False, rngs=rngs)
        z = cfg.linear_conv_kernel_dim
        bound = z ** -0.5  # torch's Conv1d default for a depthwise kernel: U(-1/sqrt(Z), 1/sqrt(Z))
        self.conv1d = nnx.Param(jax.random.uniform(rngs.params(), (z, c), cfg.dtype, -bound, bound))
        self.dt_bias = nnx.Param(jnp.ones((u,), cfg.dtype))
        self.A_log = nnx.Param(jnp.log(jax.random.uniform(rngs.params(), (u,), F32, 0.01, 16.0)).astype(cfg.dtype))
        self.norm = GatedRMSNorm(cfg.linear_value_head_dim, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)
        self.out_proj = layers.linear(cfg, cfg.value_width, d, bias=False, rngs=rngs)

    def _rule_inputs(self, x_BSD: Float[Array, "B S D"], conv_state, keep_BS):
        """``(q_BSGY, k_BSGY, v_BSUW, g_BSU, β_BSU, x_TD, new conv state)``: the delta rule's inputs after the
        projections and the short convolution (padding zeroed, and made a no-op step, where ``keep_BS`` is 0)."""
        cfg = self.cfg
        b, s, d = x_BSD.shape
        g_heads, u, y, w = (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                            cfg.linear_value_head_dim)
        if keep_BS is not None:
            x_BSD = x_BSD * keep_BS[:, :, None].astype(x_BSD.dtype)
        x_TD = x_BSD.reshape(b * s, d)
        last_B = None if keep_BS is None else jnp.max(jnp.where(keep_BS, jnp.arange(s)[None, :], -1), axis=1)
        mixed_BSC, new_conv = delta.causal_conv(self.in_proj_qkv(x_TD).reshape(b, s, -1), self.conv1d[...],
                                                conv_state, last_B)
        gy = g_heads * y
        q_BSGY = mixed_BSC[..., :gy].reshape(b, s, g_heads, y)
        k_BSGY = mixed_BSC[..., gy:2 * gy].reshape(b, s, g_heads, y)
        v_BSUW = mixed_BSC[..., 2 * gy:].reshape(b, s, u, w)
        beta_BSU = jax.nn.sigmoid(self.in_proj_b(x_TD).reshape(b, s, u).astype(F32))
        a_BSU = self.in_proj_a(x_TD).reshape(b, s, u).astype(F32)
        a_log_11U, dt_bias_11U = (p[...].astype(F32).reshape(1, 1, u) for p in (self.A_log, self.dt_bias))
        g_BSU = -jnp.exp(a_log_11U) * jax.nn.softplus(a_BSU + dt_bias_11U)
        if keep_BS is not None:
            g_BSU, beta_BSU = delta.mask_steps(g_BSU, beta_BSU, keep_BS)
        return q_BSGY, k_BSGY, v_BSUW, g_BSU, beta_BSU, x_TD, new_conv

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, cache):
        """``cache``: ``(conv_state, delta_state, keep_BS)``, each None or an array (the states None without a
        cache, ``keep_BS`` None when no token is padding); returns ``(out, None, (new conv state, new delta
        state))``."""
        cfg = self.cfg
        b, s, d = x_BSD.shape
        u, w = cfg.linear_num_value_heads, cfg.linear_value_head_dim
        conv_state, m_state, keep_BS = (None, None, None) if cache is None else cache
        q, k, v_BSUW, g, beta, x_TD, new_conv = self._rule_inputs(x_BSD, conv_state, keep_BS)
        if m_state is not None and s == 1:
            o_BSUW, new_m = delta.recurrent(q, k, v_BSUW, g, beta, m_state)
        else:
            o_BSUW, new_m = delta.chunked(q, k, v_BSUW, g, beta, m_state, chunk_size=cfg.chunk_size)
        z_BSUW = self.in_proj_z(x_TD).reshape(b, s, u, w)
        o_BSUW = self.norm(o_BSUW.astype(x_BSD.dtype), z_BSUW)
        out_BSD = self.out_proj(o_BSUW.reshape(b * s, u * w)).reshape(b, s, d)
        return out_BSD, None, (new_conv, new_m)

    def token_mixing(self, x_BSD: Float[Array, "B S D"], keep_BS: Bool[Array, "B S"] | None = None
                     ) -> Float[Array, "B U S S"]:
        """The layer's exact token-mixing matrices from a zero state (``delta.mixing_matrix``): ``o_t = Σ_j
        A[u, t, j] v_j`` per value head before the gated norm; the linear layer's counterpart of an attention map
        (``x_BSD`` is the block's normed input)."""
        q, k, v, g, beta, _, _ = self._rule_inputs(x_BSD, None, keep_BS)
        return delta.mixing_matrix(q, k, g, beta, num_value_heads=v.shape[2])


class Qwen35Block(nnx.Module):
    """One pre-norm block: ``input_layernorm``, ``linear_attn`` (:class:`GatedDeltaNet`) or ``self_attn``
    (:class:`GatedAttention`), ``post_attention_layernorm``, ``mlp`` (SwiGLU)."""

    def __init__(self, cfg, kind: str, *, rngs: nnx.Rngs):
        self.kind = kind
        def norm() -> CenteredRMSNorm:
            return CenteredRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)

        self.input_layernorm = norm()
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(cfg, rngs=rngs)
        else:
            self.self_attn = GatedAttention(cfg, rngs=rngs)
        self.post_attention_layernorm = norm()
        self.mlp = gqa.SwiGLU(cfg, rngs=rngs)

    def mixer(self) -> nnx.Module:
        """The block's token mixer (``linear_attn`` or ``self_attn``)."""
        return self.linear_attn if self.kind == "linear_attention" else self.self_attn

    def __call__(self, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, cache):
        mix_BSD, probs, cache = self.mixer()(self.input_layernorm(x_BSD), ctx, cache)
        y_BSD = x_BSD + mix_BSD
        return y_BSD + self.mlp(self.post_attention_layernorm(y_BSD)), cache, probs


class Qwen35Model(layers.DecoderLM):
    """Qwen3.5 causal LM: ``embed_tokens``, ``layers`` (:class:`Qwen35Block` of ``layer_types[i]``), ``norm``,
    ``lm_head`` (absent when tied)."""

    EMBED, FINAL_NORM, HEAD = "embed_tokens", "norm", "lm_head"

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        kinds = iter(cfg.layer_types)

        def norm(dim: int, *, rngs: nnx.Rngs) -> CenteredRMSNorm:
            return CenteredRMSNorm(dim, eps=cfg.rms_norm_eps, dtype=cfg.dtype, rngs=rngs)

        self._build(cfg, lambda r: Qwen35Block(cfg, next(kinds), rngs=r), norm, rngs=rngs)

    def _rope(self) -> tuple[int, float]:
        return self.cfg.rotary_dim, self.cfg.rope_theta

    def _kv_shape(self) -> tuple[int, int]:
        return self.cfg.kv_heads, self.cfg.head_size

    def init_cache(self, batch_size: int, max_len: int, dtype=jnp.float32) -> HybridCache:
        """An empty :class:`HybridCache`: ``max_len`` key slots per row for each full layer, zero conv and delta
        states for each linear layer."""
        cfg = self.cfg
        k, h = self._kv_shape()
        kv = tuple(jnp.zeros((batch_size, k, max_len, h), dtype) for _ in cfg.full_layers)
        conv = tuple(jnp.zeros((batch_size, cfg.linear_conv_kernel_dim - 1, cfg.conv_channels), dtype)
                     for _ in cfg.linear_layers)
        state = tuple(jnp.zeros((batch_size, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                                 cfg.linear_value_head_dim), F32) for _ in cfg.linear_layers)
        return HybridCache(k=kv, v=tuple(jnp.zeros_like(x) for x in kv), valid=jnp.zeros((batch_size, max_len), bool),
                           end_index=jnp.zeros((batch_size,), jnp.int32), conv=conv, state=state)

    def __call__(
        self,
        tokens_BS: Int[Array, "B S"],
        *,
        positions_BS: Int[Array, "B S"] | None = None,
        attention_mask_BT: Int[Array, "B S"] | None = None,
        cache: HybridCache | None = None,
        return_hidden: bool = False,
        return_attn: bool = False,
        segment_ids_BS: Int[Array, "B S"] | None = None,
        attn_reduce: Callable | None = None,
    ) -> ModelOutput:
        """Logits for ``tokens_BS`` (the arguments of ``layers.forward_decoder``). ``attentions`` holds the maps
        of the full-attention layers only, in layer order (the linear layers have none, as in HF).

        Raises:
            ValueError: ``segment_ids_BS`` (document masking cannot reach into the linear layers' recurrence).
        """
        if segment_ids_BS is not None:
            raise ValueError("segment_ids (document masking) is not supported by Qwen3.5: the linear-attention "
                             "layers carry a recurrent state across documents")
        cfg = self.cfg
        b, s = tokens_BS.shape
        overflow_B = None if cache is None else cache.end_index + s > cache.valid.shape[1]
        if positions_BS is None:
            positions_BS = layers.default_positions(b, s, cache)
        keep_BS = _new_token_mask(attention_mask_BT, b, s, cache)
        mask_BST, write_index, cache = layers.step_mask(b, s, attention_mask_BT, cache)
        cos, sin = layers.rope_cos_sin(positions_BS, self.rope_frequencies())
        ctx = layers.StepContext(cos=cos, sin=sin, mask=mask_BST, write_index=write_index, return_probs=return_attn,
                                 attention_kind=cfg.attention_kind,
                                 attention_impl=layers.resolve_attention_impl(cfg.attention_impl),
                                 causal_only=cache is None and attention_mask_BT is None, attn_reduce=attn_reduce,
                                 param_dtype=cfg.dtype)
        x_BSD = self._lookup(tokens_BS)
        h_BSD, outs, probs, cache = self._blocks(x_BSD, ctx, cache, keep_BS)
        final_BSD = self._final_norm()(h_BSD)
        logits_BSV = self._head(final_BSD).astype(F32)
        if cache is not None:
            logits_BSV = jnp.where(overflow_B[:, None, None], jnp.nan, logits_BSV)
        return ModelOutput(logits=logits_BSV, final_hidden=final_BSD,
                           hidden_states=(x_BSD, *outs[:-1], final_BSD) if return_hidden else None,
                           attentions=probs if return_attn else None, cache=cache)

    def _blocks(self, x_BSD, ctx: layers.StepContext, cache: HybridCache | None, keep_BS):
        """Run the blocks in order, each with its slice of the cache; returns ``(x, outs, probs, cache)``."""
        call = nnx.remat(layers._call_block) if self.cfg.remat else layers._call_block
        kv = None if cache is None else layers.LayerKV(cache.k, cache.v)
        conv, state = (None, None) if cache is None else (list(cache.conv), list(cache.state))
        outs, probs, n_full, n_lin = [], [], 0, 0
        for block in self.layers:
            if block.kind == "full_attention":
                x_BSD, kv, p = call(block, x_BSD, ctx, None if kv is None else kv.replace(layer=n_full))
                n_full += 1
                probs.append(p)
            else:
                arg = (None, None, keep_BS) if cache is None else (conv[n_lin], state[n_lin], keep_BS)
                x_BSD, new, _ = call(block, x_BSD, ctx, arg)
                if cache is not None:
                    conv[n_lin], state[n_lin] = new
                n_lin += 1
            outs.append(x_BSD)
        if cache is not None:
            cache = cache.replace(k=kv.k, v=kv.v, conv=tuple(conv), state=tuple(state))
        return x_BSD, tuple(outs), tuple(probs), cache


def _new_token_mask(attention_mask_BT, b: int, s: int, cache) -> Bool[Array, "B S"] | None:
    """Which of the call's S tokens are real (not padding), for the linear layers: the ``[B, S]`` mask, or the
    new tokens' slots of a ``[B, T]`` mask over the cache; None when nothing is masked and nothing is cached
    (then the linear layers need no mask and keep no state)."""
    if attention_mask_BT is None:
        return None if cache is None else jnp.ones((b, s), bool)
    given = attention_mask_BT.astype(bool)
    if cache is not None and given.shape[1] == cache.valid.shape[1] and given.shape[1] != s:
        slots_BS = cache.end_index[:, None] + jnp.arange(s, dtype=jnp.int32)[None, :]
        return jnp.take_along_axis(given, jnp.minimum(slots_BS, given.shape[1] - 1), axis=1)
    return given
