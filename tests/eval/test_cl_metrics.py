"""The stream measures on hand-built accuracy matrices, each value worked out by hand in the comments."""

import numpy as np
import pytest

from cfka_jax.eval.cl_metrics import forgetting, fuar, stream_metrics

# rows: after PT, stage 1, 2, 3; columns: task 0 (PT), 1, 2, 3
R = np.array([[0.80, 0.10, 0.10, 0.10],
              [0.60, 0.70, 0.10, 0.20],
              [0.50, 0.40, 0.90, 0.10],
              [0.40, 0.30, 0.50, 0.60]])


def test_stream_metrics_by_hand():
    m = stream_metrics(R)
    assert m["stages"] == 3
    np.testing.assert_allclose(m["avg_acc"], (0.3 + 0.5 + 0.6) / 3)
    np.testing.assert_allclose(m["avg_acc_all"], (0.4 + 0.3 + 0.5 + 0.6) / 4)
    np.testing.assert_allclose(m["bwt"], ((0.3 - 0.7) + (0.5 - 0.9)) / 2)           # tasks 1, 2
    np.testing.assert_allclose(m["bwt_pt"], 0.4 - 0.8)
    np.testing.assert_allclose(m["fwt"], ((0.10 - 0.10) + (0.10 - 0.10)) / 2)       # R[1,2]-R[0,2], R[2,3]-R[0,3]
    # task 0: max(0.8, 0.6, 0.5) - 0.4; task 1: max(0.7, 0.4) - 0.3; task 2: 0.9 - 0.5
    np.testing.assert_allclose(m["forgetting"], [0.4, 0.4, 0.4])
    np.testing.assert_allclose(m["avg_forgetting"], 0.4)
    # forgotten: 0.8 - 0.4 = 0.4; acquired: (0.3-0.1) + (0.5-0.1) + (0.6-0.1) = 1.1
    np.testing.assert_allclose(m["fuar"], 0.4 / 1.1)
    np.testing.assert_allclose(m["plasticity"], ((0.7 - 0.1) + (0.9 - 0.1) + (0.6 - 0.1)) / 3)
    np.testing.assert_allclose(m["stability"], (0.4 / 0.8 + 0.3 / 0.7 + 0.5 / 0.9) / 3)


def test_forward_transfer_and_forgetting_pick_the_right_cells():
    r = np.array([[0.5, 0.2, 0.1],
                  [0.3, 0.6, 0.4],      # stage 1 already helps task 2: R[1,2] - R[0,2] = 0.3
                  [0.45, 0.7, 0.8]])    # task 1 improves after its stage: forgetting max(0.6) - 0.7 < 0
    m = stream_metrics(r)
    np.testing.assert_allclose(m["fwt"], 0.3)
    np.testing.assert_allclose(forgetting(r), [0.5 - 0.45, 0.6 - 0.7])
    np.testing.assert_allclose(m["bwt"], 0.7 - 0.6)
    np.testing.assert_allclose(m["fuar"], 0.05 / ((0.7 - 0.2) + (0.8 - 0.1)))


def test_one_stage_and_undefined_cases():
    m = stream_metrics([[0.5, 0.1], [0.5, 0.1]])
    assert m["bwt"] is None and m["fwt"] is None
    assert m["fuar"] is None                       # nothing acquired: the paper's "n.d."
    np.testing.assert_allclose(m["plasticity"], 0.0)
    assert fuar([0.2, -0.1], [0.1], [0.3, -0.5]) == pytest.approx(0.2 / 0.4)
    assert fuar([], [], [0.1]) == 0.0


@pytest.mark.parametrize("bad", [np.zeros((2, 3)), np.zeros((1, 1)), [[0.1, np.nan], [0.2, 0.3]]])
def test_bad_matrices_are_refused(bad):
    with pytest.raises(ValueError, match="accuracy matrix"):
        stream_metrics(bad)
