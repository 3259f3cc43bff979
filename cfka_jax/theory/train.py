"""Training of the (Y, Z) theory model: per-block SGD and gradient flow (spec cfka_stoc.md §2.1, §2.9).

Time convention: ``t`` counts optimiser steps. One SGD step is

    Y ← Y − η_Y ∇_Y ℓ,      Z ← Z − η_Z ∇_Z ℓ,

on the population loss (``batch_size=None``: full batch, the gradient-flow limit as η → 0) or on a minibatch
drawn from Pr(X, o). Gradient flow Ẏ = −η_Y ∇_Y ℓ, Ż = −η_Z ∇_Z ℓ is integrated with RK4 in the same units
(continuous time τ = steps · dt with rates η_Y, η_Z), for checks that need the exact flow.

Every driver is a pure function of (params, world, key, rates) with a static config, so it can be ``jax.jit``-ed
and ``jax.vmap``-ed over seeds and learning rates (see ``theory/rate_sweep.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from cfka_jax.theory.model import YZParams, yz_loss
from cfka_jax.theory.world import FactWorld, full_batch, sample_batch, sample_counts

Observe = Callable[[YZParams], Any]


class Rates(NamedTuple):
    """Per-block learning rates (arrays, so that sweeps can vmap over them)."""

    eta_y: jax.Array | float
    eta_z: jax.Array | float


@dataclasses.dataclass(frozen=True)
class SGDConfig:
    """Static settings of a training run.

    Attributes:
      steps: number of optimiser steps (or RK4 steps for gradient flow).
      batch_size: minibatch size; None trains on the population (full-batch) loss.
      log_every: record ``observe(params)`` every this many steps (and at t = 0).
    """

    steps: int
    batch_size: int | None = None
    log_every: int = 1

    def __post_init__(self):
        if self.steps < 1 or self.log_every < 1:
            raise ValueError(f"steps and log_every must be >= 1, got {self.steps}, {self.log_every}")
        if self.steps % self.log_every:
            raise ValueError(f"steps={self.steps} must be a multiple of log_every={self.log_every}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {self.batch_size}")

    @property
    def num_logs(self) -> int:
        return self.steps // self.log_every


def yz_grad(params: YZParams, world: FactWorld, tokens_BJ, targets_BO) -> YZParams:
    """∇ℓ with respect to (Y, Z) on the given (weighted) batch."""
    return jax.grad(yz_loss)(params, tokens_BJ, targets_BO, world.objects)


def population_grad(params: YZParams, world: FactWorld) -> YZParams:
    """Gradient of the population loss Σ_{X,o} Pr(X, o) CE."""
    return yz_grad(params, world, *full_batch(world))


def minibatch(world: FactWorld, key, batch_size: int | None):
    """(tokens, targets) of one step: the population, counts over the contexts (C ≤ B), or B samples."""
    if batch_size is None:
        return full_batch(world)
    if world.contexts.shape[0] <= batch_size:
        return world.contexts, sample_counts(world, key, batch_size)
    return sample_batch(world, key, batch_size)


def sgd_step(params: YZParams, grad: YZParams, rates: Rates) -> YZParams:
    """One per-block SGD update."""
    return YZParams(params.Y - rates.eta_y * grad.Y, params.Z - rates.eta_z * grad.Z)


def scan_logged(step: Callable, state, keys, *, cfg: SGDConfig, observe: Observe, get_params=lambda s: s):
    """Runs ``state = step(state, key)`` over ``keys`` and records ``observe`` every ``cfg.log_every`` steps.

    Returns the final state and the observations stacked on a leading axis of length ``num_logs + 1``
    (index r is time r · log_every; index 0 is the initial state).
    """
    keys = keys.reshape(cfg.num_logs, cfg.log_every, *keys.shape[1:])

    def outer(s, ks):
        s, _ = jax.lax.scan(lambda s_, k: (step(s_, k), None), s, ks)
        return s, observe(get_params(s))

    first = observe(get_params(state))
    state, obs = jax.lax.scan(outer, state, keys)
    stacked = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b], axis=0), first, obs)
    return state, stacked


def train_sgd(params: YZParams, world: FactWorld, key, rates: Rates, *, cfg: SGDConfig, observe: Observe):
    """Per-block SGD for ``cfg.steps`` steps; full batch when ``cfg.batch_size`` is None.

    Args:
      params: initial (Y, Z).
      world: the fact world (population or sampling distribution).
      key: PRNG key for minibatch sampling (unused for full batch).
      rates: (η_Y, η_Z).
      cfg: static run settings.
      observe: function of the parameters recorded along the trajectory.

    Returns:
      (final params, observations with leading axis R = steps/log_every + 1).
    """

    def step(p, k):
        return sgd_step(p, yz_grad(p, world, *minibatch(world, k, cfg.batch_size)), rates)

    return scan_logged(step, params, jax.random.split(key, cfg.steps), cfg=cfg, observe=observe)


def flow_field(params: YZParams, world: FactWorld, rates: Rates) -> YZParams:
    """Right-hand side of gradient flow: (−η_Y ∇_Y ℓ, −η_Z ∇_Z ℓ) on the population loss."""
    g = population_grad(params, world)
    return YZParams(-rates.eta_y * g.Y, -rates.eta_z * g.Z)


def rk4_step(params: YZParams, world: FactWorld, rates: Rates, dt) -> YZParams:
    """One classical Runge–Kutta step of gradient flow with time step ``dt`` (local error O(dt⁵))."""
    axpy = lambda a, x, y: jax.tree.map(lambda u, v: u + a * v, x, y)
    f = functools.partial(flow_field, world=world, rates=rates)
    k1 = f(params)
    k2 = f(axpy(dt / 2, params, k1))
    k3 = f(axpy(dt / 2, params, k2))
    k4 = f(axpy(dt, params, k3))
    incr = jax.tree.map(lambda a, b, c, d: (a + 2 * b + 2 * c + d) / 6, k1, k2, k3, k4)
    return axpy(dt, params, incr)


def gradient_flow(params: YZParams, world: FactWorld, rates: Rates, dt, *, cfg: SGDConfig, observe: Observe):
    """Integrates gradient flow over time τ = cfg.steps · dt with RK4; observations as in ``train_sgd``."""
    step = lambda p, _: rk4_step(p, world, rates, dt)
    return scan_logged(step, params, jnp.zeros((cfg.steps,)), cfg=cfg, observe=observe)
