"""Throughput of a training run: tokens per second and model FLOPs utilisation (MFU), for every train record.

    meter = Throughput.of(step_fn, state, batch)      # once, before the first step: FLOPs per step, device peak
    meter.add(batch)                                   # every dispatched step: its tokens
    fields = meter.record(done)                        # at each train record: the interval since the last one

MFU = F / (t_step · P), with

* F the model FLOPs of one step: the ``flops`` of ``step_fn.lower(state, batch).cost_analysis()`` (XLA's count
  of the program as written, forward + backward + optimiser, before its rematerialisation or fusion; the lowering
  is the trace the first call makes anyway, no second compile), ``flops_source = "cost_analysis"``; when the step
  has no ``lower``, the analysis has no FLOP count, or the program has loops (a ``lax.scan`` over layers, chunks
  of the loss or micro-batches: XLA's analysis counts a loop body once, not once per trip),
  ``6 · N · tokens`` with N the number of parameters of ``state.params`` (forward 2N + backward 4N per token;
  attention's own FLOPs left out), ``flops_source = "6N (<why>)"``;
* t_step the wall time per step over the interval since the previous train record (the loop dispatches
  asynchronously and settles one step late, so this is the steady rate; the first interval includes the
  compilation, evaluation and checkpoint writes fall into the interval they happen in);
* P the peak of the devices the run uses: on CPU measured once per process by a float32 matmul probe
  (:func:`cpu_peak_flops`, cached), on GPU/TPU the vendor's dense bf16 figure for the device kind (:data:`PEAKS`)
  times the number of devices. An unknown device kind gives ``mfu = None`` and ``mfu_reason`` says why; no number
  is made up.

Fields added to a train record: ``tokens_per_s``, ``step_time_s``, ``flops_per_step``, ``flops_source``,
``peak_flops`` (FLOP/s, or None), ``peak_source``, ``mfu`` (a fraction in [0, 1] on real hardware, or None) and,
when it is None, ``mfu_reason``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

WALL_CLOCK = ("time_s", "tokens_per_s", "step_time_s", "mfu", "mfu_reason", "peak_flops")
"""The fields of a train record that depend on wall-clock time (and, on CPU, on the probe of this process): a
resumed run's records equal the uninterrupted run's without them."""

PEAKS: tuple[tuple[str, float, str], ...] = (
    ("gh200", 989e12, "NVIDIA GH200: 989 TFLOP/s dense bf16"),
    ("h200", 989e12, "NVIDIA H200: 989 TFLOP/s dense bf16"),
    ("h100 pcie", 756e12, "NVIDIA H100 PCIe: 756 TFLOP/s dense bf16"),
    ("h100 nvl", 835e12, "NVIDIA H100 NVL: 835 TFLOP/s dense bf16"),
    ("h100", 989e12, "NVIDIA H100 SXM: 989 TFLOP/s dense bf16"),
    ("a100", 312e12, "NVIDIA A100: 312 TFLOP/s dense bf16"),
    ("tpu v4", 275e12, "Google TPU v4: 275 TFLOP/s bf16 per chip"),
    ("tpu v5 lite", 197e12, "Google TPU v5e: 197 TFLOP/s bf16 per chip"),
    ("tpu v5e", 197e12, "Google TPU v5e: 197 TFLOP/s bf16 per chip"),
    ("tpu v5p", 459e12, "Google TPU v5p: 459 TFLOP/s bf16 per chip"),
    ("tpu v5", 459e12, "Google TPU v5p: 459 TFLOP/s bf16 per chip"),
    ("tpu v6 lite", 918e12, "Google TPU v6e (Trillium): 918 TFLOP/s bf16 per chip"),
    ("tpu v6e", 918e12, "Google TPU v6e (Trillium): 918 TFLOP/s bf16 per chip"),
)
"""``(substring of the lower-cased device_kind, peak FLOP/s per device, source)``, first match wins (the more
specific names first). Dense (no structured sparsity) bf16 tensor-core figures from the vendors' data sheets."""


@dataclasses.dataclass(frozen=True)
class Peak:
    """The devices' peak FLOP/s (``flops`` None when unknown) and where it came from (or why it is unknown)."""

    flops: float | None
    source: str


def vendor_peak(device_kind: str) -> tuple[float, str] | None:
    """``(peak FLOP/s per device, source)`` of a GPU/TPU ``device_kind`` from :data:`PEAKS`, or None."""
    kind = device_kind.lower()
    for key, flops, source in PEAKS:
        if key in kind:
            return flops, source
    return None


PROBE_SIZE, PROBE_REPEATS = 512, 8


@functools.cache
def cpu_peak_flops() -> float:
    """FLOP/s of this process's CPU backend on a float32 ``512 × 512`` matmul chain (best of three timed runs of
    8 products, after a warm-up); measured once per process (cached)."""
    n = PROBE_SIZE
    a = jax.device_put(np.random.default_rng(0).standard_normal((n, n), np.float32) / np.sqrt(n),
                       jax.devices("cpu")[0])

    @jax.jit
    def chain(x):
        for _ in range(PROBE_REPEATS):
            x = x @ a
        return x

    chain(a).block_until_ready()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        chain(a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 * PROBE_REPEATS / best


def device_peak(devices: list | None = None) -> Peak:
    """The peak of ``devices`` (default: all of this process's backend): measured on CPU, the vendor's figure times
    the device count on GPU/TPU, unknown (``flops`` None, with the reason) for another kind."""
    devices = devices if devices is not None else jax.devices()
    first = devices[0]
    if first.platform == "cpu":
        return Peak(cpu_peak_flops(), f"measured: float32 {PROBE_SIZE}² matmul probe on the CPU backend")
    found = vendor_peak(first.device_kind)
    if found is None:
        return Peak(None, f"no peak figure for device kind {first.device_kind!r} ({first.platform}); "
                          f"add it to train/throughput.PEAKS")
    return Peak(found[0] * len(devices), f"vendor: {found[1]} × {len(devices)} device(s)")


def batch_tokens(batch: Any) -> int | None:
    """Tokens in a batch: the size of its ``tokens`` array (every row position, padding included; a seed
    ensemble's member axis included), or None for a batch without one."""
    tokens = batch.get("tokens") if isinstance(batch, dict) else None
    return int(np.prod(tokens.shape)) if tokens is not None else None


def param_count(params: Any) -> int:
    """Number of floating-point parameter entries."""
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params)
               if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating))


def step_flops(step_fn: Callable, state: Any, batch: Any) -> tuple[float | None, str]:
    """``(FLOPs of one step, source)`` (module docstring): the lowered step's cost analysis, else 6·N·tokens."""
    lower, why = getattr(step_fn, "lower", None), "the step has no lower()"
    if lower is not None:
        try:
            lowered = lower(state, batch)
            looped = "stablehlo.while" in lowered.as_text()
            cost = None if looped else lowered.cost_analysis()
        except Exception as err:  # noqa: BLE001 (an analysis a backend does not offer; 6N stands in)
            looped, cost, why = False, None, f"no cost analysis ({type(err).__name__})"
        cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
        flops = cost.get("flops") if isinstance(cost, dict) else None
        if flops is not None and math.isfinite(flops) and flops > 0:
            return float(flops), "cost_analysis"
        if looped:
            why = "the step has loops (scan), which XLA's cost analysis counts once"
        elif cost is not None:
            why = "the cost analysis has no FLOP count"
    tokens = batch_tokens(batch)
    if tokens is None:
        return None, f"unknown: {why}, and the batch has no 'tokens' to count"
    return 6.0 * param_count(getattr(state, "params", state)) * tokens, f"6N ({why})"


def utilisation(flops: float | None, flops_source: str, step_time: float, peak: Peak) -> dict:
    """``{"mfu": F / (t_step · P)}``, or ``{"mfu": None, "mfu_reason": why}`` when F or P is unknown."""
    if peak.flops is None:
        return {"mfu": None, "mfu_reason": peak.source}
    if flops is None:
        return {"mfu": None, "mfu_reason": flops_source}
    return {"mfu": flops / (step_time * peak.flops)}


class Throughput:
    """Tokens/s and MFU of a run's train records (module docstring)."""

    def __init__(self, flops: float | None, flops_source: str, peak: Peak):
        self.flops, self.flops_source, self.peak = flops, flops_source, peak
        self._t0, self._done0, self._tokens = time.perf_counter(), None, 0

    @classmethod
    def of(cls, step_fn: Callable, state: Any, batch: Any) -> "Throughput":
        flops, source = step_flops(step_fn, state, batch)
        return cls(flops, source, device_peak())

    def start(self, done: int) -> None:
        """The interval of the next record starts now, after ``done`` steps."""
        self._t0, self._done0, self._tokens = time.perf_counter(), done, 0

    def add(self, batch: Any) -> None:
        tokens = batch_tokens(batch)
        self._tokens = None if tokens is None or self._tokens is None else self._tokens + tokens

    def record(self, done: int) -> dict:
        """The fields of the train record after ``done`` steps; the next interval starts here."""
        now = time.perf_counter()
        steps = done - (self._done0 if self._done0 is not None else done)
        elapsed = now - self._t0
        out: dict = {"flops_per_step": self.flops, "flops_source": self.flops_source,
                     "peak_flops": self.peak.flops, "peak_source": self.peak.source}
        if steps <= 0 or elapsed <= 0:
            out.update(tokens_per_s=None, step_time_s=None, mfu=None, mfu_reason="no step timed in this interval")
        else:
            step_time = elapsed / steps
            out.update(tokens_per_s=self._tokens / elapsed if self._tokens is not None else None,
                       step_time_s=step_time)
            out.update(utilisation(self.flops, self.flops_source, step_time, self.peak))
        self.start(done)
        return out
