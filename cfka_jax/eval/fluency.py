"""KnowEdit "Fluency", the paper's average soft token accuracy (spec cfka_stoc.md §5.3; quirks M1, M10; decision #12).

Test sequence i (``cfka_jax/data/knowedit.py``) is x_i = tok(prompt) + tok(" " + truth) + [EOS] with answer start
idx_i. Its scored positions are A_i = {s : idx_i ≤ s < |x_i|} (every answer token and the final EOS), and

    Fluency = Σ_i Σ_{s ∈ A_i} softmax(logits(context of x_{i,s}))[x_{i,s}]  /  Σ_i |A_i|

a micro-average over tokens of the probability of the gold token (full vocabulary, T = 1). Two layouts decide the
context:

* ``'packed'`` (the reference, ``Real/continual_pretrain.py``): the sequences are concatenated in file order and cut
  into ``seq_len``-token chunks (last one EOS-padded, ``data/packing.pack``), forwarded with no attention mask and
  positions 0 … S−1. The context of a token is everything before it in its chunk, earlier examples included;
  examples straddle chunks (M10). A scored token at chunk position 0 has no in-chunk prediction: it is dropped and
  counted in ``dropped_pos0``.
* ``'per_example'`` (clean): every sequence alone, right-padded to the longest one with an attention mask; the
  context is the sequence's own prefix. Only an answer starting at position 0 (empty prompt) loses its first token.

``stride = 24`` evaluates only the reference's ≈ 1/24 row subsample (``eval/batches.row_blocks``, M1); rows are
chunks ('packed') or examples ('per_example'). Shapes: B rows, S positions, V vocabulary (``cfka_jax/shapes.py``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.eval.batches import Block, row_blocks, take
from cfka_jax.eval.sets import named_sets
from cfka_jax.data.packing import pack
from cfka_jax.shapes import Array, Float, Int
from cfka_jax.train.losses import gold_log_probs, shifted_log_softmax
from cfka_jax.train.step import make_eval_logits

MODES = ("packed", "per_example")


@dataclasses.dataclass(frozen=True)
class FluencyLayout:
    """Rows to forward (numpy, all B × S) and which tokens they score.

    Attributes:
      tokens, positions: int32 model inputs.
      score_mask: bool, token s of row b is scored (predicted from position s − 1); column 0 is always False.
      attention_mask: int32 1 keep / 0 pad ('per_example'), or None (no mask, 'packed').
      dropped_pos0: int64 (B,) scored tokens per row that sit at column 0 and are not scored.
    """

    tokens: np.ndarray
    positions: np.ndarray
    score_mask: np.ndarray
    attention_mask: np.ndarray | None
    dropped_pos0: np.ndarray

    @property
    def num_rows(self) -> int:
        return self.tokens.shape[0]


def _check(docs: list[np.ndarray], idx: np.ndarray) -> np.ndarray:
    idx = np.asarray(idx, np.int64)
    lens = np.array([len(d) for d in docs], np.int64)
    if idx.shape != lens.shape or np.any(idx < 0) or np.any(idx >= lens):
        raise ValueError(f"need one answer start 0 <= idx < len(doc) per document ({len(docs)} documents)")
    return idx


def _answer_offsets(lens: np.ndarray, idx: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Offsets starts[i] + s for every s in [idx[i], lens[i]) (all documents, concatenated)."""
    n_scored = lens - idx
    first = np.repeat(starts + idx - np.cumsum(n_scored) + n_scored, n_scored)
    return first + np.arange(int(n_scored.sum()))


def packed_layout(docs: list[np.ndarray], idx: np.ndarray, *, seq_len: int, eos_id: int) -> FluencyLayout:
    """The reference layout: file-order chunks of ``seq_len`` tokens, no attention mask (module docstring)."""
    idx = _check(docs, idx)
    packed = pack(docs, seq_len, eos_id)
    lens = np.array([len(d) for d in docs], np.int64)
    chunk, pos = np.divmod(_answer_offsets(lens, idx, packed.doc_starts), seq_len)
    mask = np.zeros(packed.tokens.shape, bool)
    mask[chunk, pos] = True
    mask[:, 0] = False
    dropped = np.bincount(chunk[pos == 0], minlength=packed.num_chunks).astype(np.int64)
    return FluencyLayout(packed.tokens, packed.positions, mask, None, dropped)


def per_example_layout(docs: list[np.ndarray], idx: np.ndarray, *, eos_id: int) -> FluencyLayout:
    """One row per sequence, right-padded with EOS to the longest, attention mask on the real tokens."""
    idx = _check(docs, idx)
    lens = np.array([len(d) for d in docs], np.int64)
    n, width = len(docs), int(lens.max())
    tokens = np.full((n, width), eos_id, np.int32)
    for i, d in enumerate(docs):
        tokens[i, :len(d)] = d
    cols = np.arange(width)[None, :]
    attention = (cols < lens[:, None]).astype(np.int32)
    mask = (cols >= np.maximum(idx, 1)[:, None]) & (cols < lens[:, None])
    positions = np.broadcast_to(cols, (n, width)).astype(np.int32)
    return FluencyLayout(tokens, positions, mask, attention, (idx == 0).astype(np.int64))


def fluency_layout(docs: list[np.ndarray], idx: np.ndarray, *, mode: str = "packed", seq_len: int = 256,
                   eos_id: int) -> FluencyLayout:
    """``packed_layout`` or ``per_example_layout`` by ``mode``.

    Raises:
      ValueError: unknown mode, no documents, or an answer start outside its document.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not docs:
        raise ValueError("fluency needs at least one test sequence")
    if mode == "packed":
        return packed_layout(docs, idx, seq_len=seq_len, eos_id=eos_id)
    return per_example_layout(docs, idx, eos_id=eos_id)


def soft_token_sums(logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"],
                    mask_BS: Float[Array, "B S"]) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(Σ softmax(logits[b, s − 1])[tokens[b, s]] over masked s ≥ 1, number of masked s ≥ 1), in float32.

    Unmasked positions contribute exactly 0 even when their logits are not finite (padding rows)."""
    gold = gold_log_probs(shifted_log_softmax(logits_BSV), tokens_BS)
    keep = mask_BS[:, 1:] > 0
    return jnp.sum(jnp.where(keep, jnp.exp(gold), 0.0)), jnp.sum(keep.astype(jnp.float32))


_soft_sums = jax.jit(soft_token_sums)


def _batch(layout: FluencyLayout, block: Block) -> tuple[dict, jax.Array]:
    """The model batch of one row block (fill rows score nothing)."""
    batch = {"tokens": jnp.asarray(take(layout.tokens, block), jnp.int32),
             "positions": jnp.asarray(take(layout.positions, block), jnp.int32)}
    if layout.attention_mask is not None:
        batch["attention_mask"] = jnp.asarray(take(layout.attention_mask, block), jnp.int32)
    return batch, jnp.asarray(take(layout.score_mask, block, zero_invalid=True), jnp.float32)


def fluency(logits_fn, params, layout: FluencyLayout, *, batch_size: int = 16, stride: int = 1) -> dict:
    """{'fluency', 'n', 'dropped_pos0'} of ``logits_fn(params, batch)`` on ``layout`` (module docstring).

    Args:
      logits_fn: e.g. ``train/step.make_eval_logits(graphdef, rest, compute_dtype)``.
      params: the parameters passed to ``logits_fn``.
      layout: from ``fluency_layout``.
      batch_size: rows per forward pass.
      stride: 1 = every row; 24 = the reference's subsample (M1).

    Returns:
      fluency: mean gold-token probability over the scored tokens of the evaluated rows (0 if none);
      n: number of scored tokens; dropped_pos0: scored tokens lost at chunk position 0 in those rows.
    """
    total, count, dropped = 0.0, 0.0, 0
    for block in row_blocks(layout.num_rows, batch_size, stride=stride):
        batch, mask = _batch(layout, block)
        s, c = _soft_sums(logits_fn(params, batch), batch["tokens"], mask)
        total, count = total + float(s), count + float(c)
        dropped += int(layout.dropped_pos0[block.rows[block.valid]].sum())
    return {"fluency": total / count if count else 0.0, "n": count, "dropped_pos0": float(dropped)}


def fluency_evaluator(graphdef, rest, layouts: dict[str, FluencyLayout], *, batch_size: int = 16, stride: int = 1,
                      compute_dtype=None):
    """``evaluate(params, step)`` logging ``<set>/fluency``, ``<set>/n``, ``<set>/dropped_pos0`` for each layout.

    Raises:
      ValueError: no layout, or a layout without a scored token.
    """
    for name, layout in layouts.items():
        if not layout.score_mask.any():
            raise ValueError(f"fluency set {name!r} has no scored token")
    logits_fn = make_eval_logits(graphdef, rest, compute_dtype)
    return named_sets({name: (lambda params, lay=lay: fluency(logits_fn, params, lay, batch_size=batch_size,
                                                               stride=stride)) for name, lay in layouts.items()})
