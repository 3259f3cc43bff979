"""Vectorised sweeps over seeds × learning rates (cfka_jax/theory/rate_sweep.py): the grid's order and dtypes,
and every sweep row equal to the lone run of its configuration."""

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.theory import rate_sweep as rs
from cfka_jax.theory.train import SGDConfig
from cfka_jax.theory.world import WorldConfig, make_world
from tests.tolerances import F64

CFG = SGDConfig(steps=20, batch_size=8, log_every=20)  # 12 contexts > 8: sampled minibatches


def test_grid_is_the_product_with_seed_fastest(x64):
    grid = rs.make_grid([3, 7], [0.5, 1.0, 2.0], [0.01, 0.1])
    assert grid.seed.shape == grid.eta_y.shape == grid.eta_z.shape == (12,)
    assert grid.seed.dtype == jnp.int32 and grid.eta_y.dtype == grid.eta_z.dtype == jnp.float64
    rows = list(zip(grid.seed.tolist(), grid.eta_y.tolist(), grid.eta_z.tolist()))
    assert rows == [(s, ey, ez) for ey in (0.5, 1.0, 2.0) for ez in (0.01, 0.1) for s in (3, 7)]


def test_grid_rates_follow_the_default_float_dtype():
    with jax.enable_x64(False):
        grid = rs.make_grid(range(2), [0.5], [0.1])
    assert grid.eta_y.dtype == grid.eta_z.dtype == jnp.float32 and grid.seed.tolist() == [0, 1]


def test_sweep_row_equals_the_lone_run(x64):
    world = make_world(WorldConfig())
    grid = rs.make_grid([0, 1], [0.5, 2.0], [0.05])
    rows = rs.sweep_jit(world, grid, cfg=CFG)
    assert rows.kl.shape == rows.conserved_drift.shape == (4,) and rows.attention.shape == (4, world.vocab_size)
    for p in range(4):
        lone = rs.run_one_jit(world, grid.seed[p], grid.eta_y[p], grid.eta_z[p], cfg=CFG)
        for name, want, got in zip(lone._fields, lone, rows, strict=True):
            np.testing.assert_allclose(got[p], want, rtol=F64.batched_rtol, err_msg=f"row {p}: {name}")
    # the rows differ where the configurations do: seed (rows 0, 1) and η_Y (rows 0, 2) both reach the run
    assert not np.allclose(rows.attention[0], rows.attention[1], rtol=F64.batched_rtol, atol=0)
    assert not np.allclose(rows.attention[0], rows.attention[2], rtol=F64.batched_rtol, atol=0)
    assert bool(jnp.all(rows.kl > 0)) and bool(jnp.all(rows.conserved_drift > 0))
