"""Held-out perplexity of a causal LM over a packed set.

    nll = Σ_targets −log p(token | chunk prefix) / #targets,     ppl = exp(nll)

over the pack's ``loss_mask`` (every token but chunk starts and document starts, ``data/packing.py``). Rows are
forwarded with their positions and no attention mask, as in training, in fixed-size blocks
(``eval/batches.py``) whose fill rows carry zero weight; one jitted function of (params, batch).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from cfka_jax.data.packing import Packed
from cfka_jax.eval.batches import row_blocks, take
from cfka_jax.train.losses import masked_mean_nll


def perplexity_metric(logits_fn, packed: Packed, *, batch_size: int):
    """``metric(params) -> {'nll', 'ppl', 'tokens'}`` on ``packed``.

    Raises:
      ValueError: the set has no target token (a perplexity over nothing is not 1.0, it is undefined).
    """
    if not packed.loss_mask.any():
        raise ValueError(f"perplexity set of {packed.num_chunks} chunks has no target token")

    @jax.jit
    def nll_and_count(params, batch, mask_BS):
        return masked_mean_nll(logits_fn(params, batch), batch["tokens"], mask_BS)

    def metric(params) -> dict:
        total, count = 0.0, 0.0
        for block in row_blocks(packed.num_chunks, batch_size):
            batch = {"tokens": jnp.asarray(take(packed.tokens, block), jnp.int32),
                     "positions": jnp.asarray(take(packed.positions, block), jnp.int32)}
            mask = jnp.asarray(take(packed.loss_mask, block, zero_invalid=True), jnp.float32)
            mean, n = nll_and_count(params, batch, mask)
            total, count = total + float(mean) * float(n), count + float(n)
        nll = total / count
        return {"nll": nll, "ppl": math.exp(nll), "tokens": int(count)}

    return metric
