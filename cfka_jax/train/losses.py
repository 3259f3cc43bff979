"""Token-level language-model losses (pure functions; computed in float32 whatever the parameter dtype)."""

from __future__ import annotations

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
