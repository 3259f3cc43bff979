"""Gradient accumulation: one optimiser update from N micro-batches, holding the activations of one at a time.

    value_and_grad = accumulated(jax.value_and_grad(objective, has_aux=True), 4, weight_key="targets")
    (loss, metrics), grads = value_and_grad(params, batch_BS, *rest)     # B rows split into 4 micro-batches of B/4

The first input (the batch: a pytree whose array leaves all have B leading rows) is reshaped to ``[N, B/N, ...]``
and a ``lax.scan`` runs ``value_and_grad`` on micro-batch ``i`` (every other input, e.g. EWC's operands or a
dropout key, is passed unchanged to each), keeping a running weighted mean of the gradients: the compiled step
holds one micro-batch's activations and one extra gradient-sized buffer (the mean), never N of either.

The micro-batches are combined so that the result is the large batch's when the objective is a weighted mean:

    L = Σ_i w_i L_i / Σ_i w_i,     ∇L = Σ_i w_i ∇L_i / Σ_i w_i

with ``w_i`` the metric named ``weight_key`` of micro-batch i (the number of target tokens for the mean next-token
NLL: ``Σ_s m·nll / Σ_s m`` over the whole batch is exactly the target-weighted mean of the micro-batch means), or
``w_i = 1`` when ``weight_key`` is None (a mean over rows, e.g. TAALM's TWPPL, a mean of per-sequence means; the
micro-batches have equal rows). A penalty added to each micro-batch's loss (EWC) is then counted once:
``Σ_i w_i (L_i + P) / Σ_i w_i = L + P``. When every weight is 0 (no target in the batch: the NLL is 0 by
convention) equal weights are used, so the penalty's gradient is kept. The mean is kept as a running mean,
``m_i = m_{i-1} + (w_i / Σ_{j≤i} w_j)(x_i − m_{i-1})``. Every floating metric is combined the same way except
``weight_key`` and the counts named in ``summed`` (``targets``), which are summed (as are integer metrics).
Objectives that rank tokens across the whole batch (RHO-1's top-k excess loss) select within each micro-batch
instead, which is not the large batch's selection.

Equal to the large batch up to float32 rounding of the regrouped sums (``tests/train/test_accumulate.py``).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def check_accumulate(n) -> int:
    """``n`` as the number of micro-batches (an integer >= 1), or ValueError naming ``--accumulate``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"--accumulate must be an integer >= 1 (micro-batches per optimiser step), got {n!r}")
    return n


def split_micro(batch, n: int):
    """``batch`` (a pytree, every array leaf with B leading rows) as ``[n, B/n, ...]`` leaves.

    Raises:
      ValueError: leaves with different leading sizes, a scalar leaf, or B not divisible by ``n``.
    """
    leaves = jax.tree.leaves(batch)
    rows = {int(x.shape[0]) if getattr(x, "ndim", 0) else None for x in leaves}
    if None in rows or len(rows) != 1:
        raise ValueError(f"--accumulate splits the batch by rows: every batch leaf needs the same leading size, "
                         f"got leading sizes {sorted(str(r) for r in rows)}")
    (b,) = rows
    if b % n:
        raise ValueError(f"--accumulate {n} needs the batch size to be a multiple of {n}, got {b} rows")
    return jax.tree.map(lambda x: x.reshape(n, b // n, *x.shape[1:]), batch)


def accumulated(value_and_grad: Callable, n: int, *, weight_key: str | None = None,
                summed: tuple[str, ...] = ("targets",)) -> Callable:
    """``value_and_grad(params, batch, *inputs)`` over ``n`` micro-batches of ``batch`` (module docstring).

    Args:
      value_and_grad: ``(params, batch, *inputs) -> ((loss, metrics), grads)``.
      n: micro-batches (1 returns ``value_and_grad`` itself).
      weight_key: the metric that weights each micro-batch (``"targets"`` for a mean over target tokens), or None
        for equal weights.
      summed: metrics that are counts over the batch (summed over the micro-batches, like ``weight_key``).
    """
    check_accumulate(n)
    if n == 1:
        return value_and_grad

    def combined(params, batch, *inputs):
        micro = split_micro(batch, n)
        first = jax.tree.map(lambda x: x[0], micro)
        out = jax.eval_shape(lambda b: value_and_grad(params, b, *inputs), first)
        if weight_key is not None and weight_key not in out[0][1]:
            raise ValueError(f"accumulation weights micro-batches by the metric {weight_key!r}, which the objective "
                             f"does not return (it returns {sorted(out[0][1])})")
        counts = [k for k in out[0][1] if k in summed or k == weight_key]
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out)

        def body(carry, xs):
            i, mb = xs
            total_w, mean = carry
            now = value_and_grad(params, mb, *inputs)
            w = (jnp.asarray(now[0][1][weight_key], jnp.float32) if weight_key is not None
                 else jnp.ones((), jnp.float32))
            total = total_w + w
            # running weighted mean: f = w_i / Σ_{j<=i} w_j; while every weight so far is 0, the equal-weight mean
            f = jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), 1.0 / (i + 1).astype(jnp.float32))
            mean = jax.tree.map(lambda m, x: m + f.astype(x.dtype) * (x - m) if jnp.issubdtype(x.dtype, jnp.floating)
                                else m + x, mean, now)
            for key in counts:
                mean[0][1][key] = carry[1][0][1][key] + now[0][1][key]
            return (total, mean), None

        (_, mean), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), (jnp.arange(n), micro))
        return mean

    return combined
