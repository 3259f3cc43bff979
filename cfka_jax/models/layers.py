"""Building blocks shared by every port: RoPE, norms, linears, masks, attention, KV cache, layer stack, the LM shell.

Shape letters follow ``cfka_jax.shapes`` (B S T D N K H F V L); R is the rotary width (R <= H, even).

Numerics (conventions §15): RoPE angles, norm statistics, attention logits and softmax are computed in float32
whatever the parameter dtype; results are cast back to the input dtype.

Masking is by *slot*: the s-th new token of a call occupies slot ``write_index[b] + s`` (0 + s without a cache)
and may attend to key slot t iff ``t <= slot`` and key t is valid (written, and not padding). Position ids only
feed RoPE. This matches HF, whose causal mask follows ``cache_position`` and not ``position_ids``, so packed
sequences with restarting position ids still see earlier documents (spec §11 decision 6: no document masking).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.nnx as nnx
import flax.struct
import jax
import jax.numpy as jnp

from cfka_jax.models.outputs import KVCache, ModelOutput
from cfka_jax.shapes import Array, Bool, Float, Int

F32 = jnp.float32
ATTENTION_KINDS = ("softmax", "linear")  # config ``attention_kind``: the ports' softmax, the theory's linear
ATTENTION_IMPLS = ("auto", "explicit", "fused")  # config ``attention_impl``: see :func:`resolve_attention_impl`


# ----------------------------------------------------------------------------------------------------------- RoPE


def rope_inv_freq(rotary_dim: int, theta: float) -> Float[Array, " R2"]:
    """Inverse frequencies ``1 / theta^(2j / R)`` for j = 0 .. R/2 - 1, in float32 (as HF computes them)."""
    if rotary_dim % 2:
        raise ValueError(f"rotary dimension must be even, got {rotary_dim}")
    exponent = jnp.arange(0, rotary_dim, 2, dtype=F32) / F32(rotary_dim)
    return 1.0 / jnp.power(F32(theta), exponent)


def rope_cos_sin(
    positions_BS: Int[Array, "B S"], inv_freq: Float[Array, " R2"]
) -> tuple[Float[Array, "B S R"], Float[Array, "B S R"]]:
    """Angles ``pos * inv_freq`` duplicated to width R (rotate-half layout); returns (cos, sin) in float32."""
    freqs_BSR2 = positions_BS.astype(F32)[:, :, None] * inv_freq[None, None, :]
    angles_BSR = jnp.concatenate([freqs_BSR2, freqs_BSR2], axis=-1)
    return jnp.cos(angles_BSR), jnp.sin(angles_BSR)


def apply_rope(
    x_BSNH: Float[Array, "B S N H"], cos_BSR: Float[Array, "B S R"], sin_BSR: Float[Array, "B S R"]
) -> Float[Array, "B S N H"]:
    """Rotate-half RoPE on the first R head dims; dims R..H pass through (partial RoPE when R < H).

    With ``x = [x1, x2]`` split into halves of the rotary part, ``rot(x) = x * cos + [-x2, x1] * sin``.
    """
    rotary_dim = cos_BSR.shape[-1]
    x = x_BSNH.astype(F32)
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    half = rotary_dim // 2
    rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
    cos, sin = cos_BSR[:, :, None, :], sin_BSR[:, :, None, :]
    out = jnp.concatenate([x_rot * cos + rotated * sin, x_pass], axis=-1)
    return out.astype(x_BSNH.dtype)


# ---------------------------------------------------------------------------------------------------------- norms


def _expand(p: Float[Array, " D"], ndim: int) -> Float[Array, "..."]:
    return p.reshape((1,) * (ndim - 1) + p.shape)


def layer_norm(x: Float[Array, "... D"], scale: Float[Array, " D"], bias: Float[Array, " D"], eps: float):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis, statistics in float32 (biased var)."""
    xf = x.astype(F32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + eps)
    y = y * _expand(scale.astype(F32), x.ndim) + _expand(bias.astype(F32), x.ndim)
    return y.astype(x.dtype)


def rms_norm(x: Float[Array, "... D"], scale: Float[Array, " D"], eps: float):
    """``scale * x / sqrt(mean(x^2) + eps)``; HF order: normalise in float32, cast to x.dtype, then scale."""
    xf = x.astype(F32)
    y = (xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return _expand(scale, x.ndim) * y


class LayerNorm(nnx.Module):
    """LayerNorm with parameters ``scale`` (HF ``weight``) and ``bias``."""

    def __init__(self, dim: int, *, eps: float, dtype: Any = F32, rngs: nnx.Rngs):
        del rngs  # deterministic init (1, 0) as HF
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), dtype))
        self.bias = nnx.Param(jnp.zeros((dim,), dtype))

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... D"]:
        return layer_norm(x, self.scale[...], self.bias[...], self.eps)


class RMSNorm(nnx.Module):
    """RMSNorm with parameter ``scale`` (HF ``weight``), initialised to 1."""

    def __init__(self, dim: int, *, eps: float, dtype: Any = F32, rngs: nnx.Rngs):
        del rngs
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), dtype))

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... D"]:
        return rms_norm(x, self.scale[...], self.eps)


def linear(cfg: Any, d_in: int, d_out: int, *, bias: bool, rngs: nnx.Rngs) -> nnx.Linear:
    """``nnx.Linear(d_in, d_out)`` in ``cfg.dtype`` (parameters and activations), kernel ~ N(0, σ²) with
    σ = ``cfg.initializer_range`` (as HF initialises every port's linears)."""
    init = nnx.initializers.normal(cfg.initializer_range)
    return nnx.Linear(d_in, d_out, use_bias=bias, dtype=cfg.dtype, param_dtype=cfg.dtype, kernel_init=init,
                      rngs=rngs)


# ------------------------------------------------------------------------------------------------ cache and masks


def write_rows(
    buf_BT: Float[Array, "B T ..."], new_BS: Float[Array, "B S ..."], start_B: Int[Array, " B"]
) -> Float[Array, "B T ..."]:
    """Write ``new[b]`` into ``buf[b, start[b] : start[b] + S]`` for every row b."""

    def one(buf, new, start):
        index = (start,) + (jnp.zeros((), jnp.int32),) * (buf.ndim - 1)
        return jax.lax.dynamic_update_slice(buf, new.astype(buf.dtype), index)

    return jax.vmap(one)(buf_BT, new_BS, start_B)


@flax.struct.dataclass
class LayerKV:
    """One layer's view of the KV cache: every layer's buffers (head-major) and the index of this layer.

    The buffers are a tuple of L ``B K T H`` arrays (looped models' caches) or one stacked ``L B K T H`` array
    (scanned models'). A decode step moves only its new keys: :meth:`write` scatters the ``B S`` new rows into
    ``k[layer][b, :, start[b] + s]`` (in place under jit; rows past the end are dropped, and the model call marks
    their logits NaN), and :meth:`keys` / :meth:`values` read ``k[layer]`` where it lies (a tuple element is read
    without a copy). The ``K T`` order puts the (b, k) batch of the attention contractions first, so XLA reads the
    cache without a transposed copy.
    """

    k: tuple[Float[Array, "B K T H"], ...] | Float[Array, "L B K T H"]
    v: tuple[Float[Array, "B K T H"], ...] | Float[Array, "L B K T H"]
    layer: int = flax.struct.field(pytree_node=False, default=0)

    def write(self, k_BSKH: Float[Array, "B S K H"], v_BSKH: Float[Array, "B S K H"], start_B: Int[Array, " B"]):
        b, s = k_BSKH.shape[:2]
        rows_B1 = jnp.arange(b, dtype=jnp.int32)[:, None]
        slots_BS = start_B[:, None] + jnp.arange(s, dtype=jnp.int32)[None, :]
        at = (rows_B1, slice(None), slots_BS, slice(None))  # indexed shape of a B K T H buffer: B S K H

        def put(buf, new_BSKH):
            if isinstance(buf, tuple):
                layer = buf[self.layer].at[at].set(new_BSKH.astype(buf[self.layer].dtype), mode="drop")
                return buf[: self.layer] + (layer,) + buf[self.layer + 1:]
            return buf.at[(self.layer, *at)].set(new_BSKH.astype(buf.dtype), mode="drop")

        return self.replace(k=put(self.k, k_BSKH), v=put(self.v, v_BSKH))

    def keys(self) -> Float[Array, "B T K H"]:
        return jnp.swapaxes(self.k[self.layer], 1, 2)

    def values(self) -> Float[Array, "B T K H"]:
        return jnp.swapaxes(self.v[self.layer], 1, 2)


@flax.struct.dataclass
class StepContext:
    """Per-call inputs shared by every layer: RoPE tables, the attention mask and the cache write index."""

    cos: Float[Array, "B S R"]
    sin: Float[Array, "B S R"]
    mask: Bool[Array, "B S T"]
    write_index: Int[Array, " B"] | None
    return_probs: bool = flax.struct.field(pytree_node=False, default=False)
    attention_kind: str = flax.struct.field(pytree_node=False, default="softmax")
    attention_impl: str = flax.struct.field(pytree_node=False, default="explicit")
    causal_only: bool = flax.struct.field(pytree_node=False, default=False)
    attn_reduce: Callable | None = flax.struct.field(pytree_node=False, default=None)
    param_dtype: Any = flax.struct.field(pytree_node=False, default=None)


def step_mask(
    batch_size: int,
    seq_len: int,
    attention_mask: Int[Array, "B S"] | Int[Array, "B T"] | None,
    cache: KVCache | None,
) -> tuple[Bool[Array, "B S T"], Int[Array, " B"] | None, KVCache | None]:
    """Slot-causal padding mask for one call, plus the cache write index and the cache with updated bookkeeping.

    Args:
        attention_mask: 1 keep / 0 pad. Shape ``[B, S]`` marks the new tokens (earlier cache slots keep the
            validity they were written with). With a cache it may instead be ``[B, T]`` over all cache slots
            (HF ``generate`` style), which then replaces the recorded validity; slots not yet written stay
            invalid either way. When S == T both readings coincide.

    Returns:
        ``(mask_BST, write_index_B, cache)``: ``mask[b, s, t] = valid[b, t] and t <= start[b] + s`` where
        ``start`` is 0 without a cache (then T = S) and ``cache.end_index`` with one (then T = cache length).
        The returned cache has the validity recorded and ``end_index`` advanced by S; the layers fill its k/v.
    """
    given = None if attention_mask is None else attention_mask.astype(bool)
    start_B = jnp.zeros((batch_size,), jnp.int32) if cache is None else cache.end_index
    q_slot_BS = start_B[:, None] + jnp.arange(seq_len, dtype=jnp.int32)[None, :]
    if cache is None:
        valid_BT, write_index = (jnp.ones((batch_size, seq_len), bool) if given is None else given), None
    else:
        k_slot_T = jnp.arange(cache.valid.shape[1], dtype=jnp.int32)
        written_BT = k_slot_T[None, :] < (cache.end_index + seq_len)[:, None]
        if given is not None and given.shape[1] == cache.valid.shape[1] and seq_len != given.shape[1]:
            valid_BT = given & written_BT
        else:
            keep_BS = jnp.ones((batch_size, seq_len), bool) if given is None else given
            valid_BT = write_rows(cache.valid, keep_BS, cache.end_index) & written_BT
        write_index = cache.end_index
        cache = cache.replace(valid=valid_BT, end_index=cache.end_index + seq_len)
    k_slot_T = jnp.arange(valid_BT.shape[1], dtype=jnp.int32)
    mask_BST = (k_slot_T[None, None, :] <= q_slot_BS[:, :, None]) & valid_BT[:, None, :]
    return mask_BST, write_index, cache


def default_positions(batch_size: int, seq_len: int, cache: KVCache | None) -> Int[Array, "B S"]:
    """HF default position ids: ``arange(S)`` offset by the number of cached slots."""
    start_B = jnp.zeros((batch_size,), jnp.int32) if cache is None else cache.end_index
    return start_B[:, None] + jnp.arange(seq_len, dtype=jnp.int32)[None, :]


# ------------------------------------------------------------------------------------------------------ attention


def resolve_attention_impl(impl: str) -> str:
    """``"explicit"`` (the einsum/softmax path below, the one that can return probabilities) or ``"fused"``
    (``jax.nn.dot_product_attention``: cuDNN flash attention on GPU for bf16/fp16, XLA's fused softmax elsewhere).
    ``"auto"`` is fused on GPU and TPU and explicit on CPU, where the explicit path is what every measured CPU
    number (and the bit-identity of runs across versions) was produced with."""
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
    if impl == "auto":
        return "fused" if jax.default_backend() in ("gpu", "cuda", "rocm", "tpu") else "explicit"
    return impl


def fused_attention(
    q_BSNH: Float[Array, "B S N H"],
    k_BTKH: Float[Array, "B T K H"],
    v_BTKH: Float[Array, "B T K H"],
    mask_BST: Bool[Array, "B S T"] | None,
) -> Float[Array, "B S N H"]:
    """``softmax(q k^T / sqrt(H) + mask) v`` by ``jax.nn.dot_product_attention`` (GQA native, inputs in v's
    dtype). ``mask_BST=None`` means plain causal attention over a call without cache, padding or segments, passed
    as ``is_causal`` so a flash kernel never builds the S×T mask."""
    dt = v_BTKH.dtype
    mask = None if mask_BST is None else mask_BST[:, None, :, :]
    with jax.numpy_dtype_promotion("standard"):  # JAX's XLA path promotes bf16 with float32 internally
        return jax.nn.dot_product_attention(q_BSNH.astype(dt), k_BTKH.astype(dt), v_BTKH, mask=mask,
                                            is_causal=mask_BST is None, scale=float(q_BSNH.shape[-1]) ** -0.5)


def attention(
    q_BSNH: Float[Array, "B S N H"],
    k_BTKH: Float[Array, "B T K H"],
    v_BTKH: Float[Array, "B T K H"],
    mask_BST: Bool[Array, "B S T"],
    *,
    return_probs: bool = False,
    kind: str = "softmax",
) -> tuple[Float[Array, "B S N H"], Float[Array, "B N S T"] | None]:
    """Grouped-query softmax attention, ``softmax(q k^T / sqrt(H) + mask) v``, logits and softmax in float32.

    Query head n uses KV head ``n // (N // K)`` (HF ``repeat_kv``). Masked logits are set to the float32
    minimum, so a fully masked row (a padding query) gives a uniform row instead of NaN.

    ``kind="linear"``: the theory model's causal linear attention (spec cfka_stoc.md §2.1), no softmax over
    positions: weights ``w[s, t] = q_s . k_t / sqrt(H)`` on unmasked keys and 0 elsewhere, ``out = w v``.

    Returns:
        ``(out_BSNH, probs_BNST or None)``; ``out`` has the dtype of ``v``.
    """
    b, s, n, h = q_BSNH.shape
    kv_heads = k_BTKH.shape[2]
    if n % kv_heads:
        raise ValueError(f"{n} query heads are not a multiple of {kv_heads} KV heads")
    q_BSKGH = q_BSNH.astype(F32).reshape(b, s, kv_heads, n // kv_heads, h)
    logits_BKGST = jnp.einsum("bskgh,btkh->bkgst", q_BSKGH, k_BTKH.astype(F32)) * F32(h**-0.5)
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"attention kind must be one of {ATTENTION_KINDS}, got {kind!r}")
    if kind == "linear":
        probs_BKGST = jnp.where(mask_BST[:, None, None, :, :], logits_BKGST, F32(0.0))
    else:
        logits_BKGST = jnp.where(mask_BST[:, None, None, :, :], logits_BKGST, jnp.finfo(F32).min)
        probs_BKGST = jax.nn.softmax(logits_BKGST, axis=-1)
    out_BSKGH = jnp.einsum("bkgst,btkh->bskgh", probs_BKGST.astype(v_BTKH.dtype), v_BTKH)
    probs = probs_BKGST.reshape(b, n, s, -1) if return_probs else None
    return out_BSKGH.reshape(b, s, n, h), probs


def decode_attention(
    q_B1NH: Float[Array, "B 1 N H"],
    k_BKTH: Float[Array, "B K T H"],
    v_BKTH: Float[Array, "B K T H"],
    mask_B1T: Bool[Array, "B 1 T"],
    *,
    kind: str = "softmax",
) -> Float[Array, "B 1 N H"]:
    """:func:`attention` for one new token per row (a decode step) over a cache in its own ``B K T H`` layout,
    without probabilities: the same math (logits and softmax in float32, masked logits at the float32 minimum or,
    for ``kind="linear"``, weights 0), contracted as ``q[b,k,g,:] . k[b,k,t,:]`` and ``p[b,k,g,:] . v[b,k,:,h]``.

    With the query's S = 1 squeezed out and the cache read where it lies, XLA:CPU hands both contractions of a
    grouped-query model (G > 1) to its matmul library without first copying the value cache into a transposed
    ``B K H T`` buffer, as it did for :func:`attention`'s ``bkgst,btkh`` form in every layer of every decode step
    (0.7 ms of a 12 ms Qwen2 benchmark step). Sums are ordered as the kernel chooses: equal to :func:`attention`
    to float32 rounding.
    """
    b, s, n, h = q_B1NH.shape
    kv_heads = k_BKTH.shape[1]
    if s != 1 or n % kv_heads:
        raise ValueError(f"decode_attention takes one query per row and N a multiple of K, got {q_B1NH.shape}, "
                         f"{kv_heads} KV heads")
    q_BKGH = q_B1NH.astype(F32).reshape(b, kv_heads, n // kv_heads, h)
    logits_BKGT = jnp.einsum("bkgh,bkth->bkgt", q_BKGH, k_BKTH.astype(F32)) * F32(h**-0.5)
    keep_B11T = mask_B1T[:, None, :, :]
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"attention kind must be one of {ATTENTION_KINDS}, got {kind!r}")
    if kind == "linear":
        probs_BKGT = jnp.where(keep_B11T, logits_BKGT, F32(0.0))
    else:
        probs_BKGT = jax.nn.softmax(jnp.where(keep_B11T, logits_BKGT, jnp.finfo(F32).min), axis=-1)
    out_BKGH = jnp.einsum("bkgt,bkth->bkgh", probs_BKGT.astype(v_BKTH.dtype), v_BKTH)
    return out_BKGH.reshape(b, 1, n, h)


def cached_attention(
    q_BSNH: Float[Array, "B S N H"],
    k_BSKH: Float[Array, "B S K H"],
    v_BSKH: Float[Array, "B S K H"],
    ctx: StepContext,
    kv: LayerKV | None,
) -> tuple[Float[Array, "B S N H"], Float[Array, "B N S T"] | None, LayerKV | None]:
    """Attention over the new keys, or, with a layer cache ``kv``, over the cache after writing the new keys;
    the fused kernel when ``ctx.attention_impl == "fused"`` and no probabilities are asked for (softmax only);
    :func:`decode_attention` for a cached step of one token per row that asks for none.

    Returns:
        ``(out_BSNH, probs_BNST or None, the updated LayerKV or None)``.
    """
    if kv is None:
        k_BTKH, v_BTKH, new_kv = k_BSKH, v_BSKH, None
    else:
        new_kv = kv.write(k_BSKH, v_BSKH, ctx.write_index)
        k_BTKH, v_BTKH = new_kv.keys(), new_kv.values()
    if ctx.attention_impl == "fused" and not ctx.return_probs and ctx.attention_kind == "softmax":
        causal = ctx.causal_only and kv is None
        return fused_attention(q_BSNH, k_BTKH, v_BTKH, None if causal else ctx.mask), None, new_kv
    if new_kv is not None and q_BSNH.shape[1] == 1 and not ctx.return_probs:
        out = decode_attention(q_BSNH, new_kv.k[new_kv.layer], new_kv.v[new_kv.layer], ctx.mask,
                               kind=ctx.attention_kind)
        return out, None, new_kv
    out, probs = attention(q_BSNH, k_BTKH, v_BTKH, ctx.mask, return_probs=ctx.return_probs,
                           kind=ctx.attention_kind)
    return out, probs, new_kv


# ---------------------------------------------------------------------------------------------------- layer stack

def make_stacked(make_block: Callable[[nnx.Rngs], nnx.Module], num_layers: int, rngs: nnx.Rngs) -> nnx.Module:
    """Create ``num_layers`` blocks with parameters stacked on a leading L axis (for ``nnx.scan``)."""

    @nnx.split_rngs(splits=num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(r: nnx.Rngs) -> nnx.Module:
        return make_block(r)

    return create(rngs)


def _in_dtype(block, dtype):
    """``block`` with its floating parameters in ``dtype`` (the same block when they already are)."""
    if dtype is None:
        return block

    def floating(x):  # a block's state may also hold non-array leaves (e.g. a keyed dropout's callable)
        return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)

    graphdef, state = nnx.split(block)
    if all(x.dtype == dtype for x in jax.tree.leaves(state) if floating(x)):
        return block
    cast = jax.tree.map(lambda x: x.astype(dtype) if floating(x) else x, state)
    return nnx.merge(graphdef, cast)


def _call_block(block, x, ctx, kv):
    # A block computes with its parameters in the model's dtype: float32 masters (a mixed-precision train step,
    # train/step.lm_objective) are cast here, inside the block's (rematerialised, scanned) call, so no
    # bfloat16 copy of every block's weights is held across the forward and backward passes.
    y, kv_new, probs = _in_dtype(block, ctx.param_dtype)(x, ctx, kv)
    if probs is not None and ctx.attn_reduce is not None:
        probs = ctx.attn_reduce(probs, ctx.mask)
    return y, kv_new, probs


def stacked(buf) -> Array:
    """A cache buffer as one ``L ...`` array (a looped model's tuple of layers is stacked)."""
    return jnp.stack(buf) if isinstance(buf, tuple) else buf


def apply_layers(layers, x_BSD, ctx: StepContext, cache: KVCache | None, *, scan: bool, remat: bool):
    """Run the blocks (an ``nnx.List`` or, with ``scan``, one stacked block) in order.

    Each block is called as ``block(x_BSD, ctx, kv) -> (x_BSD, kv or None, probs or None)`` where ``kv`` is the
    layer's :class:`LayerKV` view of the cache or None (looped: the whole stack with the layer's index, so the
    step writes into it in place; scanned: the layer's slice as a stack of one).

    Returns:
        ``(x_BSD, outs, probs, k_LBTKH, v_LBTKH)``: ``outs`` is the tuple of every block's output, ``probs`` the
        tuple of per-layer ``B N S T`` probabilities, or of ``ctx.attn_reduce(probs, mask)`` when set, reduced
        inside the layer so no two layers' maps are alive at once (None unless ``ctx.return_probs``), k/v the
        updated cache
        arrays (None without a cache).
    """
    call = nnx.remat(_call_block) if remat else _call_block
    if scan:
        kv = None if cache is None else (stacked(cache.k), stacked(cache.v))

        def body(x, block, ctx, kv_i):
            layer_kv = None if kv_i is None else LayerKV(kv_i[0][None], kv_i[1][None])
            y, kv_new, probs = call(block, x, ctx, layer_kv)
            return y, (y, None if kv_new is None else (kv_new.k[0], kv_new.v[0]), probs)

        x_BSD, (outs_L, kv_new, probs_L) = nnx.scan(
            body, in_axes=(nnx.Carry, 0, None, 0), out_axes=(nnx.Carry, 0)
        )(x_BSD, layers, ctx, kv)
        outs = tuple(outs_L)
        probs = None if probs_L is None else tuple(probs_L)
        k, v = (None, None) if kv_new is None else kv_new
        return x_BSD, outs, probs, k, v
    outs, probs = [], []
    kv = None if cache is None else LayerKV(cache.k, cache.v)
    for i, block in enumerate(layers):
        x_BSD, kv, p = call(block, x_BSD, ctx, None if kv is None else kv.replace(layer=i))
        outs.append(x_BSD)
        probs.append(p)
    k, v = (None, None) if kv is None else (kv.k, kv.v)
    return x_BSD, tuple(outs), tuple(probs) if ctx.return_probs else None, k, v


def forward_decoder(
    tokens_BS: Int[Array, "B S"],
    *,
    embed: Callable[[Array], Array],
    layers,
    final_norm: Callable[[Array], Array],
    head: Callable[[Array], Array],
    rotary_dim: int,
    rope_theta: float,
    scan: bool,
    remat: bool,
    positions_BS: Int[Array, "B S"] | None,
    attention_mask_BT: Int[Array, "B S"] | None,
    cache: KVCache | None,
    return_hidden: bool,
    return_attn: bool,
    segment_ids_BS: Int[Array, "B S"] | None = None,
    attention_kind: str = "softmax",
    attention_impl: str = "auto",
    attn_reduce: Callable | None = None,
    inv_freq: Float[Array, " R2"] | None = None,
    param_dtype: Any = None,
) -> ModelOutput:
    """The decoder skeleton every family shares: embed, blocks, final norm, LM head (logits in float32).

    ``attention_mask_BT`` marks the tokens of this call (they become keys T); with a cache, earlier keys keep
    the validity they were written with, or a ``[B, T_cache]`` mask may cover every slot (see :func:`step_mask`).
    ``segment_ids_BS`` (packed documents, no cache) additionally restricts query s to keys t of the same segment,
    ``mask[b, s, t] &= seg[b, s] == seg[b, t]`` (document masking; the reference packs without it).
    ``attention_kind`` selects softmax or the theory's causal linear attention (:func:`attention`);
    ``attention_impl`` the explicit or the fused softmax kernel (:func:`resolve_attention_impl`; calls that return
    attention maps always take the explicit path). ``attn_reduce(probs_BNST, mask_BST)`` (with ``return_attn``)
    replaces each layer's map in ``attentions`` by its reduction, computed inside the layer. ``inv_freq`` replaces
    the RoPE inverse frequencies ``rope_inv_freq(rotary_dim, rope_theta)`` (scaled RoPE, e.g. Llama 3.1's).
    ``param_dtype`` (the model's ``cfg.dtype``): each block casts its floating parameters to it inside its call
    (a no-op when they already are in it; float32 masters of a mixed-precision step are cast block by block).
    Default positions are ``arange(S)`` offset by ``cache.end_index``. A call that would write past the end of
    the cache gets NaN logits in the overflowing rows (XLA clamps the write, which would otherwise silently
    overwrite the last slots).
    """
    b, s = tokens_BS.shape
    overflow_B = None if cache is None else cache.end_index + s > cache.valid.shape[1]
    if positions_BS is None:
        positions_BS = default_positions(b, s, cache)
    mask_BST, write_index, cache = step_mask(b, s, attention_mask_BT, cache)
    if segment_ids_BS is not None:
        if cache is not None:
            raise ValueError("segment_ids (document masking) is for packed training/eval calls without a cache")
        mask_BST = mask_BST & (segment_ids_BS[:, :, None] == segment_ids_BS[:, None, :])
    cos, sin = rope_cos_sin(positions_BS, rope_inv_freq(rotary_dim, rope_theta) if inv_freq is None else inv_freq)
    causal_only = cache is None and attention_mask_BT is None and segment_ids_BS is None
    ctx = StepContext(cos=cos, sin=sin, mask=mask_BST, write_index=write_index, return_probs=return_attn,
                      attention_kind=attention_kind, attention_impl=resolve_attention_impl(attention_impl),
                      causal_only=causal_only, attn_reduce=attn_reduce, param_dtype=param_dtype)
    x_BSD = embed(tokens_BS)
    h_BSD, outs, probs, k, v = apply_layers(layers, x_BSD, ctx, cache, scan=scan, remat=remat)
    final_BSD = final_norm(h_BSD)
    hidden = (x_BSD, *outs[:-1], final_BSD) if return_hidden else None
    logits_BSV = head(final_BSD).astype(F32)
    if cache is not None:
        cache = cache.replace(k=k, v=v)
        logits_BSV = jnp.where(overflow_B[:, None, None], jnp.nan, logits_BSV)
    return ModelOutput(
        logits=logits_BSV,
        final_hidden=final_BSD,
        hidden_states=hidden,
        attentions=probs,
        cache=cache,
    )


class HeadView(NamedTuple):
    """The LM head as a loss on the final hidden states sees it (``train/step.chunked_token_nll_loss``):
    ``view(x_BSD)`` are the logits; ``weight`` is the head's one matrix when it is a plain one (the tied embedding
    ``[V, D]``, layout ``VD``, or a bias-free ``nnx.Linear`` kernel ``[D, V]``, layout ``DV``) and None otherwise
    (an adapted head); ``dtype`` is the dtype the head computes in."""

    apply: Callable[[Array], Array]
    weight: Array | None
    layout: str
    dtype: Any

    def __call__(self, x_BSD: Float[Array, "B S D"]) -> Float[Array, "B S V"]:
        return self.apply(x_BSD)


class DecoderLM(nnx.Module):
    """The shell, call and cache interface every model family shares.

    A subclass names its input embedding, final norm and untied head in ``EMBED``, ``FINAL_NORM`` and ``HEAD`` (HF's
    names), builds them and its blocks with :meth:`_build`, and defines ``_rope() -> (rotary_dim, theta)`` and
    ``_kv_shape() -> (num_kv_heads, head_dim)``; a family with scaled RoPE overrides :meth:`rope_frequencies`.
    Other layers reach the parts through ``_embed()``, ``_final_norm()`` and ``_head(x)``.
    """

    EMBED: str
    FINAL_NORM: str
    HEAD: str

    def _build(self, cfg: Any, make_block: Callable[[nnx.Rngs], nnx.Module], make_norm: Callable[..., nnx.Module],
               *, rngs: nnx.Rngs) -> None:
        """Set ``cfg`` and create, in this order (the order the initialisers draw their keys in): the embedding
        ``EMBED`` (``nnx.Embed``, N(0, σ²) with σ = ``cfg.initializer_range``), ``cfg.num_hidden_layers`` blocks
        ``make_block(rngs)`` as ``layers`` (stacked for ``nnx.scan`` with ``cfg.scan_layers``), the final norm
        ``FINAL_NORM = make_norm(D, rngs=rngs)`` and, unless ``cfg.tie_word_embeddings``, the bias-free head
        ``HEAD`` (D -> V)."""
        self.cfg = cfg
        init = nnx.initializers.normal(cfg.initializer_range)
        setattr(self, self.EMBED, nnx.Embed(cfg.vocab_size, cfg.hidden_size, dtype=cfg.dtype, param_dtype=cfg.dtype,
                                            embedding_init=init, rngs=rngs))
        if cfg.scan_layers:
            self.layers = make_stacked(make_block, cfg.num_hidden_layers, rngs)
        else:
            self.layers = nnx.List([make_block(rngs) for _ in range(cfg.num_hidden_layers)])
        setattr(self, self.FINAL_NORM, make_norm(cfg.hidden_size, rngs=rngs))
        if not cfg.tie_word_embeddings:
            setattr(self, self.HEAD, linear(cfg, cfg.hidden_size, cfg.vocab_size, bias=False, rngs=rngs))

    def _embed(self) -> nnx.Embed:
        return getattr(self, self.EMBED)

    def _final_norm(self) -> nnx.Module:
        return getattr(self, self.FINAL_NORM)

    def _head(self, x_BSD: Float[Array, "B S D"]) -> Float[Array, "B S V"]:
        """The LM head: ``x @ E^T`` with tied embeddings, else the ``HEAD`` linear."""
        return self._embed().attend(x_BSD) if self.cfg.tie_word_embeddings else getattr(self, self.HEAD)(x_BSD)

    def _lookup(self, tokens_BS: Int[Array, "B S"]) -> Float[Array, "B S D"]:
        """The input embedding's rows of ``tokens_BS`` in the embedding's dtype: gathered, then cast. The same
        numbers as ``nnx.Embed``'s cast-then-gather, without a cast copy of the whole table when it is held in
        another dtype (a mixed-precision step's float32 master, :meth:`cast_on_use`)."""
        embed = self._embed()
        table = embed.embedding[...]
        return jnp.take(table, tokens_BS, axis=0).astype(embed.dtype or table.dtype)

    def _plain_head(self) -> nnx.Linear | None:
        """The untied head when it is a plain bias-free ``nnx.Linear`` (not an adapter wrapping one), else None."""
        head = None if self.cfg.tie_word_embeddings else getattr(self, self.HEAD)
        return head if type(head) is nnx.Linear and head.bias is None else None

    def head_view(self) -> HeadView:
        """The head as :class:`HeadView` (logits function, its plain weight matrix and layout, compute dtype)."""
        if self.cfg.tie_word_embeddings:
            return HeadView(self._head, self._embed().embedding[...], "VD", self.cfg.dtype)
        head = self._plain_head()
        return HeadView(self._head, None if head is None else head.kernel[...], "DV", self.cfg.dtype)

    def cast_on_use(self) -> tuple[str, ...]:
        """Top-level parameter names whose modules cast their own parameters to ``cfg.dtype`` where they use them:
        the blocks (inside each block's call), the input embedding (:meth:`_lookup` casts the gathered rows,
        ``nnx.Embed.attend`` the table) and a plain untied head (``nnx.Linear`` casts its kernel). A
        mixed-precision step leaves these as float32 masters instead of casting them up front
        (``train/step.compute_params``): the same forward numbers and gradients, except that a tied embedding's
        two gradient parts (lookup and head) are summed in float32 instead of ``cfg.dtype``; and no ``cfg.dtype``
        copy of each is held across the step (a tiled loss casts one tile of the head at a time,
        ``train/losses.head_nll_sum``)."""
        return ("layers", self.EMBED) + ((self.HEAD,) if self._plain_head() is not None else ())

    def rope_frequencies(self) -> Float[Array, " R2"]:
        """The RoPE inverse frequencies of every call (default ``rope_inv_freq(*self._rope())``)."""
        return rope_inv_freq(*self._rope())

    def __call__(
        self,
        tokens_BS: Int[Array, "B S"],
        *,
        positions_BS: Int[Array, "B S"] | None = None,
        attention_mask_BT: Int[Array, "B S"] | None = None,
        cache: KVCache | None = None,
        return_hidden: bool = False,
        return_attn: bool = False,
        segment_ids_BS: Int[Array, "B S"] | None = None,
        attn_reduce: Callable | None = None,
    ) -> ModelOutput:
        """Logits for ``tokens_BS``; see :func:`forward_decoder` for the arguments."""
        rotary_dim, theta = self._rope()
        return forward_decoder(
            tokens_BS,
            embed=self._lookup,
            layers=self.layers,
            final_norm=self._final_norm(),
            head=self._head,
            rotary_dim=rotary_dim,
            rope_theta=theta,
            scan=self.cfg.scan_layers,
            remat=self.cfg.remat,
            positions_BS=positions_BS,
            attention_mask_BT=attention_mask_BT,
            cache=cache,
            return_hidden=return_hidden,
            return_attn=return_attn,
            segment_ids_BS=segment_ids_BS,
            attention_kind=self.cfg.attention_kind,
            attention_impl=self.cfg.attention_impl,
            attn_reduce=attn_reduce,
            inv_freq=self.rope_frequencies(),
            param_dtype=self.cfg.dtype,
        )

    def init_cache(self, batch_size: int, max_len: int, dtype=jnp.float32) -> KVCache:
        """An empty :class:`KVCache` with ``max_len`` slots per row (per-layer buffers for a looped model, one
        stacked buffer for a scanned one)."""
        num_kv_heads, head_dim = self._kv_shape()
        return KVCache.zeros(self.cfg.num_hidden_layers, batch_size, max_len, num_kv_heads, head_dim, dtype,
                             stacked=self.cfg.scan_layers)
