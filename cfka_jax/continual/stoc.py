"""STOC token scores and snippet rules (spec cfka_stoc.md §6.2–§6.4; decisions #16–#18, #24).

For one sequence of length L (a source document, EOS included), let Ā[i, j] be the post-softmax attention
probability of query i on key j averaged uniformly over the L_layers layers and the N query heads (with GQA each
query head uses its shared key/value head, so averaging over query heads is the per-query-head tensor the
reference averages). Under causal attention key j is seen by the L − j queries i ≥ j, and its column sum is

    c_j = Σ_{i=j}^{L−1} Ā[i, j].

Token score, switch ``norm``:

    j_plus_1   s_j = c_j / (j + 1)     (reference; favours early positions, including the attention sink at 0)
    n_queries  s_j = c_j / (L − j)     (the mean attention key j receives from the queries that can see it)

Snippet rules, all returning ``(start, end)`` spans into the sequence:

* ``token_argmax`` (synthetic reference, span 3): ``top_k`` times, j* = argmax of s over unused positions,
  span [j*, j* + span), mark those positions used; spans are sorted and spans cut short by the sequence end
  are dropped. Spans may overlap when j* lies just left of a used block (as in the reference).
* ``window_sum`` (real reference, span 10): if L ≤ span the whole sequence is the one span; otherwise window
  sums W_j = Σ_{k<span} s_{j+k} over starts j ∈ [0, L − span) (``include_last_window`` adds j = L − span, the
  window ending on the final token, which the reference excludes); ``top_k`` greedy picks, after each pick only
  the starts [j*, j* + span) are masked, so windows starting to the left may overlap.
* ``random_spans`` (the Random baseline, decision #24): ``top_k`` distinct starts drawn uniformly from
  [0, L − span] (the whole sequence when L ≤ span): same count and length as STOC, positions by chance.
  ``avoid`` (a token id, EOS) keeps only starts whose span does not hold it, so no prompt is LAMOL's EOS prompt.
* ``first_spans`` (the position-only control of ÷ (j + 1)): the spans [i·span, (i + 1)·span), i < ``top_k``,
  i.e. the first top_k × span tokens of each source cut into STOC's span length (complete spans only).
* ``vocab_spans`` (Random made of the vocabulary): ``top_k`` prompts of ``span`` token ids drawn uniformly from
  ``allowed`` (the tokenizer's ids without special tokens): no position, no source text at all.

The scores are one jitted pure function of the model state (:func:`attention_scores`); span selection is a few
numpy operations per sequence.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.eval.batches import right_pad, row_blocks
from cfka_jax.shapes import Array, Bool, Float, Int

SCORE_NORMS = ("j_plus_1", "n_queries")
SNIPPET_RULES = ("token_argmax", "window_sum")


def mean_attention(attentions: tuple[Float[Array, "B N S T"], ...], *, per_layer: bool = False,
                   magnitude: bool = False) -> Float[Array, "B S T"] | Float[Array, "L B S T"]:
    """Ā = mean_{l,n} A^{l,n}: the attention maps (one ``B N S T`` array per layer) averaged uniformly over layers
    and query heads, in float32: STOC's map, and the one mean-attention of the package.

    ``per_layer``: Ā^l = mean_n A^{l,n}, stacked over layers (``L B S T``; ``lm_theory/attention``);
    ``magnitude``: average |A| instead of A (a linear-attention head's sign is not identifiable; the identity on
    post-softmax weights).
    """
    f = (lambda a: jnp.abs(a.astype(jnp.float32))) if magnitude else (lambda a: a.astype(jnp.float32))  # noqa: E731
    if per_layer:
        return jnp.stack([jnp.mean(f(a), axis=1) for a in attentions])
    return jnp.mean(jnp.stack([f(a) for a in attentions]), axis=(0, 2))


def token_scores(abar_BST: Float[Array, "B S T"], lengths_B: Int[Array, " B"], norm: str) -> Float[Array, "B T"]:
    """s_j per row (module docstring); rows are right-padded, queries i ≥ L_b are ignored, s_j = 0 for j ≥ L_b."""
    valid_BT = jnp.arange(abar_BST.shape[-1], dtype=jnp.int32)[None, :] < lengths_B[:, None]
    return scores_from_colsum(jnp.einsum("bst,bs->bt", abar_BST, valid_BT.astype(jnp.float32)), lengths_B, norm)


def query_colsum(probs_BNST: Float[Array, "B N S T"], mask_BST: Bool[Array, "B S T"]) -> Float[Array, "B T"]:
    """One layer's contribution to Ā's column sums over valid queries, ``Σ_{s valid} mean_n probs[b, n, s, t]``
    (query s is valid iff it may attend to itself, ``mask[b, s, s]``): the per-layer reduction STOC passes as
    the model's ``attn_reduce``, so the S×T maps of different layers are never alive together."""
    valid_BS = jnp.diagonal(mask_BST, axis1=1, axis2=2).astype(jnp.float32)
    return jnp.einsum("bnst,bs->bt", probs_BNST.astype(jnp.float32), valid_BS) / probs_BNST.shape[1]


def scores_from_colsum(colsum_BT: Float[Array, "B T"], lengths_B: Int[Array, " B"], norm: str) -> Float[Array, "B T"]:
    """s_j from the column sums of Ā over valid queries, normalised by ``norm``; 0 for j ≥ L_b."""
    if norm not in SCORE_NORMS:
        raise ValueError(f"score norm must be one of {SCORE_NORMS}, got {norm!r}")
    t = colsum_BT.shape[-1]
    j_T = jnp.arange(t, dtype=jnp.int32)
    valid_BT = j_T[None, :] < lengths_B[:, None]
    if norm == "j_plus_1":
        denom_BT = jnp.broadcast_to((j_T + 1).astype(jnp.float32)[None, :], colsum_BT.shape)
    else:
        denom_BT = jnp.maximum(lengths_B[:, None] - j_T[None, :], 1).astype(jnp.float32)
    return jnp.where(valid_BT, colsum_BT / denom_BT, 0.0)


def scores_pure(graphdef, state, tokens_BS: Int[Array, "B S"], lengths_B: Int[Array, " B"], *,
                norm: str) -> Float[Array, "B S"]:
    """Forward right-padded sequences with attention probabilities and return their token scores."""
    model = nnx.view(nnx.merge(graphdef, state), only=nnx.Dropout, deterministic=True, raise_if_not_found=False)
    mask_BS = jnp.arange(tokens_BS.shape[1], dtype=jnp.int32)[None, :] < lengths_B[:, None]
    out = model(tokens_BS, attention_mask_BT=mask_BS.astype(jnp.int32), return_attn=True, attn_reduce=query_colsum)
    colsum_BT = jnp.mean(jnp.stack(out.attentions), axis=0)  # L reduced [B, T] arrays, not L maps
    return scores_from_colsum(colsum_BT, lengths_B, norm)


@functools.lru_cache(maxsize=8)
def _compiled_scores(graphdef, norm: str):
    return jax.jit(functools.partial(scores_pure, graphdef, norm=norm))


def attention_scores(model: nnx.Module, docs: list[np.ndarray], *, norm: str = "j_plus_1", batch_size: int = 32,
                     pad_to: int = 64) -> list[np.ndarray]:
    """Token scores (float32, one array of length L per document) of ``model`` on ``docs``.

    Fixed-size blocks (``eval/batches.py``) right-padded to a multiple of ``pad_to``, so a corpus compiles a
    handful of programs at most.

    Raises:
      ValueError: an empty document (named by index).
    """
    graphdef, state = nnx.split(model)
    fn = _compiled_scores(graphdef, norm)
    out: list[np.ndarray] = []
    for block in row_blocks(len(docs), batch_size):
        longest = max(len(docs[i]) for i in block.rows)
        tokens, lengths = right_pad(docs, block.rows, width=int(-(-longest // pad_to) * pad_to))
        scores = np.asarray(fn(state, jnp.asarray(tokens), jnp.asarray(lengths)))
        out.extend(scores[r, :lengths[r]] for r in np.flatnonzero(block.valid))
    return out


def token_argmax_spans(scores: np.ndarray, *, span_len: int, top_k: int) -> list[tuple[int, int]]:
    """Per-token argmax spans (§6.2): complete spans of ``span_len`` around the ``top_k`` best unused tokens."""
    length = len(scores)
    used = np.zeros(length, bool)
    starts = []
    for _ in range(top_k):
        masked = np.where(used, -np.inf, scores)
        j = int(np.argmax(masked))
        if not np.isfinite(masked[j]) or masked[j] < 0:
            break
        starts.append(j)
        used[j:j + span_len] = True
    return [(j, j + span_len) for j in sorted(starts) if j + span_len <= length]


def window_sum_spans(scores: np.ndarray, *, span_len: int, top_k: int,
                     include_last_window: bool = False) -> list[tuple[int, int]]:
    """Sliding-window-sum spans (§6.3): the ``top_k`` best windows, masking only the starts of each pick."""
    length = len(scores)
    if length <= span_len:
        return [(0, length)]
    num = length - span_len + (1 if include_last_window else 0)
    csum = np.concatenate([[0.0], np.cumsum(scores, dtype=np.float64)])
    sums = csum[span_len:span_len + num] - csum[:num]
    blocked = np.zeros(num, bool)
    spans = []
    for _ in range(top_k):
        if blocked.all():
            break
        j = int(np.argmax(np.where(blocked, -np.inf, sums)))
        spans.append((j, j + span_len))
        blocked[j:j + span_len] = True
    return spans


def random_spans(rng: np.random.Generator, length: int, *, span_len: int, top_k: int,
                 doc: np.ndarray | None = None, avoid: int | None = None) -> list[tuple[int, int]]:
    """``top_k`` distinct uniformly random complete spans (the whole sequence when it is not longer than a span).

    With ``doc`` and ``avoid``: only starts whose span ``doc[j:j + span_len]`` holds no ``avoid`` token (a document
    shorter than a span gives its ``avoid``-free prefix, or nothing)."""
    if avoid is not None and doc is not None:
        bad = np.asarray(doc) == avoid
        if length <= span_len:
            end = int(np.argmax(bad)) if bad.any() else length
            return [(0, end)] if end else []
        window_bad = np.convolve(bad.astype(np.int32), np.ones(span_len, np.int32), mode="valid") > 0
        ok = np.flatnonzero(~window_bad)
        starts = rng.choice(ok, size=min(top_k, len(ok)), replace=False) if len(ok) else []
        return [(int(j), int(j) + span_len) for j in sorted(starts)]
    if length <= span_len:
        return [(0, length)]
    starts = rng.choice(length - span_len + 1, size=min(top_k, length - span_len + 1), replace=False)
    return [(int(j), int(j) + span_len) for j in sorted(starts)]


def first_spans(length: int, *, span_len: int, top_k: int) -> list[tuple[int, int]]:
    """The first ``top_k`` complete spans [i·span_len, (i + 1)·span_len) (the whole sequence if shorter than one)."""
    if length <= span_len:
        return [(0, length)]
    return [(i * span_len, (i + 1) * span_len) for i in range(top_k) if (i + 1) * span_len <= length]


def vocab_spans(rng: np.random.Generator, allowed: np.ndarray, *, span_len: int, top_k: int) -> list[tuple[int, ...]]:
    """``top_k`` prompts of ``span_len`` token ids drawn uniformly (with replacement) from ``allowed``."""
    if len(allowed) == 0:
        raise ValueError("vocab_spans needs at least one allowed token id")
    return [tuple(int(t) for t in rng.choice(allowed, size=span_len)) for _ in range(top_k)]


def select_spans(scores: np.ndarray, *, rule: str, span_len: int, top_k: int,
                 include_last_window: bool = False) -> list[tuple[int, int]]:
    """Dispatch on the snippet rule (``token_argmax`` | ``window_sum``)."""
    if rule == "token_argmax":
        return token_argmax_spans(scores, span_len=span_len, top_k=top_k)
    if rule == "window_sum":
        return window_sum_spans(scores, span_len=span_len, top_k=top_k, include_last_window=include_last_window)
    raise ValueError(f"snippet rule must be one of {SNIPPET_RULES}, got {rule!r}")
