"""Token-level language-model losses (pure functions; computed in float32 whatever the parameter dtype)."""

from __future__ import annotations

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
