"""The one padded-batch iterator of every evaluation: fixed-size row blocks, so each jitted scorer compiles once.

Every evaluator forwards N rows (packed chunks, prompts, documents) ``batch_size`` at a time. :func:`row_blocks`
yields each block as ``batch_size`` row indices; the last block is filled with copies of its own first row, and
``valid`` marks the real rows. A copy is a real row of the data (no made-up padding values reach the model) and
its outputs are discarded, or its weights zeroed, by the caller. Rows of a batch never interact in a decoder
forward pass, so the real rows' results do not depend on the fill.

``stride = k`` keeps only every k-th block (the reference's ≈ 1/24 subsample of evaluation chunks, quirk M1:
blocks [i, i + B) for i = 0, k·B, 2k·B, …). ``order`` visits rows in a given order (longest prompts first).
:func:`right_pad` turns ragged sequences (prompts, documents) of a block into one ``B × width`` array.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from cfka_jax.models.generate import pad_prompts


class Block(NamedTuple):
    """Row indices of one batch (int64, length ``batch_size``) and which of them are real (bool)."""

    rows: np.ndarray
    valid: np.ndarray

    @property
    def num_valid(self) -> int:
        return int(self.valid.sum())


def row_blocks(num_rows: int, batch_size: int, *, stride: int = 1,
               order: Sequence[int] | np.ndarray | None = None) -> Iterator[Block]:
    """Blocks of ``batch_size`` row indices covering ``order`` (default ``range(num_rows)``), every
    ``stride``-th block only.

    Raises:
      ValueError: ``batch_size`` or ``stride`` < 1, or no rows.
    """
    if batch_size < 1 or stride < 1:
        raise ValueError(f"batch_size and stride must be >= 1, got {batch_size}, {stride}")
    if num_rows < 1:
        raise ValueError("nothing to evaluate: zero rows")
    order = np.arange(num_rows) if order is None else np.asarray(order, np.int64)
    for lo in range(0, len(order), batch_size * stride):
        real = order[lo:lo + batch_size]
        rows = np.concatenate([real, np.full(batch_size - len(real), real[0], np.int64)])
        yield Block(rows.astype(np.int64), np.arange(batch_size) < len(real))


def take(array: np.ndarray, block: Block, *, zero_invalid: bool = False) -> np.ndarray:
    """``array[block.rows]`` (rows on axis 0); with ``zero_invalid`` the fill rows are zeroed (weights, masks)."""
    out = np.asarray(array)[block.rows]
    if zero_invalid:
        out = out * block.valid.reshape((-1,) + (1,) * (out.ndim - 1)).astype(out.dtype)
    return out


def right_pad(seqs: Sequence[Sequence[int]], rows: np.ndarray, *, width: int | None = None,
              pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens int32 B × width, lengths int32 B)`` of ``seqs[rows]`` right-padded with ``pad_id``
    (``models/generate.pad_prompts``, widened to ``width``; default: the longest selected sequence).

    Raises:
      ValueError: an empty sequence, or one longer than ``width``.
    """
    tokens, lengths = pad_prompts([seqs[i] for i in rows], pad_id)
    width = tokens.shape[1] if width is None else width
    if tokens.shape[1] > width:
        raise ValueError(f"sequence of length {tokens.shape[1]} does not fit width {width}")
    return np.pad(tokens, ((0, 0), (0, width - tokens.shape[1])), constant_values=pad_id), lengths
