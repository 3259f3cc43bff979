"""STOC and the Diversity Index: do the tokens STOC selects (highest attention) have the lowest DI? (spec §6.1)

STOC's rationale is that high-attention tokens are low-DI tokens that "lock" specific facts. On one trained
model: STOC scores every source document with its own rule (``continual/stoc.attention_scores`` and
``select_spans``, reference switches by default: ÷ (j + 1), per-token argmax spans of 3, top 3), and each token
type s gets its selection rate

    r_s = (occurrences of s inside a selected span) / (occurrences of s in the source documents).

Among the n token types that have a DI and occur at least ``min_occurrences`` times in the sources, let A be the
k = ⌈fraction · n⌉ types with the highest r_s (ties broken by token id) and B the k with the lowest DI. The
overlap |A ∩ B| / k is compared with its chance level k / n (the expected overlap of a random A of size k), and
the Spearman correlation of r_s with DI over the n types is reported as well (negative = STOC prefers low DI).
"""

from __future__ import annotations

import math

import numpy as np
from flax import nnx

from cfka_jax.continual.stoc import attention_scores, select_spans
from cfka_jax.lm_theory.stats import spearman


def selection_counts(model: nnx.Module, docs: list[np.ndarray], *, num_tokens: int, norm: str = "j_plus_1",
                     rule: str = "token_argmax", span_len: int = 3, top_k: int = 3,
                     batch_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(selected occurrences, all occurrences) per token type (M,) of STOC's spans over ``docs``."""
    scores = attention_scores(model, docs, norm=norm, batch_size=batch_size)
    selected, total = np.zeros(num_tokens, np.int64), np.zeros(num_tokens, np.int64)
    for doc, s in zip(docs, scores):
        np.add.at(total, doc, 1)
        inside = np.zeros(len(doc), bool)
        for lo, hi in select_spans(s, rule=rule, span_len=span_len, top_k=top_k):
            inside[lo:hi] = True
        np.add.at(selected, doc[inside], 1)
    return selected, total


def overlap(di: np.ndarray, selected: np.ndarray, total: np.ndarray, eligible: np.ndarray, *,
            fraction: float = 0.1, min_occurrences: int = 5) -> dict:
    """Overlap of the top-k STOC-selected and the k lowest-DI token types (module docstring).

    Args:
      di: DI per token type (M,); selected, total: from :func:`selection_counts`.
      eligible: bool (M,), token types that have a DI (e.g. enough examples in the DI corpus).
      fraction: k / n.
      min_occurrences: minimum occurrences of a type in the STOC sources.

    Raises:
      ValueError: ``fraction`` outside (0, 1] or fewer than 3 token types left.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    ids = np.flatnonzero(eligible & (total >= min_occurrences))
    if ids.size < 3:
        raise ValueError(f"only {ids.size} token types are eligible for the STOC overlap")
    rate = selected[ids] / total[ids]
    k = max(1, math.ceil(fraction * ids.size))
    top_stoc = set(ids[np.lexsort((ids, -rate))[:k]].tolist())
    low_di = set(ids[np.lexsort((ids, di[ids]))[:k]].tolist())
    return {"n": int(ids.size), "k": k, "overlap": len(top_stoc & low_di) / k, "chance": k / ids.size,
            "spearman_rate_di": spearman(rate, di[ids]), "top_stoc": sorted(top_stoc), "lowest_di": sorted(low_di)}
