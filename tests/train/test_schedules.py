"""The re-warm / re-decay schedule family (train/optim.py) and the TensorBoard sink (train/tracking.py)."""

import struct

import numpy as np
import pytest

from cfka_jax.train.optim import OptimConfig, lr_schedule, stage_optim
from cfka_jax.train.tracking import Tracker, TrackingConfig, scalars
from tests.tolerances import F32

BASE = OptimConfig(peak_lr=1e-3, min_lr=1e-4, warmup_steps=10, total_steps=110)


def _lr(cfg, steps):
    sched = lr_schedule(cfg)
    return np.array([float(sched(t)) for t in steps])


def test_constant_then_decay_holds_the_peak_then_cosines_to_the_floor():
    cfg = stage_optim(BASE, stage=2, decay="constant", decay_steps=20)
    assert cfg.decay_start == 90
    got = _lr(cfg, [5, 10, 50, 90, 100, 110])
    want = [5e-4, 1e-3, 1e-3, 1e-3, 1e-4 + 0.9e-3 * 0.5, 1e-4]
    np.testing.assert_allclose(got, want, rtol=F32.few_ulps * 10)
    assert OptimConfig(decay="constant", total_steps=110, warmup_steps=10).decay_start == 90   # default: last 20 %


def test_rewarm_restarts_each_stage_and_none_continues_at_the_floor():
    again = stage_optim(BASE, stage=3, rewarm="rewarm", peak_lr=5e-4)
    np.testing.assert_allclose(_lr(again, [0, 10, 110]), [0.0, 5e-4, 1e-4], rtol=F32.few_ulps * 10)
    np.testing.assert_allclose(_lr(BASE, [0, 60]), _lr(stage_optim(BASE, stage=1, rewarm="none"), [0, 60]))
    flat = stage_optim(BASE, stage=2, rewarm="none")
    np.testing.assert_allclose(_lr(flat, [0, 1, 55, 110]), [1e-4] * 4, rtol=F32.few_ulps * 10)


@pytest.mark.parametrize("kwargs, match", [(dict(rewarm="sometimes"), "rewarm"), (dict(stage=0), "stage"),
                                           (dict(peak_lr=1e-5), "peak"), (dict(decay="linear"), "decay"),
                                           (dict(decay="cosine", decay_steps=5), "decay_steps")])
def test_bad_stage_schedules_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        stage_optim(BASE, **{"stage": 2, **kwargs})


def _events(path):
    """(tag, step, value) of a TFRecord event file (length, crc, payload, crc), parsed with tensorboardX's proto."""
    from tensorboardX.proto import event_pb2

    data, out, i = path.read_bytes(), [], 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        ev = event_pb2.Event.FromString(data[i + 12:i + 12 + n])
        i += 12 + n + 4
        out += [(v.tag, ev.step, v.simple_value) for v in ev.summary.value]
    return out


def test_tensorboard_sink_writes_each_scalar_at_its_global_step(tmp_path):
    pytest.importorskip("tensorboardX")
    tracker = Tracker(TrackingConfig(tensorboard=str(tmp_path / "tb")))
    tracker.at(100, "s2/").record({"kind": "eval", "step": 5, "T0/sFTA": 0.25, "n": 3, "per": [1, 2], "ok": True})
    tracker.record({"kind": "train", "step": 6, "loss": 1.5, "bad": float("nan")})
    tracker.close()
    (f,) = (tmp_path / "tb").iterdir()
    got = sorted(_events(f))
    assert got == [("s2/eval/T0/sFTA", 105, 0.25), ("s2/eval/n", 105, 3.0), ("s2/train/loss", 106, 1.5)]
    assert scalars({"kind": "eval", "step": 1, "x": 2}) == {"eval/x": 2.0}


def test_wandb_asked_for_but_absent_is_one_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ValueError, match="pip install wandb"):
        Tracker(TrackingConfig(wandb_project="p"))
