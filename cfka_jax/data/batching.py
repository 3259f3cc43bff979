"""Deterministic training batches over packed epochs: batch t is a pure function of (documents, seed, t).

Epoch e packs the documents in the order ``epoch_order(n, seed, e)`` (the reference reshuffles and re-packs every
epoch, spec §3.7); its chunks are consumed in order, ``batch_size`` at a time, dropping the last partial batch.
Because batch t depends only on t, a resumed run sees exactly the batches of an uninterrupted one.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from cfka_jax.data.packing import Packed, epoch_order, pack


class EpochBatcher:
    """``batcher(t)`` → the batch dict of step t (tokens, target_mask, positions)."""

    def __init__(self, docs: list[np.ndarray], *, seq_len: int, eos_id: int, batch_size: int, seed: int,
                 doc_mask: bool = False):
        if not docs:
            raise ValueError("EpochBatcher needs at least one document")
        self.docs, self.seq_len, self.eos_id = docs, seq_len, eos_id
        self.batch_size, self.seed, self.doc_mask = batch_size, seed, doc_mask
        self._packs: dict[int, Packed] = {}  # the last two packed epochs of this batcher
        if self.steps_per_epoch < 1:
            raise ValueError(f"{self._epoch(0).num_chunks} chunks cannot fill one batch of {batch_size}")

    def _epoch(self, epoch: int) -> Packed:
        if epoch not in self._packs:
            order = epoch_order(len(self.docs), self.seed, epoch)
            self._packs = {k: v for k, v in self._packs.items() if k == epoch - 1}
            self._packs[epoch] = pack(self.docs, self.seq_len, self.eos_id, order=order, doc_mask=self.doc_mask)
        return self._packs[epoch]

    @property
    def steps_per_epoch(self) -> int:
        return self._epoch(0).num_chunks // self.batch_size

    def __call__(self, step: int) -> dict:
        epoch, i = divmod(int(step), self.steps_per_epoch)
        packed = self._epoch(epoch)
        rows = slice(i * self.batch_size, (i + 1) * self.batch_size)
        return packed_batch(packed, rows)


def packed_batch(packed: Packed, rows: slice) -> dict:
    """The model batch of ``packed`` rows: tokens, float target mask, position ids, and segment ids when the pack
    was built with document masking (attention then stays inside each document)."""
    batch = {
        "tokens": jnp.asarray(packed.tokens[rows], jnp.int32),
        "target_mask": jnp.asarray(packed.loss_mask[rows], jnp.float32),
        "positions": jnp.asarray(packed.positions[rows], jnp.int32),
    }
    if packed.doc_mask:
        batch["segment_ids"] = jnp.asarray(packed.segment_ids[rows], jnp.int32)
    return batch
