"""tokens/s and MFU (``train/throughput.py``) in the loop's train records and TensorBoard; ``--profile`` traces."""

import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.train import throughput as tp
from cfka_jax.train.loop import LoopConfig, run_loop
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.profiling import parse_profile
from cfka_jax.train.step import init_state, make_train_step
from cfka_jax.train.tracking import Tracker, TrackingConfig, scalars
from tests.helpers import batch, split, tiny_model
from tests.tolerances import F32
from tests.train.test_schedules import _events


@dataclasses.dataclass
class _Device:
    platform: str
    device_kind: str


@pytest.mark.parametrize("kind,flops", [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
                                        ("NVIDIA H200", 989e12), ("NVIDIA A100-SXM4-40GB", 312e12),
                                        ("TPU v4", 275e12), ("TPU v5 lite", 197e12), ("TPU v5p", 459e12),
                                        ("TPU v5", 459e12), ("TPU v6 lite", 918e12)])
def test_vendor_peaks_by_device_kind(kind, flops):
    assert tp.vendor_peak(kind)[0] == flops
    peak = tp.device_peak([_Device("gpu", kind)] * 2)
    assert peak.flops == 2 * flops and "× 2 device(s)" in peak.source


def test_unknown_device_kind_gives_no_mfu_and_says_why():
    peak = tp.device_peak([_Device("gpu", "NVIDIA GeForce GTX 1080")])
    assert peak.flops is None and "'NVIDIA GeForce GTX 1080'" in peak.source
    meter = tp.Throughput(1e9, "cost_analysis", peak)
    meter.start(0)
    meter.add(batch(0))
    fields = meter.record(1)
    assert fields["mfu"] is None and fields["mfu_reason"] == peak.source and fields["tokens_per_s"] > 0


def test_cpu_peak_is_measured_once():
    first = tp.cpu_peak_flops()
    assert first > 1e6 and tp.cpu_peak_flops() == first  # cached: one probe per process
    assert tp.device_peak().source.startswith("measured")


def test_mfu_is_flops_over_time_and_peak():
    meter = tp.Throughput(3e9, "cost_analysis", tp.Peak(1e12, "test"))
    meter.start(10)
    for t in range(4):
        meter.add(batch(t))
    fields = meter.record(14)
    tokens = 4 * int(np.prod(batch(0)["tokens"].shape))
    elapsed = fields["step_time_s"] * 4
    np.testing.assert_allclose(fields["tokens_per_s"], tokens / elapsed, rtol=F32.few_ulps)
    np.testing.assert_allclose(fields["mfu"], 3e9 / (fields["step_time_s"] * 1e12), rtol=F32.few_ulps)


def test_step_flops_from_cost_analysis_and_the_6n_fallback():
    a, b = jnp.ones((8, 16), jnp.float32), jnp.ones((16, 4), jnp.float32)
    flops, source = tp.step_flops(jax.jit(lambda x, y: x @ y), a, b)
    assert source == "cost_analysis" and flops >= 2 * 8 * 16 * 4

    def scanned(x, y):
        return jax.lax.scan(lambda c, _: (c @ y @ y.T, None), x, None, length=3)[0]

    state = {"w": jnp.ones((5, 7))}
    flops, source = tp.step_flops(jax.jit(lambda s, bt: scanned(a, b)), state, batch(0))
    assert source.startswith("6N (the step has loops")
    assert flops == 6 * 35 * int(np.prod(batch(0)["tokens"].shape))
    flops, source = tp.step_flops(lambda s, bt: None, state, (1, 2))
    assert flops is None and source.startswith("unknown")


def test_train_records_carry_throughput_and_reach_tensorboard(tmp_path):
    pytest.importorskip("tensorboardX")
    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=4))
    tracker = Tracker(TrackingConfig(tensorboard=str(tmp_path / "tb")))
    done = run_loop(init_state(params, tx), make_train_step(graphdef, rest, tx), batch, on_record=tracker.record,
                    cfg=LoopConfig(steps=4, log_every=2, progress=False, profile="1:3"), out_dir=tmp_path)
    tracker.close()
    train = [r for r in done.history if r["kind"] == "train"]
    assert [r["step"] for r in train] == [2, 4]
    for r in train:
        assert r["flops_source"] == "cost_analysis" and r["flops_per_step"] > 0
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] and r["peak_source"].startswith("measured")
    tags = scalars(train[-1])
    assert {"train/tokens_per_s", "train/mfu", "train/flops_per_step"} <= set(tags)
    assert not any("source" in t for t in tags)  # strings stay in metrics.jsonl only
    (events,) = (tmp_path / "tb").iterdir()
    logged = {(tag, step): v for tag, step, v in _events(events)}
    np.testing.assert_allclose(logged[("train/mfu", 4)], train[-1]["mfu"], rtol=F32.one_ulp)
    np.testing.assert_allclose(logged[("train/tokens_per_s", 2)], train[0]["tokens_per_s"], rtol=F32.one_ulp)
    traces = list(pathlib.Path(tmp_path / "profile").rglob("*.xplane.pb"))
    assert traces and traces[0].stat().st_size > 0


def test_profile_syntax():
    assert parse_profile("10:15") == (10, 15) and parse_profile(None) is None
    for bad in ("15:10", "3", "a:b", "5:5", "-1:3"):
        with pytest.raises(ValueError, match="--profile must be START:STOP"):
            parse_profile(bad)
    with pytest.raises(ValueError, match="--profile must be"):
        LoopConfig(steps=3, profile="2")
    with pytest.raises(ValueError, match="run folder"):
        run_loop(None, None, None, cfg=LoopConfig(steps=3, profile="0:1"))
