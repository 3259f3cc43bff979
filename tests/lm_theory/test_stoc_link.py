"""The STOC link: selection counts from STOC's own rule, and the overlap with the lowest-DI tokens."""

import numpy as np
import pytest

from cfka_jax.continual.stoc import attention_scores, select_spans
from cfka_jax.lm_theory.stoc_link import overlap, selection_counts
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.presets import BIOGRAPHY


def test_overlap_of_aligned_and_opposed_rankings():
    m = 40
    di = np.arange(m, dtype=float)  # token 0 has the lowest DI
    total = np.full(m, 10)
    eligible = np.ones(m, bool)
    aligned = overlap(di, (m - np.arange(m)) // 4, total, eligible, fraction=0.1)
    assert aligned["overlap"] == 1.0 and aligned["k"] == 4 and aligned["chance"] == pytest.approx(0.1)
    assert aligned["spearman_rate_di"] < -0.9 and aligned["lowest_di"] == [0, 1, 2, 3]
    opposed = overlap(di, np.arange(m) // 4, total, eligible, fraction=0.1)
    assert opposed["overlap"] == 0.0 and opposed["spearman_rate_di"] > 0.9
    few = overlap(di, np.arange(m) // 4, np.where(np.arange(m) < 10, 1, 10), eligible, min_occurrences=5)
    assert few["n"] == 30 and min(few["top_stoc"] + few["lowest_di"]) >= 10
    with pytest.raises(ValueError, match="eligible"):
        overlap(di, total, total, np.zeros(m, bool))
    with pytest.raises(ValueError, match="fraction"):
        overlap(di, total, total, eligible, fraction=0.0)


def test_selection_counts_follow_stocs_spans(bundle):
    model = build_model(BIOGRAPHY["smoke"], "qwen", len(bundle.tokenizer), seed=0)
    docs = bundle.splits["cpt_train"].docs()[:6]
    m = len(bundle.tokenizer)
    selected, total = selection_counts(model, docs, num_tokens=m, batch_size=4)
    np.testing.assert_array_equal(total, np.bincount(np.concatenate(docs), minlength=m))
    expected = np.zeros(m, np.int64)
    for doc, s in zip(docs, attention_scores(model, docs, batch_size=4)):
        inside = np.zeros(len(doc), bool)
        for lo, hi in select_spans(s, rule="token_argmax", span_len=3, top_k=3):
            inside[lo:hi] = True
        np.add.at(expected, doc[inside], 1)
    np.testing.assert_array_equal(selected, expected)
    assert 0 < selected.sum() <= 9 * len(docs)
