"""Elastic weight consolidation: diagonal Fisher from old data and the quadratic penalty (spec §4.5, §7).

    ℓ_EWC(θ) = ℓ_new(θ) + (λ/2) Σ_i F_i (θ_i − θ*_i)²

Two Fisher estimates (decision #9, switch ``ewc.fisher``):

* ``code`` (the reference release): for each old-data batch b of size B_b, accumulate B_b · (∇ℓ̄_b)², the square
  of the *batch-mean* gradient, then divide by the total number of old chunks N_total (which may exceed the chunks
  actually used, as in the reference, giving F a scale of (used/N_total)/B relative to the per-example form);
* ``per_example``: the empirical Fisher (1/N) Σ_n (∇ℓ_n)² from per-example gradients (``vmap`` over rows).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, NamedTuple

import jax
import jax.numpy as jnp

from cfka_jax.train.step import lm_loss


def _sq_add(acc, g, scale):
    return jax.tree.map(lambda a, x: a + scale * jnp.square(x.astype(jnp.float32)), acc, g)


def _zeros_like_f32(params):
    return jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)


def fisher_batch_mean(params, graphdef, rest, batches: Iterable[dict], *, total_chunks: int):
    """Reference Fisher: Σ_b B_b (∇ℓ̄_b)² / total_chunks over the given old-data batches."""
    grad_fn = jax.jit(jax.grad(lambda p, b: lm_loss(p, graphdef, rest, b)[0]))
    acc = _zeros_like_f32(params)
    for batch in batches:
        acc = _sq_add(acc, grad_fn(params, batch), float(batch["tokens"].shape[0]))
    return jax.tree.map(lambda a: a / total_chunks, acc)


def fisher_per_example(params, graphdef, rest, batches: Iterable[dict]):
    """Empirical Fisher (1/N) Σ_n (∇ℓ_n)² with per-example gradients (each row of a batch is one example)."""

    def one(p, row):
        return jax.grad(lambda q: lm_loss(q, graphdef, rest, jax.tree.map(lambda x: x[None], row))[0])(p)

    sq_sum = jax.jit(lambda p, b: jax.tree.map(lambda g: jnp.sum(jnp.square(g.astype(jnp.float32)), 0),
                                               jax.vmap(one, in_axes=(None, 0))(p, b)))
    acc, n = _zeros_like_f32(params), 0
    for batch in batches:
        acc = jax.tree.map(jnp.add, acc, sq_sum(params, batch))
        n += batch["tokens"].shape[0]
    if n == 0:
        raise ValueError("fisher_per_example needs at least one batch of old data")
    return jax.tree.map(lambda a: a / n, acc)


class EWCAnchor(NamedTuple):
    """The operands of the EWC penalty, passed to the jitted step as arguments (not closed-over constants).

    Attributes:
      fisher: diagonal Fisher F, a float32 pytree like the parameters.
      anchor: θ*, the parameters the penalty pulls towards (the pre-CPT weights).
      lam: λ ≥ 0, a float32 scalar.
    """

    fisher: Any
    anchor: Any
    lam: jax.Array


def ewc_anchor(fisher, anchor, lam: float) -> EWCAnchor:
    """Validated penalty operands.

    Raises:
      ValueError: λ negative or not finite (a negative λ would reward drift from θ*).
    """
    if not (math.isfinite(lam) and lam >= 0.0):
        raise ValueError(f"EWC lambda must be finite and >= 0, got {lam}")
    if jax.tree.structure(fisher) != jax.tree.structure(anchor):
        raise ValueError("EWC Fisher and anchor must have the same tree structure")
    return EWCAnchor(fisher, anchor, jnp.asarray(lam, jnp.float32))


def ewc_penalty(params, ewc: EWCAnchor) -> jax.Array:
    """(λ/2) Σ_i F_i (θ_i − θ*_i)² in float32. λ = 0 gives an exactly zero penalty and gradient."""
    terms = jax.tree.map(lambda f, p, a: jnp.sum(f * jnp.square(p.astype(jnp.float32) - a.astype(jnp.float32))),
                         ewc.fisher, params, ewc.anchor)
    return 0.5 * ewc.lam * sum(jax.tree.leaves(terms))
