"""Fluency (average soft token accuracy) against a direct per-token loop over the model's logits."""

import jax
import numpy as np
import pytest

from cfka_jax.eval.fluency import fluency, fluency_layout, soft_token_sums
from cfka_jax.train.step import make_eval_logits
from tests.helpers import VOCAB, split, tiny_model
from tests.tolerances import F32

EOS, SEQ = 0, 7


@pytest.fixture(scope="module")
def setup():
    model = tiny_model(seed=3)
    graphdef, params, rest = split(model)
    rng = np.random.default_rng(0)
    lens = [5, 9, 4, 6, 3, 8, 5]
    docs = [np.append(rng.integers(1, VOCAB, size=n - 1), EOS).astype(np.int32) for n in lens]
    idx = np.array([2, 4, 1, 3, 1, 0, 2], np.int32)  # the sixth answer starts at its document's first token
    forward = jax.jit(lambda tokens: model(tokens).logits)  # the module itself, not the split/merge eval path
    return forward, make_eval_logits(graphdef, rest), params, docs, idx


def _softmax(logits):
    z = np.exp(logits - logits.max())
    return z / z.sum()


def _loop_packed(forward, docs, idx, chunks=None):
    """The reference by hand: concatenate, cut SEQ-token chunks, forward each alone, read p(gold | chunk prefix)."""
    stream = np.concatenate(docs)
    stream = np.append(stream, np.full(-len(stream) % SEQ, EOS)).astype(np.int32)
    logits = np.asarray(forward(stream.reshape(-1, SEQ)))  # every chunk alone: rows never see each other
    probs, dropped, start = [], 0, 0
    for d, i in zip(docs, idx):
        for s in range(int(i), len(d)):
            c, q = divmod(start + s, SEQ)
            if chunks is not None and c not in chunks:
                continue
            if q == 0:
                dropped += 1
            else:
                probs.append(_softmax(logits[c][q - 1])[stream[start + s]])
        start += len(d)
    return float(np.mean(probs)), len(probs), dropped


def _loop_alone(forward, docs, idx):
    """Each sequence with only its own prefix as context. By causality, the logits at s < len(d) of a row that
    continues d with arbitrary tokens (no attention mask) are those of d alone: one forward pass for all."""
    width = max(len(d) for d in docs)
    rows = np.random.default_rng(1).integers(1, VOCAB, size=(len(docs), width)).astype(np.int32)
    for r, d in zip(rows, docs):
        r[:len(d)] = d
    logits = np.asarray(forward(rows))
    probs = []
    for lg, d, i in zip(logits, docs, idx):
        probs += [_softmax(lg[s - 1])[d[s]] for s in range(max(int(i), 1), len(d))]
    return float(np.mean(probs)), len(probs)


def test_packed_matches_direct_loop(setup):
    forward, logits_fn, params, docs, idx = setup
    want, n, dropped = _loop_packed(forward, docs, idx)
    assert dropped > 0  # the fixture puts scored tokens at chunk position 0
    layout = fluency_layout(docs, idx, mode="packed", seq_len=SEQ, eos_id=EOS)
    got = fluency(logits_fn, params, layout, batch_size=3)  # 7 chunks: the last batch is padded
    np.testing.assert_allclose(got["fluency"], want, rtol=F32.exact_rtol)
    assert got["n"] == n and got["dropped_pos0"] == dropped


def test_per_example_matches_each_sequence_alone(setup):
    forward, logits_fn, params, docs, idx = setup
    want, n = _loop_alone(forward, docs, idx)
    layout = fluency_layout(docs, idx, mode="per_example", eos_id=EOS)
    got = fluency(logits_fn, params, layout, batch_size=3)
    np.testing.assert_allclose(got["fluency"], want, rtol=F32.exact_rtol)
    assert got["n"] == n and got["dropped_pos0"] == 1
    packed = fluency(logits_fn, params, fluency_layout(docs, idx, seq_len=SEQ, eos_id=EOS), batch_size=3)
    assert abs(packed["fluency"] - got["fluency"]) > 1e-4  # context from earlier examples changes the score


def test_stride_reads_the_reference_subsample(setup):
    forward, logits_fn, params, docs, idx = setup
    layout = fluency_layout(docs, idx, seq_len=SEQ, eos_id=EOS)
    got = fluency(logits_fn, params, layout, batch_size=3, stride=2)  # rows [0, 3) and [6, 7) of 7 chunks
    want, n, dropped = _loop_packed(forward, docs, idx, chunks={0, 1, 2, 6})
    np.testing.assert_allclose(got["fluency"], want, rtol=F32.exact_rtol)
    assert got["n"] == n and got["dropped_pos0"] == dropped


def test_soft_sums_ignore_unmasked_non_finite_rows():
    logits = np.zeros((2, 3, 5), np.float32)
    logits[1] = np.nan
    tokens = np.array([[1, 2, 3], [1, 2, 3]], np.int32)
    mask = np.array([[1, 1, 0], [0, 0, 0]], np.float32)  # column 0 never counts
    s, c = jax.jit(soft_token_sums)(logits, tokens, mask)
    np.testing.assert_allclose(float(s), 0.2, rtol=F32.few_ulps)
    assert float(c) == 1.0


def test_layout_checks():
    docs = [np.array([3, 4, 0], np.int32)]
    with pytest.raises(ValueError):
        fluency_layout(docs, np.array([3]), eos_id=0)
    with pytest.raises(ValueError):
        fluency_layout(docs, np.array([1]), mode="chunked", eos_id=0)
    with pytest.raises(ValueError):
        fluency_layout([], np.array([], np.int32), eos_id=0)
