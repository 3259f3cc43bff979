"""Teacher-forced object accuracy (partial credit, id 0 compared like any id, empty masks) and LAMA-CKL metrics."""

import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.data.ckl_encode import Encoded
from cfka_jax.eval.knowledge_probes import ckl_summary, evaluate_probes, make_probe_scorer, probe_scores
from tests.tolerances import F32


def _logits_predicting(pred_BS, v=5):
    """Logits whose argmax at position s is pred[:, s] (one-hot times 10)."""
    return 10.0 * jnp.eye(v)[jnp.asarray(pred_BS)]


def test_partial_credit_and_id_zero():
    tokens = jnp.array([[3, 1, 0, 2], [3, 4, 4, 4]], jnp.int32)
    # predictions for targets 1..3: row 0 gets 1 and 0 right (id 0 counts), 2 wrong; row 1 gets 4, 4 right
    pred = jnp.array([[1, 0, 4, 0], [4, 4, 1, 0]], jnp.int32)
    y = jnp.array([[0, 1, 1, 1], [0, 1, 1, 0]], jnp.float32)
    acc, nll, n = probe_scores(_logits_predicting(pred), tokens, y)
    np.testing.assert_allclose(np.asarray(acc), [2 / 3, 1.0], rtol=F32.exact_rtol)
    np.testing.assert_array_equal(np.asarray(n), [3, 2])
    assert float(nll[1]) < 1e-3 < float(nll[0])


def test_evaluate_probes_batches_and_counts_empty_masks():
    ids = tuple(np.array([0, 2, 3, 1][:k], np.int32) for k in (4, 3, 4))
    masks = (np.array([0, 0, 1, 1], np.float32), np.array([0, 0, 1], np.float32), np.zeros(4, np.float32))
    enc = Encoded(ids, masks, 1)
    scorer = make_probe_scorer(lambda p, batch: _logits_predicting(jnp.roll(batch["tokens"], -1, axis=1)))
    res = evaluate_probes(scorer, None, enc, batch_size=2)
    np.testing.assert_allclose(res.per_example_acc, [1.0, 1.0, 0.0], rtol=F32.exact_rtol)
    assert res.empty == 1 and np.isnan(res.per_example_nll[2]) and np.isfinite(res.nll)
    assert res.acc == pytest.approx(2 / 3)


def test_ckl_summary():
    s = ckl_summary([0.0, 0.2, 0.5, 0.5, 0.4], [0.9, 0.8, 0.7, 0.6, 0.5])
    assert s == {"top_acc": 0.5, "epoch": 2, "nf_acc": 0.7, "total_knowledge": 1.2}
    with pytest.raises(ValueError, match="equal"):
        ckl_summary([0.1], [0.1, 0.2])
