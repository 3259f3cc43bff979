"""The theory's per-fact retention prediction and the measured per-occurrence soft accuracy."""

import numpy as np
from flax import nnx

from cfka_jax.eval.fta import fta
from cfka_jax.lm_theory import biography as bio
from cfka_jax.lm_theory import retention as ret
from cfka_jax.lm_theory.cooccurrence import count_cooccurrence
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.train.step import make_eval_logits
from tests.tolerances import F32, F64


def _counts(contexts, objects, m=6, o=3):
    return count_cooccurrence(contexts, np.asarray(objects), num_tokens=m, num_objects=o)


def test_prediction_keeps_what_cpt_does_not_touch(x64):
    old = _counts([np.array([0, 3]), np.array([1, 3]), np.array([2, 3]), np.array([0, 4])], [0, 1, 2, 0])
    present = ret.presence([np.array([0, 3]), np.array([1, 3])], 6)
    objects = np.array([0, 1])
    # CPT data that shares no token with the old contexts: every column keeps U_old, nothing is forgotten
    disjoint = _counts([np.array([5])], [2])
    log_pt, log_cpt = ret.predicted_log_probs(old, disjoint, present, objects)
    np.testing.assert_allclose(log_cpt, log_pt, rtol=F64.direct_rtol)
    # CPT data that maps token 0 to object 2: the fact (token 0 → object 0) loses probability, fact 1 does not
    rewrite = _counts([np.array([0, 5]), np.array([0, 5])], [2, 2])
    log_pt, log_cpt = ret.predicted_log_probs(old, rewrite, present, objects)
    assert log_cpt[0] < log_pt[0] - 1.0
    np.testing.assert_allclose(log_cpt[1], log_pt[1], rtol=F64.direct_rtol)
    assert np.all(log_pt < 0) and np.all(np.isfinite(log_cpt))


def test_per_fact_and_compare():
    facts = np.array([[0, 1], [0, 1], [2, 0], [1, 4]])
    keys, means = ret.per_fact(facts, np.array([1.0, 3.0, 5.0, 7.0]))
    np.testing.assert_array_equal(keys, [[0, 1], [1, 4], [2, 0]])
    np.testing.assert_allclose(means, [2.0, 7.0, 5.0], rtol=F64.direct_rtol)
    rng = np.random.default_rng(0)
    facts = np.stack([np.arange(40) // 2, np.zeros(40, int)], axis=1)
    soft_pt = np.full(40, 0.9)
    pred = rng.normal(size=40)
    soft_cpt = soft_pt * (0.5 + 0.1 * np.repeat(np.arange(20), 2)[np.argsort(np.argsort(pred))] / 20)
    res = ret.compare(facts, soft_pt, soft_cpt, np.zeros(40), pred, num_boot=20)
    assert res["facts"] == 20 and res["known"] == 20 and "retention" in res
    none_known = ret.compare(facts, soft_pt * 0.1, soft_cpt, np.zeros(40), pred, num_boot=20)
    assert none_known["known"] == 0 and "retention" not in none_known


def test_example_soft_mean_is_sfta(bundle):
    graphdef, params, rest = nnx.split(build_model(BIOGRAPHY["smoke"], "qwen", len(bundle.tokenizer), seed=1),
                                       nnx.Param, ...)
    ex = bio.examples(bundle, "pt_test", bio.object_vocabulary(bundle))
    packed, targets = bundle.eval["pt_test"]
    soft = ret.example_soft(graphdef, params, rest, packed, ex.chunk, ex.query, batch_size=5)
    assert soft.shape == ex.chunk.shape and np.all(soft > 0)
    sfta = fta(make_eval_logits(graphdef, rest), params, packed, targets)["sFTA"]
    np.testing.assert_allclose(soft.mean(), sfta, rtol=F32.exact_rtol)
