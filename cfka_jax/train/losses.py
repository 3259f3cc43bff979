"""Token-level language-model losses (pure functions; computed in float32 whatever the parameter dtype)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float, Int


def next_token_nll(logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"]) -> Float[Array, "B S-1"]:
    """−log p(tokens[:, s+1] | tokens[:, :s+1]) for s = 0 … S−2, in float32 (float64 for float64 logits)."""
    dtype = jnp.float64 if logits_BSV.dtype == jnp.float64 else jnp.float32
    logp_BSV = jax.nn.log_softmax(logits_BSV[:, :-1].astype(dtype), axis=-1)
    return -jnp.take_along_axis(logp_BSV, tokens_BS[:, 1:, None], axis=-1)[..., 0]


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
