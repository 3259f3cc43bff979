"""Vectorised sweeps of theory-model training over seeds and learning rates.

One ``jax.jit(jax.vmap(...))`` call trains P configurations (seed, η_Y, η_Z) at once on the same world; the
per-configuration work is identical to ``train_sgd``, so a sweep is a batched version of P independent runs.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.shapes import Array, Float, Int
from cfka_jax.theory.conservation import derived_quantity
from cfka_jax.theory.model import init_yz
from cfka_jax.theory.optimum import posterior_kl, query_attention
from cfka_jax.theory.train import Rates, SGDConfig, train_sgd
from cfka_jax.theory.world import FactWorld


class Grid(NamedTuple):
    """A flattened hyperparameter grid: configuration p has seed[p], eta_y[p], eta_z[p]."""

    seed: Int[Array, " P"]
    eta_y: Float[Array, " P"]
    eta_z: Float[Array, " P"]


class RunSummary(NamedTuple):
    """What one run reports (leading axis P in a sweep)."""

    kl: Float[Array, ""]  # excess population loss E_X KL(Bayes ‖ model) at the end
    attention: Float[Array, " M"]  # |z_s| = |Z[s, q]| at the end
    conserved_drift: Float[Array, ""]  # max_s |c_s(T) − c_s(0)| of the derived conserved quantity


def make_grid(seeds, eta_ys, eta_zs) -> Grid:
    """Cartesian product of the three axes, flattened (seed varies fastest)."""
    e_y, e_z, s = np.meshgrid(np.asarray(eta_ys, float), np.asarray(eta_zs, float), np.asarray(seeds), indexing="ij")
    fdt = jax.dtypes.canonicalize_dtype(np.float64)
    return Grid(jnp.asarray(s.ravel(), jnp.int32), jnp.asarray(e_y.ravel(), fdt), jnp.asarray(e_z.ravel(), fdt))


def run_one(world: FactWorld, seed, eta_y, eta_z, *, cfg: SGDConfig, init_scale: float = 1e-3) -> RunSummary:
    """Trains one configuration from a small init and summarises it (pure; vmappable over the arrays)."""
    key = jax.random.key(seed)
    k_init, k_data = jax.random.split(key)
    p0 = init_yz(k_init, world.vocab_size, scale=init_scale, dtype=world.joint.dtype)
    final, _ = train_sgd(p0, world, k_data, Rates(eta_y, eta_z), cfg=cfg, observe=lambda p: ())
    drift = jnp.max(jnp.abs(derived_quantity(final, world, eta_y, eta_z) - derived_quantity(p0, world, eta_y, eta_z)))
    return RunSummary(posterior_kl(final, world), jnp.abs(query_attention(final.Z, world)), drift)


def sweep(world: FactWorld, grid: Grid, *, cfg: SGDConfig, init_scale: float = 1e-3) -> RunSummary:
    """All configurations of ``grid`` in one vmapped computation (jit it at the call site or use ``sweep_jit``)."""
    one = functools.partial(run_one, cfg=cfg, init_scale=init_scale)
    return jax.vmap(one, in_axes=(None, 0, 0, 0))(world, grid.seed, grid.eta_y, grid.eta_z)


sweep_jit = jax.jit(sweep, static_argnames=("cfg", "init_scale"))


def sweep_sharded(world: FactWorld, grid: Grid, *, cfg: SGDConfig, mesh, init_scale: float = 1e-3) -> RunSummary:
    """``sweep_jit`` with the configuration axis split over every device of ``mesh`` (the grid size must be a
    multiple of the device count; ``parallel/rules.shard_leading``); the compiler partitions the vmapped runs."""
    from cfka_jax.parallel.rules import shard_leading

    return sweep_jit(world, shard_leading(grid, mesh), cfg=cfg, init_scale=init_scale)
run_one_jit = jax.jit(run_one, static_argnames=("cfg", "init_scale"))
