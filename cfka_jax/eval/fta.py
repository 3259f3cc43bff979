"""First-token accuracy (hFTA, sFTA) and exact match (spec cfka_stoc.md §5.1, §5.2).

At every position s ≥ 1 of a test chunk that holds the first token of an attribute value (``mask_ABS[a, b, s] = 1``;
position 0 is dropped as in the reference), the model's prediction comes from logits[b, s − 1]:

    hard_a += 1[argmax_v logits = tokens[s]],     soft_a += softmax(logits)[tokens[s]]   (full vocabulary).

hFTA / sFTA per attribute = sums / counts; the micro-average is Σ correct / Σ counts over attributes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.data.packing import FtaTargets, Packed
from cfka_jax.data.templates import ATTRIBUTES
from cfka_jax.shapes import Array, Float, Int


class FTACounts(NamedTuple):
    """Per-attribute sums (length A): hard hits, soft probability mass, and occurrence counts."""

    hard: Float[Array, " A"]
    soft: Float[Array, " A"]
    count: Float[Array, " A"]


def fta_counts(logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"],
               mask_ABS: Float[Array, "A B S"]) -> FTACounts:
    """Sums for one batch of chunks; ``mask_ABS[a, b, s] = 1`` where position s of row b holds the first value
    token of attribute a (two attributes may share a position). Column 0 is ignored (no in-chunk prediction)."""
    logits = logits_BSV[:, :-1].astype(jnp.float32)
    target = tokens_BS[:, 1:]
    mask = mask_ABS[:, :, 1:].astype(jnp.float32)
    hard = (jnp.argmax(logits, axis=-1) == target).astype(jnp.float32)
    soft = jnp.take_along_axis(jax.nn.softmax(logits, axis=-1), target[..., None], axis=-1)[..., 0]
    return FTACounts(jnp.einsum("bs,abs->a", hard, mask), jnp.einsum("bs,abs->a", soft, mask),
                     jnp.sum(mask, axis=(1, 2)))


def add_counts(a: FTACounts, b: FTACounts) -> FTACounts:
    return FTACounts(*(x + y for x, y in zip(a, b)))


def summarize(counts: FTACounts, attr_names: tuple[str, ...]) -> dict[str, float]:
    """{'hFTA/<attr>', 'sFTA/<attr>', 'hFTA', 'sFTA', 'n'}: per attribute and micro-averaged (0 if no occurrence)."""
    hard, soft, count = (np.asarray(x, np.float64) for x in counts)
    out: dict[str, float] = {}
    for i, name in enumerate(attr_names):
        out[f"hFTA/{name}"] = float(hard[i] / count[i]) if count[i] else 0.0
        out[f"sFTA/{name}"] = float(soft[i] / count[i]) if count[i] else 0.0
    total = count.sum()
    out["hFTA"] = float(hard.sum() / total) if total else 0.0
    out["sFTA"] = float(soft.sum() / total) if total else 0.0
    out["n"] = float(total)
    return out


def exact_match(generation: str, answer: str) -> bool:
    """The reference's EM test: the answer (leading space stripped) is a substring of the generation."""
    return answer.strip() in generation


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
