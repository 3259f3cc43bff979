"""Packing documents into fixed-length chunks (spec cfka_stoc.md §3.7, §4.3, §5.1; decisions §11 rows 6–7).

Documents (each normally ending with its EOS) are concatenated in a given order and cut into consecutive chunks of
S tokens; the final partial chunk is padded with EOS. ``loss_mask[c, s]`` says whether token s of chunk c is a
training target, predicted from position s − 1, so a loss reads

    Σ_{s ≥ 1} loss_mask[c, s] · CE(logits[c, s − 1], tokens[c, s]).

Column 0 is never a target (the shift), padding is never a target, and a token whose predecessor (in the
concatenated stream) is EOS is never a target: the first token of every document is not trained, the
document-final EOS is. The rule looks at tokens, not document boundaries, so sequences without a trailing EOS
(generated replay) run into the next document exactly as in the reference.

Default (the reference, ``doc_mask=False``): no document masking; positions run 0 … S−1 over the chunk.
``doc_mask=True``: attention may be restricted with ``segment_ids`` (1, 2, … per document piece inside a chunk,
0 for padding; attend iff equal), and ``positions`` restart at 0 at every document piece.

Shapes use the legend of ``cfka_jax/shapes.py``: B rows (one per chunk; batches are row slices), S positions per
chunk; besides, n documents, 5 attributes (``ATTRIBUTES``) and m scored value occurrences.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from cfka_jax.data.templates import ATTRIBUTES


@dataclasses.dataclass(frozen=True)
class Packed:
    """Packed chunks (all arrays B × S unless noted).

    Attributes:
      tokens: int32 ids; padding is EOS.
      loss_mask: bool, token s is a training target (module docstring).
      segment_ids: int32, 1-based document piece within the chunk, 0 for padding.
      positions: int32 position ids (continuous, or restarting per piece with ``doc_mask``).
      doc_ids: int32 index of the source document in the input list, −1 for padding.
      doc_starts: int64 (n,) offset of each input document in the concatenated stream (input index order).
      doc_mask: whether attention is meant to be restricted to the document (``segment_ids``).
    """

    tokens: np.ndarray
    loss_mask: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    doc_ids: np.ndarray
    doc_starts: np.ndarray
    doc_mask: bool = False

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[1]

    @property
    def num_chunks(self) -> int:
        return self.tokens.shape[0]


def epoch_order(num_docs: int, seed: int, epoch: int) -> np.ndarray:
    """The document order of one epoch: a permutation drawn from (seed, epoch) (reshuffled every epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(num_docs)


def pack(docs: list[np.ndarray], seq_len: int, eos_id: int, *, order: np.ndarray | None = None,
         doc_mask: bool = False) -> Packed:
    """Concatenate ``docs`` (in ``order``; default file order) and cut chunks of ``seq_len`` tokens.

    Raises:
      ValueError: ``seq_len < 2``, no tokens, or ``order`` not a permutation of the documents.
    """
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    n = len(docs)
    order = np.arange(n) if order is None else np.asarray(order)
    if sorted(order.tolist()) != list(range(n)):
        raise ValueError("order must be a permutation of range(len(docs))")
    lens = np.array([len(docs[i]) for i in order], dtype=np.int64)
    total = int(lens.sum())
    if total == 0:
        raise ValueError("nothing to pack: no tokens")
    num_chunks = math.ceil(total / seq_len)
    flat = np.full(num_chunks * seq_len, eos_id, dtype=np.int32)
    flat[:total] = np.concatenate([np.asarray(docs[i], dtype=np.int32) for i in order])
    starts_in_order = np.concatenate([[0], np.cumsum(lens)[:-1]])
    doc_starts = np.empty(n, np.int64)
    doc_starts[order] = starts_in_order
    doc_of = np.full(flat.shape, -1, np.int32)
    doc_of[:total] = np.repeat(order.astype(np.int32), lens)
    target = _targets(flat, total, seq_len, eos_id)
    seg, pos = _segments(doc_of, doc_starts, total, seq_len, doc_mask)
    shape = (num_chunks, seq_len)
    return Packed(flat.reshape(shape), target.reshape(shape), seg.reshape(shape), pos.reshape(shape),
                  doc_of.reshape(shape), doc_starts, doc_mask)


def _targets(flat: np.ndarray, total: int, seq_len: int, eos_id: int) -> np.ndarray:
    target = np.ones(flat.shape, bool)
    target[1:] = flat[:-1] != eos_id
    target[::seq_len] = False
    target[total:] = False
    return target


def _segments(doc_of, doc_starts, total: int, seq_len: int, doc_mask: bool):
    """Per-token segment ids (1-based piece within the chunk, 0 = padding) and position ids."""
    idx = np.arange(len(doc_of), dtype=np.int64)
    chunk_start = (idx // seq_len) * seq_len
    real = doc_of >= 0
    piece_start = np.where(real, np.maximum(doc_starts[np.maximum(doc_of, 0)], chunk_start),
                           np.maximum(total, chunk_start))
    new_piece = np.ones(len(doc_of), bool)
    new_piece[1:] = piece_start[1:] != piece_start[:-1]
    new_piece[::seq_len] = True
    seg = np.cumsum(new_piece.reshape(-1, seq_len), axis=1).reshape(-1)
    seg = np.where(real, seg, 0).astype(np.int32)
    pos = (idx - piece_start) if doc_mask else (idx - chunk_start)
    return seg, pos.astype(np.int32)


@dataclasses.dataclass(frozen=True)
class FtaTargets:
    """First value tokens inside packed chunks, for hFTA/sFTA (§5.1).

    The prediction for an occurrence at (chunk, pos) is read from logits[chunk, pos − 1]; occurrences at
    chunk position 0 have no in-chunk prediction and are dropped (§5.4 M4; counted in ``num_dropped``).

    Attributes:
      chunk, pos, attr, doc, token: int32 (m,) coordinates, attribute index, source document, expected id.
        Two attributes may share a position (first match can land on the same tokens), so the lists, not one
        dense map, are the truth; ``mask`` gives the reference's per-attribute dense mask.
      num_dropped: occurrences dropped at position 0.
    """

    chunk: np.ndarray
    pos: np.ndarray
    attr: np.ndarray
    doc: np.ndarray
    token: np.ndarray
    num_dropped: int

    def mask(self, attr: int, shape: tuple[int, int]) -> np.ndarray:
        """Bool (B, S): positions holding the first value token of attribute ``attr``."""
        out = np.zeros(shape, bool)
        sel = self.attr == attr
        out[self.chunk[sel], self.pos[sel]] = True
        return out


def fta_targets(packed: Packed, idx: np.ndarray) -> FtaTargets:
    """Map per-document value starts ``idx`` (n × 5, document-relative) into chunk coordinates.

    Raises:
      ValueError: ``idx`` rows do not match the packed documents.
    """
    n = len(packed.doc_starts)
    if idx.shape != (n, len(ATTRIBUTES)):
        raise ValueError(f"idx must have shape ({n}, {len(ATTRIBUTES)}), got {idx.shape}")
    flat_pos = packed.doc_starts[:, None] + idx.astype(np.int64)
    chunk, pos = np.divmod(flat_pos, packed.seq_len)
    doc = np.broadcast_to(np.arange(n)[:, None], idx.shape)
    attr = np.broadcast_to(np.arange(len(ATTRIBUTES))[None, :], idx.shape)
    keep = pos != 0
    chunk, pos, doc, attr = chunk[keep], pos[keep], doc[keep], attr[keep]
    as32 = lambda x: x.astype(np.int32)  # noqa: E731
    return FtaTargets(as32(chunk), as32(pos), as32(attr), as32(doc), packed.tokens[chunk, pos].astype(np.int32),
                      int((~keep).sum()))
