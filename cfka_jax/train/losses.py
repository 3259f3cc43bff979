"""Token-level language-model losses (pure functions; computed in float32 whatever the parameter dtype)."""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float, Int


def shifted_log_softmax(logits_BSV: Float[Array, "B S V"]) -> Float[Array, "B S-1 V"]:
    """log p(· | tokens[:, :s+1]) for s = 0 … S−2: the log-softmax of the logits that predict tokens 1 … S−1
    (column s of the result is about token s + 1), in float32 (float64 for float64 logits). The one shift of
    every next-token quantity (NLL, fluency, probe scores, update energy)."""
    dtype = jnp.float64 if logits_BSV.dtype == jnp.float64 else jnp.float32
    return jax.nn.log_softmax(logits_BSV[:, :-1].astype(dtype), axis=-1)


def gold_log_probs(logp_BSV: Float[Array, "B S-1 V"], tokens_BS: Int[Array, "B S"]) -> Float[Array, "B S-1"]:
    """log p(tokens[:, s+1] | tokens[:, :s+1]) picked from :func:`shifted_log_softmax`'s output."""
    return jnp.take_along_axis(logp_BSV, tokens_BS[:, 1:, None], axis=-1)[..., 0]


def next_token_nll(logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"]) -> Float[Array, "B S-1"]:
    """−log p(tokens[:, s+1] | tokens[:, :s+1]) for s = 0 … S−2, in float32 (float64 for float64 logits)."""
    return -gold_log_probs(shifted_log_softmax(logits_BSV), tokens_BS)


def masked_mean_nll(
    logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"], target_mask_BS: Float[Array, "B S"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Mean next-token NLL over target positions, and the number of targets.

    ``target_mask_BS[b, s] = 1`` when token s of row b is a training target (predicted from positions < s);
    column 0 is ignored. The mean is Σ mask·nll / max(Σ mask, 1), so an all-masked batch gives loss 0.
    """
    nll_BS = next_token_nll(logits_BSV, tokens_BS)
    w_BS = target_mask_BS[:, 1:].astype(jnp.float32)
    count = jnp.sum(w_BS)
    return jnp.sum(w_BS * nll_BS) / jnp.maximum(count, 1.0), count


def chunked_masked_mean_nll(
    final_BSD: Float[Array, "B S D"],
    head: Callable[[Array], Array],
    tokens_BS: Int[Array, "B S"],
    target_mask_BS: Float[Array, "B S"],
    chunk: int,
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """:func:`masked_mean_nll` of ``head(final_BSD)`` without ever holding the ``[B, S, V]`` logits.

    The N = B(S − 1) predicting rows of ``final_BSD`` (positions 0 … S−2) are cut into ⌈N / C⌉ chunks of C =
    ``chunk`` rows (the last padded with zero-weight rows); a ``lax.scan`` over chunks computes, per chunk,

        z_CV = head(h_CD) (cast to float32),   Σ_c w_c (logsumexp(z_c) − z_c[y_c]),

    under ``jax.checkpoint``, so the forward keeps no chunk's logits and the backward recomputes each chunk's
    ``[C, V]`` logits one at a time: the peak logits memory is O(C V) instead of the O(B S V) of the log-softmax,
    its gradient and the head's output. The value equals :func:`masked_mean_nll` of the full logits up to float32
    summation order; the head's parameters (closed over by ``head``) get their gradient through the scan.
    """
    b, s, d = final_BSD.shape
    h_ND = final_BSD[:, :-1].reshape(-1, d)
    y_N = tokens_BS[:, 1:].reshape(-1)
    w_N = target_mask_BS[:, 1:].reshape(-1).astype(jnp.float32)
    n = h_ND.shape[0]
    c = max(1, min(int(chunk), n))
    pad = (-n) % c
    h_KCD = jnp.pad(h_ND, ((0, pad), (0, 0))).reshape(-1, c, d)
    y_KC = jnp.pad(y_N, (0, pad)).reshape(-1, c)
    w_KC = jnp.pad(w_N, (0, pad)).reshape(-1, c)

    @jax.checkpoint
    def chunk_sum(h_CD, y_C, w_C):
        z_CV = head(h_CD).astype(jnp.float32)
        lse_C = jax.nn.logsumexp(z_CV, axis=-1)
        gold_C = jnp.take_along_axis(z_CV, y_C[:, None], axis=-1)[:, 0]
        return jnp.sum(w_C * (lse_C - gold_C))

    def body(total, xs):
        return total + chunk_sum(*xs), None

    total, _ = jax.lax.scan(body, jnp.zeros((), jnp.float32), (h_KCD, y_KC, w_KC))
    count = jnp.sum(w_N)
    return total / jnp.maximum(count, 1.0), count


HEAD_LAYOUTS = ("VD", "DV")
"""How an LM head's weight is stored: ``VD`` = ``[V, D]`` (a tied embedding, logits ``h Wᵀ``), ``DV`` = ``[D, V]``
(an untied ``nnx.Linear`` kernel, logits ``h W``)."""


def head_nll_sum(
    h_ND: Float[Array, "N D"],
    weight: Float[Array, "V D"] | Float[Array, "D V"],
    y_N: Int[Array, " N"],
    w_N: Float[Array, " N"],
    *,
    layout: str,
    compute_dtype,
    row_chunk: int,
    vocab_tile: int,
) -> Float[Array, ""]:
    """Σ_n w_n (logsumexp_v z_nv − z_n,y_n) with z = h Wᵀ (``VD``) or h W (``DV``), never holding more than one
    ``[row_chunk, vocab_tile]`` block of logits, and in the backward pass no copy of the weight at all.

    Forward: the N rows are cut into chunks of C = ``row_chunk`` (the last padded with zero-weight rows); for each
    chunk a scan over the vocabulary in tiles of T = ``vocab_tile`` columns keeps the running maximum m, the
    running Σ exp(z − m) and the gold logit (an online log-sum-exp), so lse_n = m_n + log s_n. Each tile's
    weight slice is cast to ``compute_dtype`` (the model's dtype: the cast a mixed-precision step applies to its
    float32 master) inside the tile, and its logits are accumulated in float32
    (``preferred_element_type``). The last tile is clamped to end at V; its columns already seen are masked.

    Backward (``jax.custom_vjp``): with ḡ the output cotangent and p = exp(z − lse) recomputed per tile,

        ∂/∂z_nv = ḡ w_n (p_nv − [v = y_n]),   ∂h_n = Σ_v ∂z_nv W_v,   ∂W_v = Σ_n ∂z_nv h_n,
        ∂w_n = ḡ (lse_n − z_n,y_n),

    each tile's ∂W written into one weight-shaped accumulator (``dynamic_update_slice``; the compiler updates it
    in place), so the step holds the gradient and nothing weight-sized beside it; ∂h is accumulated in float32
    and returned in h's dtype. Inputs that are not differentiated (a frozen head under LoRA: its weight is not
    *perturbed*) get no cotangent and their products are never computed.

    Equal to :func:`masked_mean_nll`'s numerator on ``h W`` (times the count) up to float32 summation order when
    everything is float32; with ``compute_dtype`` bfloat16 the logits are the float32 accumulation of bf16
    products (the full-logits head rounds them to bf16 first).
    """
    if layout not in HEAD_LAYOUTS:
        raise ValueError(f"head layout must be one of {HEAD_LAYOUTS}, got {layout!r}")
    for name, value in (("row_chunk", row_chunk), ("vocab_tile", vocab_tile)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return _head_nll(layout, jnp.dtype(compute_dtype), row_chunk, vocab_tile)(h_ND, weight, y_N, w_N)


def _head_dims(layout: str):
    """``dot_general`` dimension numbers of ``h_CD · W_tile`` for a layout (contract D)."""
    return (((1,), (1,)), ((), ())) if layout == "VD" else (((1,), (0,)), ((), ()))


@functools.lru_cache(maxsize=None)
def _head_nll(layout: str, cd, row_chunk: int, vocab_tile: int):
    """The ``custom_vjp`` of :func:`head_nll_sum` for one static configuration."""
    v_axis = 0 if layout == "VD" else 1

    def geometry(h_ND, weight):
        n, d = h_ND.shape
        v = weight.shape[v_axis]
        t = min(vocab_tile, v)
        c = max(1, min(row_chunk, n))
        return n, d, v, t, -(-v // t), c, (-n) % c

    def chunks(x, c, pad):
        return jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1)).reshape(-1, c, *x.shape[1:])

    def tile_logits(h_CD, weight, t_index, t, v):
        start = jnp.minimum(t_index * t, v - t)
        w_tile = jax.lax.dynamic_slice_in_dim(weight, start, t, v_axis).astype(cd)
        z_CT = jax.lax.dot_general(h_CD.astype(cd), w_tile, _head_dims(layout), preferred_element_type=jnp.float32)
        col_T = start + jnp.arange(t)
        return z_CT, w_tile, col_T, col_T >= t_index * t  # fresh: not already seen by the previous tile

    def forward(h_ND, weight, y_N, w_N):
        n, d, v, t, n_tiles, c, pad = geometry(h_ND, weight)

        def chunk(_, xs):
            h_CD, y_C = xs

            def tile(carry, i):
                m_C, s_C, gold_C = carry
                z_CT, _, col_T, fresh_T = tile_logits(h_CD, weight, i, t, v)
                z_CT = jnp.where(fresh_T[None, :], z_CT, -jnp.inf)
                m_new = jnp.maximum(m_C, jnp.max(z_CT, axis=1))
                s_C = s_C * jnp.exp(m_C - m_new) + jnp.sum(jnp.exp(z_CT - m_new[:, None]), axis=1)
                hit_CT = (col_T[None, :] == y_C[:, None]) & fresh_T[None, :]
                return (m_new, s_C, gold_C + jnp.sum(jnp.where(hit_CT, z_CT, 0.0), axis=1)), None

            zeros = jnp.zeros(y_C.shape, jnp.float32)
            (m_C, s_C, gold_C), _ = jax.lax.scan(tile, (zeros - jnp.inf, zeros, zeros), jnp.arange(n_tiles))
            return None, (m_C + jnp.log(s_C), gold_C)

        _, (lse, gold) = jax.lax.scan(chunk, None, (chunks(h_ND, c, pad), chunks(y_N, c, pad)))
        lse_N, gold_N = lse.reshape(-1)[:n], gold.reshape(-1)[:n]
        return jnp.sum(w_N.astype(jnp.float32) * (lse_N - gold_N)), lse_N, gold_N

    @jax.custom_vjp
    def nll(h_ND, weight, y_N, w_N):
        return forward(h_ND, weight, y_N, w_N)[0]

    def fwd(h_ND, weight, y_N, w_N):
        total, lse_N, gold_N = forward(h_ND.value, weight.value, y_N.value, w_N.value)
        flags = (h_ND.perturbed, weight.perturbed, w_N.perturbed)
        return total, (h_ND.value, weight.value, y_N.value, w_N.value, lse_N, gold_N, flags)

    def bwd(res, g):
        h_ND, weight, y_N, w_N, lse_N, gold_N, (want_h, want_w, want_wn) = res
        if isinstance(g, jax.custom_derivatives.SymbolicZero):
            return None, None, None, None
        g = g.astype(jnp.float32)
        n, d, v, t, n_tiles, c, pad = geometry(h_ND, weight)
        scale_N = g * w_N.astype(jnp.float32)

        def chunk(dW, xs):
            h_CD, y_C, s_C, lse_C = xs

            def tile(carry, i):
                dW, dh_CD = carry
                z_CT, w_tile, col_T, fresh_T = tile_logits(h_CD, weight, i, t, v)
                p_CT = jnp.where(fresh_T[None, :], jnp.exp(z_CT - lse_C[:, None]), 0.0)
                hit_CT = ((col_T[None, :] == y_C[:, None]) & fresh_T[None, :]).astype(jnp.float32)
                dz_CT = (s_C[:, None] * (p_CT - hit_CT)).astype(cd)
                if want_h:
                    back = (((1,), (v_axis,)), ((), ()))  # dz_CT · W_tile over the tile's columns
                    dh_CD = dh_CD + jax.lax.dot_general(dz_CT, w_tile, back, preferred_element_type=jnp.float32)
                if want_w:
                    start = jnp.minimum(i * t, v - t)
                    if layout == "VD":
                        dw = jax.lax.dot_general(dz_CT, h_CD.astype(cd), (((0,), (0,)), ((), ())),
                                                 preferred_element_type=jnp.float32)
                    else:
                        dw = jax.lax.dot_general(h_CD.astype(cd), dz_CT, (((0,), (0,)), ((), ())),
                                                 preferred_element_type=jnp.float32)
                    old = jax.lax.dynamic_slice_in_dim(dW, start, t, v_axis)
                    dW = jax.lax.dynamic_update_slice_in_dim(dW, old + dw.astype(dW.dtype), start, v_axis)
                return (dW, dh_CD), None

            (dW, dh_CD), _ = jax.lax.scan(tile, (dW, jnp.zeros(h_CD.shape, jnp.float32)), jnp.arange(n_tiles))
            return dW, dh_CD

        dW0 = jnp.zeros(weight.shape, weight.dtype) if want_w else None
        dW, dh = jax.lax.scan(chunk, dW0, (chunks(h_ND, c, pad), chunks(y_N, c, pad), chunks(scale_N, c, pad),
                                           chunks(lse_N, c, pad)))
        dh_ND = dh.reshape(-1, d)[:n].astype(h_ND.dtype) if want_h else None
        dw_N = (g * (lse_N - gold_N)).astype(w_N.dtype) if want_wn else None
        return dh_ND, dW if want_w else None, None, dw_N

    nll.defvjp(fwd, bwd, symbolic_zeros=True)
    return nll


def tiled_masked_mean_nll(
    final_BSD: Float[Array, "B S D"],
    weight: Float[Array, "V D"] | Float[Array, "D V"],
    tokens_BS: Int[Array, "B S"],
    target_mask_BS: Float[Array, "B S"],
    *,
    layout: str,
    compute_dtype,
    row_chunk: int,
    vocab_tile: int,
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """:func:`masked_mean_nll` of the head ``weight`` on ``final_BSD`` (positions 0 … S−2 predict tokens 1 … S−1)
    through :func:`head_nll_sum`: (mean NLL over the targets, number of targets)."""
    b, s, d = final_BSD.shape
    w_N = target_mask_BS[:, 1:].reshape(-1).astype(jnp.float32)
    total = head_nll_sum(final_BSD[:, :-1].reshape(-1, d), weight, tokens_BS[:, 1:].reshape(-1), w_N,
                         layout=layout, compute_dtype=compute_dtype, row_chunk=row_chunk, vocab_tile=vocab_tile)
    count = jnp.sum(w_N)
    return total / jnp.maximum(count, 1.0), count
