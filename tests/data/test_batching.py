import numpy as np
import pytest

from cfka_jax.data.batching import EpochBatcher


def _docs(n=30, seed=0):
    rng = np.random.default_rng(seed)
    return [np.append(rng.integers(1, 50, size=int(rng.integers(3, 12))), 0).astype(np.int32) for _ in range(n)]


def test_batch_is_a_pure_function_of_the_step():
    a = EpochBatcher(_docs(), seq_len=16, eos_id=0, batch_size=4, seed=3)
    b = EpochBatcher(_docs(), seq_len=16, eos_id=0, batch_size=4, seed=3)
    for t in (0, 1, a.steps_per_epoch, 3 * a.steps_per_epoch + 1):
        np.testing.assert_array_equal(a(t)["tokens"], b(t)["tokens"])
    assert not np.array_equal(a(0)["tokens"], a(a.steps_per_epoch)["tokens"])  # reshuffled next epoch
    assert "segment_ids" not in a(0)


def test_document_mask_adds_segment_ids():
    batcher = EpochBatcher(_docs(), seq_len=16, eos_id=0, batch_size=4, seed=3, doc_mask=True)
    batch = batcher(0)
    assert batch["segment_ids"].shape == batch["tokens"].shape
    assert int(batch["positions"][0, 0]) == 0


def test_too_few_chunks_for_a_batch():
    with pytest.raises(ValueError, match="batch"):
        EpochBatcher(_docs(2), seq_len=64, eos_id=0, batch_size=8, seed=0)
