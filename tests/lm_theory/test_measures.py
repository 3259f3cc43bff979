"""Attention measures: hand-computed per-occurrence, per-fact and column values; fact spans; partial correlation."""

import jax
import numpy as np
from flax import nnx

from cfka_jax.lm_theory import biography as bio
from cfka_jax.lm_theory import measures as ms
from cfka_jax.lm_theory.attention import attention_mass
from cfka_jax.lm_theory.stats import partial_correlate
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.presets import BIOGRAPHY
from tests.tolerances import F32, F64

# One chunk of 7 tokens; token 1 repeats at positions 1, 3, 5. Example 0: query 5, context 0 … 5, fact span 3 … 5;
# example 1: query 3, context 1 … 3, fact span 2 … 3. Only query rows 3 and 5 attend.
TOKENS = np.array([[5, 1, 2, 1, 3, 1, 4]])
ROW5 = np.array([0.1, 0.2, 0.05, 0.3, 0.15, 0.2, 0.0])
ROW3 = np.array([0.0, 0.5, 0.25, 0.25, 0.0, 0.0, 0.0])
EX = {"chunk": np.array([0, 0]), "q": np.array([5, 3]), "start": np.array([0, 1]), "fact": np.array([3, 2])}


def _hand_measures():
    a = np.zeros((1, 2, 7, 7))  # (B, N, S, T): head 1 is a linear head with the scores −2 × head 0
    a[0, 0, 5], a[0, 0, 3] = ROW5, ROW3
    a[0, 1] = -2.0 * a[0, 0]
    ex = {"b": np.zeros(2, np.int32), "q": EX["q"], "start": EX["start"], "fact": EX["fact"],
          "valid": np.ones(2, bool)}
    masses = jax.jit(lambda *x: ms.head_masses(*x, num_tokens=6))((a,), TOKENS, ex, np.ones(1, bool))
    denoms = ms.denominators(TOKENS, EX["chunk"], EX["q"], EX["start"], EX["fact"], num_tokens=6)
    return ms.per_type({k: np.asarray(v, np.float64) for k, v in masses.items()}, denoms)


def test_per_occurrence_measure_equals_the_hand_computed_value():
    z = _hand_measures()
    # token 1: example 0 holds it 3 times (0.2 + 0.3 + 0.2) / 3, example 1 twice (0.5 + 0.25) / 2; n_1 = 2
    want_1 = ((0.2 + 0.3 + 0.2) / 3 + (0.5 + 0.25) / 2) / 2
    np.testing.assert_allclose(z["occurrence"][0, 0, 1], want_1, rtol=F32.exact_rtol)
    np.testing.assert_allclose(z["occurrence"][0, 1, 1], 2 * want_1, rtol=F32.exact_rtol)  # |−2 A| per head
    np.testing.assert_allclose(z["context"][0, 0, 1], (0.7 + 0.75) / 2, rtol=F32.exact_rtol)
    # token 5 (only in example 0's context, once): both measures 0.1 / 1; token 2 once in each context
    np.testing.assert_allclose(z["occurrence"][0, 0, [5, 2]], [0.1, (0.05 + 0.25) / 2], rtol=F32.exact_rtol)
    np.testing.assert_allclose(z["context"][0, 0, [5, 2]], [0.1, (0.05 + 0.25) / 2], rtol=F32.exact_rtol)


def test_per_fact_and_column_measures_equal_the_hand_computed_values():
    z = _hand_measures()
    # fact spans: example 0 positions 3 … 5 (tokens 1, 3, 1), example 1 positions 2 … 3 (tokens 2, 1)
    np.testing.assert_allclose(z["fact"][0, 0, [1, 3, 2, 5]], [(0.3 + 0.2 + 0.25) / 2, 0.15, 0.25, 0.0],
                               rtol=F32.exact_rtol, atol=F32.one_ulp)
    # column sums over the query rows: token 3 sits at j = 4 (colsum 0.15), token 1 at j = 1, 3, 5
    col = ROW5 + ROW3
    np.testing.assert_allclose(z["column_j1"][0, 0, 3], 0.15 / 5, rtol=F32.exact_rtol)
    np.testing.assert_allclose(z["column_nq"][0, 0, 3], 0.15 / 3, rtol=F32.exact_rtol)
    want_j1 = (col[1] / 2 + col[3] / 4 + col[5] / 6) / 3
    np.testing.assert_allclose(z["column_j1"][0, 0, 1], want_j1, rtol=F32.exact_rtol)


def test_covariates_are_the_mean_repeat_count_and_distance():
    cov = ms.covariates(TOKENS, EX["chunk"], EX["q"], EX["start"], num_tokens=6)
    np.testing.assert_allclose(cov[1], [(3 + 2) / 2, ((5 - 1) + (5 - 3) + 0 + (3 - 1) + 0) / 5], rtol=F64.direct_rtol)
    np.testing.assert_allclose(cov[4], [0.0, 0.0])


def test_sentence_start_of_a_hand_built_biography():
    idx, idx2 = np.array([36, 23, 49, 64, 11]), np.array([40, 27, 51, 65, 13])  # value spans, in document order
    assert [bio.sentence_start(idx, idx2, a) for a in range(5)] == [28, 14, 41, 52, 0]


def test_fact_span_is_exactly_the_subject_and_relation_of_its_sentence(bundle):
    ex = bio.examples(bundle, "pt_train", bio.object_vocabulary(bundle))
    fact = bio.fact_starts(bundle, "pt_train", ex)
    packed, tok = bundle.eval["pt_train"][0], bundle.splits["pt_train"]
    period = bundle.tokenizer(".", add_special_tokens=False)["input_ids"]
    for k in range(len(ex.objects)):
        span = packed.tokens[ex.chunk[k], fact[k]:ex.query[k] + 1]
        d, a = ex.doc[k], ex.attr[k]
        in_doc = packed.doc_starts[d] - ex.chunk[k] * packed.seq_len  # document start in chunk coordinates
        assert ex.start[k] <= fact[k] <= ex.query[k]
        assert ex.query[k] - in_doc == tok.idx[d, a] - 1  # the span ends right before the value
        if fact[k] > ex.start[k]:  # not cut by the chunk start: the span starts a sentence
            assert fact[k] - in_doc == 0 or packed.tokens[ex.chunk[k], fact[k] - 1] in period
            name = bundle.world.people[int(ex.pid[k])].fullname
            assert name in bundle.tokenizer.decode(span)
        lo, hi = fact[k] - in_doc, tok.idx[d, a]
        assert not np.any((tok.idx2[d] > lo) & (tok.idx[d] < hi))  # no value token of any fact inside


def test_context_measure_pooled_over_heads_is_the_panels_attention(bundle):
    model = build_model(BIOGRAPHY["smoke"], "qwen", len(bundle.tokenizer), seed=1)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    ex = bio.examples(bundle, "pt_train", bio.object_vocabulary(bundle))
    keep = ex.chunk < 3
    fact = bio.fact_starts(bundle, "pt_train", ex)
    packed, m = bundle.eval["pt_train"][0], len(bundle.tokenizer)
    got = ms.measure_masses(graphdef, params, rest, packed, ex.chunk[keep], ex.query[keep], ex.start[keep],
                            fact[keep], num_tokens=m, batch_size=2)
    want = attention_mass(graphdef, params, rest, packed, ex.chunk[keep], ex.query[keep], ex.start[keep],
                          num_tokens=m, batch_size=2)
    np.testing.assert_allclose(got["context"].mean(1), want, rtol=F32.exact_rtol, atol=F32.few_ulps)
    assert set(got) == set(ms.MEASURES) and got["fact"].sum() <= got["context"].sum()


def test_partial_correlation_matches_the_first_order_formula():
    rng = np.random.default_rng(3)
    c = rng.normal(size=200)
    a, b = c + rng.normal(size=200), -0.5 * c + rng.normal(size=200)
    r = np.corrcoef(np.stack([a, b, c]))
    want = (r[0, 1] - r[0, 2] * r[1, 2]) / np.sqrt((1 - r[0, 2] ** 2) * (1 - r[1, 2] ** 2))
    got = partial_correlate(a, b, c[:, None], num_boot=50)
    np.testing.assert_allclose(got.pearson, want, rtol=F64.solve_rtol)
    assert got.pearson_ci[0] <= got.pearson <= got.pearson_ci[1]
    assert abs(got.pearson) < 0.2 < abs(r[0, 1])  # the shared covariate made a and b look correlated
