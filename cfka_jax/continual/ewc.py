"""Elastic weight consolidation: diagonal Fisher from old data and the quadratic penalty (spec §4.5, §7).

    ℓ_EWC(θ) = ℓ_new(θ) + (λ/2) Σ_i F_i (θ_i − θ*_i)²

Two Fisher estimates (decision #9, switch ``ewc.fisher``):

* ``code`` (the reference release): for each old-data batch b of size B_b, accumulate B_b · (∇ℓ̄_b)², the square
  of the *batch-mean* gradient, then divide by the total number of old chunks N_total (which may exceed the chunks
  actually used, as in the reference, giving F a scale of (used/N_total)/B relative to the per-example form);
* ``per_example``: the empirical Fisher (1/N) Σ_n (∇ℓ_n)² from per-example gradients (``vmap`` over rows).
"""

from __future__ import annotations

from typing import Callable, Iterable

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


def ewc_penalty(fisher, anchor, lam: float) -> Callable:
    """Returns θ ↦ (λ/2) Σ_i F_i (θ_i − θ*_i)² (float32). λ = 0 gives an exactly zero penalty and gradient."""

    def penalty(params):
        terms = jax.tree.map(lambda f, p, a: jnp.sum(f * jnp.square(p.astype(jnp.float32) - a.astype(jnp.float32))),
                             fisher, params, anchor)
        return 0.5 * lam * sum(jax.tree.leaves(terms))

    return penalty
