"""Packing: EOS separators, loss masks, document masks, FTA coordinates, replay mixtures (§3.7, §4.3, §5.1)."""

import numpy as np
import pytest

from cfka_jax.data.packing import epoch_order, fta_targets, pack

EOS = 0
DOCS = [np.array([5, 6, 7, EOS]), np.array([8, 9, EOS]), np.array([3, 4, 5, 6, EOS])]


def test_hand_built_pack():
    p = pack(DOCS, 5, EOS)
    np.testing.assert_array_equal(p.tokens, [[5, 6, 7, 0, 8], [9, 0, 3, 4, 5], [6, 0, 0, 0, 0]])
    # column 0 never; token after EOS (8 at [0,4], 3 at [1,2]) never; final EOS of each doc yes; padding never
    np.testing.assert_array_equal(p.loss_mask.astype(int), [[0, 1, 1, 1, 0], [0, 1, 0, 1, 1], [0, 1, 0, 0, 0]])
    np.testing.assert_array_equal(p.segment_ids, [[1, 1, 1, 1, 2], [1, 1, 2, 2, 2], [1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(p.positions, np.tile(np.arange(5), (3, 1)))  # no doc mask: continuous
    np.testing.assert_array_equal(p.doc_ids, [[0, 0, 0, 0, 1], [1, 1, 2, 2, 2], [2, 2, -1, -1, -1]])
    assert list(p.doc_starts) == [0, 4, 7] and not p.doc_mask


def test_doc_mask_positions_restart():
    p = pack(DOCS, 5, EOS, doc_mask=True)
    assert p.doc_mask
    np.testing.assert_array_equal(p.positions, [[0, 1, 2, 3, 0], [0, 1, 0, 1, 2], [0, 1, 0, 1, 2]])
    np.testing.assert_array_equal(p.loss_mask, pack(DOCS, 5, EOS).loss_mask)  # same targets either way


def _random_docs(rng, n):
    return [np.append(rng.integers(1, 50, size=rng.integers(1, 30)), EOS) for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("doc_mask", [False, True])
def test_pack_properties(seed, doc_mask):
    rng = np.random.default_rng(seed)
    docs = _random_docs(rng, 23)
    order = epoch_order(len(docs), seed, 3)
    p = pack(docs, 17, EOS, order=order, doc_mask=doc_mask)
    flat, total = p.tokens.reshape(-1), sum(len(d) for d in docs)
    np.testing.assert_array_equal(flat[:total], np.concatenate([docs[i] for i in order]))
    assert (flat[total:] == EOS).all() and not p.loss_mask.reshape(-1)[total:].any() and len(flat) - total < 17
    for i, d in enumerate(docs):
        s = p.doc_starts[i]
        np.testing.assert_array_equal(flat[s:s + len(d)], d)
        assert not p.loss_mask.reshape(-1)[s]  # first token of a document is never a target
        end = s + len(d) - 1
        assert p.loss_mask.reshape(-1)[end] == (end % 17 != 0)  # the document-final EOS is a target
    assert not p.loss_mask[:, 0].any()
    same_doc = p.doc_ids[:, :, None] == p.doc_ids[:, None, :]
    np.testing.assert_array_equal(same_doc, p.segment_ids[:, :, None] == p.segment_ids[:, None, :])
    if doc_mask:  # positions count from the start of each document piece in the chunk
        first = np.concatenate([np.ones((p.num_chunks, 1), bool), p.segment_ids[:, 1:] != p.segment_ids[:, :-1]], 1)
        assert (p.positions[first] == 0).all() and (np.diff(p.positions)[~first[:, 1:]] == 1).all()


def test_sequences_without_eos_run_on():
    p = pack([np.array([4, 5]), np.array([6, 7, EOS])], 8, EOS)
    assert p.loss_mask[0, 2]  # 6 follows 5 (no EOS between): a target, as in the reference


def test_fta_targets_map_into_chunks():
    rng = np.random.default_rng(5)
    docs = _random_docs(rng, 15)
    docs = [np.concatenate([d, rng.integers(1, 50, size=5), [EOS]]) for d in docs]
    idx = np.stack([rng.integers(0, len(d) - 1, size=5) for d in docs])
    idx[0, 0] = 0  # doc 0 starts the stream: chunk position 0, dropped (§5.4 M4)
    p = pack(docs, 11, EOS, order=epoch_order(len(docs), 0, 0))
    f = fta_targets(p, idx)
    flat_pos = p.doc_starts[:, None] + idx
    expected = int((flat_pos % 11 == 0).sum())
    assert f.num_dropped == expected >= 1 and len(f.chunk) == idx.size - expected
    assert (f.pos > 0).all()
    for c, s, a, d, t in zip(f.chunk, f.pos, f.attr, f.doc, f.token):
        assert p.tokens[c, s] == t == docs[d][idx[d, a]] and f.mask(a, p.tokens.shape)[c, s]
    assert sum(f.mask(a, p.tokens.shape).sum() for a in range(5)) <= len(f.chunk)  # shared positions collapse
    with pytest.raises(ValueError, match="idx must have shape"):
        fta_targets(p, idx[:3])


def test_epoch_order_and_validation():
    assert np.array_equal(epoch_order(50, 1, 2), epoch_order(50, 1, 2))
    assert not np.array_equal(epoch_order(50, 1, 2), epoch_order(50, 1, 3))
    with pytest.raises(ValueError, match="permutation"):
        pack(DOCS, 5, EOS, order=np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="seq_len"):
        pack(DOCS, 1, EOS)
