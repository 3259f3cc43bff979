"""hFTA/sFTA of a model over a packed evaluation set (spec §5.1): forward every chunk, count, summarise.

The reference evaluates all chunks with no attention mask in file order (``eval.stride = 1``); ``stride = 24``
reproduces its ≈ 1/24 subsample (rows [i, i + batch) for i = 0, 24·batch, …; quirk M1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.continual.metrics import FTACounts, add_counts, fta_counts, summarize
from cfka_jax.data.packing import FtaTargets, Packed
from cfka_jax.data.templates import ATTRIBUTES


def eval_rows(num_chunks: int, batch_size: int, stride: int) -> list[slice]:
    """Row blocks to evaluate: every block (stride 1) or the reference's every ``stride``-th block."""
    if stride < 1 or batch_size < 1:
        raise ValueError(f"stride and batch_size must be >= 1, got {stride}, {batch_size}")
    return [slice(i, min(i + batch_size, num_chunks)) for i in range(0, num_chunks, batch_size * stride)]


def fta(logits_fn, params, packed: Packed, targets: FtaTargets, *, batch_size: int = 16, stride: int = 1) -> dict:
    """{'hFTA', 'sFTA', 'hFTA/<attr>', 'sFTA/<attr>', 'n'} of ``logits_fn(params, batch)`` on ``packed``.

    Chunks are forwarded with their position ids and no attention mask, as the reference does (with segment ids
    when the set was packed with document masking).
    """
    counts = FTACounts(*(jnp.zeros(len(ATTRIBUTES), jnp.float32),) * 3)
    count_fn = jax.jit(fta_counts)
    shape = packed.tokens.shape
    masks = np.stack([targets.mask(a, shape) for a in range(len(ATTRIBUTES))]).astype(np.float32)
    for rows in eval_rows(packed.num_chunks, batch_size, stride):
        tokens = np.asarray(packed.tokens[rows])
        pad = batch_size - tokens.shape[0]  # keep one compiled shape: pad the last block with ignored rows
        batch = {"tokens": jnp.asarray(np.pad(tokens, ((0, pad), (0, 0))), jnp.int32),
                 "positions": jnp.asarray(np.pad(packed.positions[rows], ((0, pad), (0, 0))), jnp.int32)}
        if packed.doc_mask:
            batch["segment_ids"] = jnp.asarray(np.pad(packed.segment_ids[rows], ((0, pad), (0, 0))), jnp.int32)
        mask = jnp.asarray(np.pad(masks[:, rows], ((0, 0), (0, pad), (0, 0))))
        counts = add_counts(counts, count_fn(logits_fn(params, batch), batch["tokens"], mask))
    return summarize(counts, ATTRIBUTES)
