"""First-token accuracy (hFTA, sFTA) and exact match (spec cfka_stoc.md §5.1, §5.2).

At every position s ≥ 1 of a test chunk that holds the first token of an attribute value (``mask_ABS[a, b, s] = 1``;
position 0 is dropped as in the reference), the model's prediction comes from logits[b, s − 1]:

    hard_a += 1[argmax_v logits = tokens[s]],     soft_a += softmax(logits)[tokens[s]]   (full vocabulary).

hFTA / sFTA per attribute = sums / counts; the micro-average is Σ correct / Σ counts over attributes. A whole
packed set is scored in fixed-size row blocks (``eval/batches.py``), forwarded with the chunks' position ids and no
attention mask as the reference does; ``stride = 24`` reproduces its ≈ 1/24 subsample (quirk M1).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.data.packing import FtaTargets, Packed
from cfka_jax.eval.batches import row_blocks, take
from cfka_jax.eval.sets import named_sets
from cfka_jax.data.templates import ATTRIBUTES
from cfka_jax.shapes import Array, Float, Int
from cfka_jax.train.step import make_eval_logits


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


def fta(logits_fn, params, packed: Packed, targets: FtaTargets, *, batch_size: int = 16, stride: int = 1) -> dict:
    """{'hFTA', 'sFTA', 'hFTA/<attr>', 'sFTA/<attr>', 'n'} of ``logits_fn(params, batch)`` on ``packed`` (with
    segment ids when the set was packed with document masking)."""
    counts = FTACounts(*(jnp.zeros(len(ATTRIBUTES), jnp.float32),) * 3)
    shape = packed.tokens.shape
    masks_BAS = np.stack([targets.mask(a, shape) for a in range(len(ATTRIBUTES))], axis=1).astype(np.float32)
    for block in row_blocks(packed.num_chunks, batch_size, stride=stride):
        batch = {"tokens": jnp.asarray(take(packed.tokens, block), jnp.int32),
                 "positions": jnp.asarray(take(packed.positions, block), jnp.int32)}
        if packed.doc_mask:
            batch["segment_ids"] = jnp.asarray(take(packed.segment_ids, block), jnp.int32)
        mask_ABS = jnp.asarray(np.moveaxis(take(masks_BAS, block, zero_invalid=True), 1, 0))
        counts = add_counts(counts, _counts(logits_fn(params, batch), batch["tokens"], mask_ABS))
    return summarize(counts, ATTRIBUTES)


_counts = jax.jit(fta_counts)


def fta_evaluator(graphdef, rest, eval_sets: dict, *, batch_size: int = 16, stride: int = 1, compute_dtype=None):
    """``evaluate(params, step)`` computing hFTA/sFTA on each named ``(packed, targets)`` set (``Original/sFTA``…).

    Raises:
      ValueError: no set, or a set without a single scored value occurrence.
    """
    for name, (_, targets) in eval_sets.items():
        if len(targets.chunk) == 0:
            raise ValueError(f"FTA set {name!r} has no scored value occurrence")
    logits_fn = make_eval_logits(graphdef, rest, compute_dtype)
    return named_sets({name: (lambda params, s=s: fta(logits_fn, params, *s, batch_size=batch_size, stride=stride))
                       for name, s in eval_sets.items()})
