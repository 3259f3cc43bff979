"""The one table of numerical tolerances used by the tests, keyed by dtype and by the kind of check.

    from tests.tolerances import F32, F64
    np.testing.assert_allclose(got, want, rtol=F64.exact_rtol)
    np.testing.assert_allclose(got, want, rtol=0, atol=for_dtype(got.dtype).model_atol)

Every entry says why it has its value (``reasons()`` lists them). Change a value only with a reason written
here, never to make a test pass; a check that needs a tighter value than the closest entry gets a new named entry.
Names ending in ``_rtol`` are relative tolerances, ``_atol`` absolute ones; ``one_ulp`` and ``few_ulps`` are
sizes of O(1) numbers and serve as either. Sampling checks use :func:`sampling_atol` (k standard errors).

Machine epsilon: float64 2.2e-16, float32 1.19e-7 (2⁻²³), bfloat16 7.8e-3 (2⁻⁷).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


def _entry(value: float, why: str):
    return dataclasses.field(default=value, metadata={"why": why})


@dataclasses.dataclass(frozen=True)
class Float64:
    """float64: theory identities, closed forms against simulation, limits."""

    direct_rtol: float = _entry(
        1e-12, "a short direct computation on O(1) numbers (a few elementwise ops, one reduction over tens of "
               "terms, one matmul, one autodiff step) against its formula: ~5e3 ulps of 2.2e-16")
    batched_rtol: float = _entry(
        1e-12, "a vmapped computation against the same computation unbatched (a sweep row against its lone run): "
               "identical arithmetic up to the reduction order XLA picks for batched ops, over tens of steps; "
               "measured ≤ 6e-15 on a drift that cancels")
    exact_rtol: float = _entry(
        1e-10, "algebraic identities with no iteration that go through longer chains (eigendecompositions, "
               "matrix powers, vectorised vs pointwise closed forms): rounding times a modest condition number")
    solve_rtol: float = _entry(
        1e-9, "results that pass through a linear solve or pseudo-inverse of a rank-deficient Hessian (the "
              "reference optimum, the stationary covariance), or a sum of many examples regrouped as counts: "
              "the conditioning or the cancellation multiplies rounding by up to ~1e6")
    flow_rtol: float = _entry(
        1e-8, "SGD/flow identities that hold to O(step²) per step (RK4 conservation): checked at small steps, "
              "relative")
    linearisation_rtol: float = _entry(
        1e-6, "the linearised error dynamics against the nonlinear step at a perturbation ‖e‖ ≈ 1e-5: the "
              "neglected term is O(‖e‖²), i.e. ≲ 1e-6·‖e‖; used as 1e-6 · max|e|")
    zero_atol: float = _entry(
        1e-15, "a quantity that is exactly zero, or equal to a reference, in exact arithmetic, built from O(1) "
               "numbers in a few ops (t = 0 of a closed form, tiny entries beside an rtol): a few ulps of 1")
    zero_sum_atol: float = _entry(
        1e-14, "exactly zero (or a symmetry/identity) in exact arithmetic after a reduction or matrix product over "
               "tens of O(1) terms (rows of diag(p) − ppᵀ, K − Kᵀ, Fisher − Hessian): ~50 ulps of 1")
    cancel_atol: float = _entry(
        1e-12, "absolute floor for O(1)-scale quantities that are zero in exact arithmetic after cancellation in "
               "longer sums (one covariance step, gradients regrouped over 64 examples, the logit gap of a null "
               "move, a moment residual, the smallest eigenvalue of a PSD Hessian): ~5e3 ulps of 1")
    fixed_point_atol: float = _entry(
        1e-10, "iterates that sit at a fixed point, or components an iteration leaves untouched (GD started at "
               "the optimum, the null-space part of a minimiser): per-step rounding of O(10) parameters "
               "accumulated over the iterations")
    limit_atol: float = _entry(
        1e-9, "t → ∞ limits evaluated at a large finite t through an eigendecomposition: the slowest positive "
              "mode has decayed below this, and eigenvector rounding near the null space is ~1e-12")
    long_gd_atol: float = _entry(
        1e-7, "tens of thousands of GD steps against the closed-form minimiser: the residual (1 − ηλ⁺min)ⁿ of the "
              "slowest mode plus the minimiser's own solve accuracy")


@dataclasses.dataclass(frozen=True)
class Float32:
    """float32: library ops, whole models against torch, training steps."""

    one_ulp: float = _entry(
        1e-7, "about one float32 ulp of an O(1) number (1.19e-7, rounded down): a value one rounding from exact, "
              "or the absolute floor for near-zero entries of O(1)-scale arrays")
    few_ulps: float = _entry(
        1e-6, "a few float32 ulps on O(1) numbers: one short scalar expression (a schedule value, a mean of a few "
              "probabilities, a sum of a few weights)")
    exact_rtol: float = _entry(
        1e-5, "float32 versions of exact identities on O(1) numbers (a loss or metric computed two ways, vmap vs "
              "a lone run over tens of steps): ~100 ulps")
    op_atol: float = _entry(
        1e-5, "float32 single ops (norms, RoPE, one matmul, one attention) against a reference, on O(1)-O(10) "
              "values")
    model_atol: float = _entry(
        1e-4, "float32 whole models (a few layers of accumulation) against a reference; logits O(5), hidden "
              "states O(10)")
    model_rtol: float = _entry(
        1e-4, "float32 whole-model quantities compared relatively (gradients through every layer computed by two "
              "batching routes, and their squares)")
    sum_rtol: float = _entry(
        1e-4, "a float32 sum over ~10⁴ terms (a penalty over every parameter): accumulated rounding grows with "
              "the number of terms")
    grad_sq_atol: float = _entry(
        1e-9, "absolute floor for squared float32 gradients (Fisher entries): below ~1e-9 the square is dominated "
              "by the rounding of a near-zero gradient entry, and a relative comparison says nothing")
    contraction_rtol: float = _entry(
        1e-6, "the same float32 elementwise expressions compiled in two different programs (a fused AdamW vs "
              "optax's chain, a stored-rounded state vs its float32 reference): LLVM may contract a·x + b·y into "
              "one FMA in one program and not the other, one rounding per operation; used relative to a leaf's "
              "largest entry, measured ≤ 1.2e-7 after 6 AdamW steps")
    adam_batched_rtol: float = _entry(
        1e-4, "parameters after a few AdamW steps whose gradients come from two batching routes (a seed-ensemble "
              "member vs its lone run): Adam divides each gradient entry by its own running RMS, so the ulp-level "
              "differences of batched vs plain kernels in entries near ε become ~1e-3·lr changes of that "
              "coordinate; measured ≤ 3e-5 of a leaf's largest entry after 3 steps (plain SGD: ≤ 4e-7)")


@dataclasses.dataclass(frozen=True)
class BFloat16:
    """bfloat16 parameters with float32 softmax and loss."""

    model_atol: float = _entry(
        5e-2, "bf16 parameters with fp32 softmax/loss against an fp32 reference: bf16 has 8 mantissa bits (~4e-3 "
              "relative) and logits are O(5)")


F64 = Float64()
F32 = Float32()
BF16 = BFloat16()

_BY_DTYPE = {np.dtype(np.float64): F64, np.dtype(np.float32): F32}


def for_dtype(dtype) -> Float64 | Float32 | BFloat16:
    """The table of ``dtype`` (float64, float32 or bfloat16)."""
    import ml_dtypes

    dtype = np.dtype(dtype)
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return BF16
    try:
        return _BY_DTYPE[dtype]
    except KeyError:
        raise KeyError(f"no tolerance table for dtype {dtype}") from None


# --------------------------------------------------------------------------------------------- sampling bounds

SAMPLING_K = 4.0
"""k for one sampled frequency (or a handful): |mean − p| ≤ 4 standard errors fails a correct sampler with
probability < 1e-4 under the normal approximation (the tests use fixed keys, so the outcome is deterministic)."""

SAMPLING_K_HISTOGRAM = 3.0
"""k for a whole histogram of tens of cells checked at once, with the standard error of its worst cell: the bound
the check had before the table (0.01 for 20 000 draws, 2.8 worst-case or 3.2 worst-cell standard errors), rounded
down to a whole k; it keeps the check as tight as it was."""


def sampling_atol(std: float, n: int, k: float = SAMPLING_K) -> float:
    """k standard errors of a mean of ``n`` i.i.d. draws with standard deviation ``std``: k · std / √n.

    For frequencies, ``std`` is √(p(1 − p)) of the cell checked, or 0.5, its bound over p.
    """
    return k * float(std) / math.sqrt(n)


def reasons() -> dict[str, str]:
    """``{"F64.exact_rtol": "value — why", ...}`` for every entry of the table."""
    out = {}
    for prefix, table in (("F64", F64), ("F32", F32), ("BF16", BF16)):
        for f in dataclasses.fields(table):
            out[f"{prefix}.{f.name}"] = f"{getattr(table, f.name):g} — {f.metadata['why']}"
    return out
