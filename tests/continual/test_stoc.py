"""STOC token scores and snippet rules against explicit loops and hand-worked cases."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.continual import stoc
from tests.helpers import VOCAB, tiny_model
from tests.tolerances import F32


def _random_causal_attention(rng, b, s):
    a = rng.random((b, s, s)) * np.tril(np.ones((s, s)))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("norm", stoc.SCORE_NORMS)
def test_token_scores_match_a_loop_over_valid_queries(norm):
    rng = np.random.default_rng(0)
    abar = _random_causal_attention(rng, 3, 7)
    lengths = np.array([7, 4, 1], np.int32)
    got = np.asarray(stoc.token_scores(jnp.asarray(abar), jnp.asarray(lengths), norm))
    for b, length in enumerate(lengths):
        for j in range(7):
            if j >= length:
                assert got[b, j] == 0.0
                continue
            col = sum(abar[b, i, j] for i in range(j, length))
            denom = j + 1 if norm == "j_plus_1" else length - j
            np.testing.assert_allclose(got[b, j], col / denom, rtol=F32.exact_rtol)


def test_unknown_norm_raises():
    with pytest.raises(ValueError, match="score norm"):
        stoc.token_scores(jnp.zeros((1, 2, 2)), jnp.ones(1, jnp.int32), "mean")


@pytest.mark.parametrize("scan", [False, True], ids=["loop", "scan"])
def test_attention_scores_average_layers_and_query_heads_and_ignore_padding(scan):
    """The scores reduce each layer's map inside the layer (``attn_reduce``); the reference keeps every map."""
    model = tiny_model()  # 6 query heads sharing 2 KV heads (GQA)
    if scan:
        model = type(model)(dataclasses.replace(model.cfg, scan_layers=True), rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    docs = [rng.integers(1, VOCAB, size=n).astype(np.int32) for n in (9, 4, 13)]
    got = stoc.attention_scores(model, docs, norm="j_plus_1", batch_size=2, pad_to=8)
    for doc, scores in zip(docs, got):
        out = model(jnp.asarray(doc)[None], return_attn=True)  # alone, unpadded
        att = np.stack([np.asarray(a[0]) for a in out.attentions])  # L N S T
        assert att.shape[:2] == (2, 6)
        abar = att.mean(axis=(0, 1))
        expected = abar.sum(axis=0) / (np.arange(len(doc)) + 1)
        np.testing.assert_allclose(scores, expected, rtol=F32.exact_rtol, atol=F32.op_atol)
    assert nnx.state(model) is not None  # the model is left usable


def test_token_argmax_spans_hand_case():
    scores = np.array([0.1, 0.9, 0.2, 0.8, 0.05, 0.3])
    # picks 1 (uses 1..3), then 5 (span cut by the end: dropped), then 0 (overlaps the first span)
    assert stoc.token_argmax_spans(scores, span_len=3, top_k=3) == [(0, 3), (1, 4)]
    assert stoc.token_argmax_spans(scores, span_len=3, top_k=1) == [(1, 4)]
    assert stoc.token_argmax_spans(np.array([0.5, 0.4]), span_len=1, top_k=5) == [(0, 1), (1, 2)]


def test_window_sum_spans_hand_case():
    scores = np.array([0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 3.0])
    # windows of 2 over starts 0..5 (the last window [6, 8) is excluded): sums 1, 2, 1, 0, .5, 1
    assert stoc.window_sum_spans(scores, span_len=2, top_k=2) == [(1, 3), (0, 2)]
    assert stoc.window_sum_spans(scores, span_len=2, top_k=1, include_last_window=True) == [(6, 8)]
    assert stoc.window_sum_spans(scores[:2], span_len=2, top_k=3) == [(0, 2)]  # not longer than a span: whole
    # a pick masks only the starts [j*, j* + span): every start is eventually picked, left neighbours overlapping
    assert stoc.window_sum_spans(scores, span_len=2, top_k=10) == [(1, 3), (0, 2), (5, 7), (4, 6), (3, 5)]


def test_random_spans_are_distinct_complete_and_seeded():
    a = stoc.random_spans(np.random.default_rng(3), 20, span_len=3, top_k=3)
    b = stoc.random_spans(np.random.default_rng(3), 20, span_len=3, top_k=3)
    assert a == b and len({s for s, _ in a}) == 3
    assert all(0 <= s and e == s + 3 and e <= 20 for s, e in a)
    assert stoc.random_spans(np.random.default_rng(0), 2, span_len=3, top_k=3) == [(0, 2)]


def test_select_spans_rejects_unknown_rule():
    with pytest.raises(ValueError, match="snippet rule"):
        stoc.select_spans(np.ones(5), rule="best", span_len=2, top_k=1)
