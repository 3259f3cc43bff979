"""Benchmark: a theory sweep as one vmapped jit vs the same configurations one by one.

    python bench/theory_sweep.py [--configs 1024] [--steps 200] [--batch 32]

Trains P = seeds × η_Y × η_Z configurations of the (Y, Z) theory model (float32, minibatch SGD on the default
fact world) and times (a) one ``jit(vmap(run_one))`` call over all P and (b) a Python loop calling the jitted
``run_one`` P times. Compilation is timed separately and excluded from both throughputs. Prints a table and
ends with one JSON line of figures.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from cfka_jax.theory.rate_sweep import make_grid, run_one_jit, sweep_jit
from cfka_jax.theory.train import SGDConfig
from cfka_jax.theory.world import WorldConfig, make_world


def _timed(fn):
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=int, default=1024, help="seeds × 8 η_Y × 8 η_Z; must be a multiple of 64")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32, help="minibatch size; 0 trains on the full population loss")
    args = ap.parse_args()
    world = make_world(WorldConfig())
    grid = make_grid(range(args.configs // 64), np.geomspace(0.1, 1.0, 8), np.geomspace(0.005, 0.1, 8))
    cfg = SGDConfig(steps=args.steps, batch_size=args.batch or None, log_every=args.steps)
    _, t_compile_v = _timed(lambda: sweep_jit(world, grid, cfg=cfg))
    vec, t_vec = _timed(lambda: sweep_jit(world, grid, cfg=cfg))
    _, t_compile_1 = _timed(lambda: run_one_jit(world, grid.seed[0], grid.eta_y[0], grid.eta_z[0], cfg=cfg))
    start = time.perf_counter()
    loop = [run_one_jit(world, s, ey, ez, cfg=cfg) for s, ey, ez in zip(grid.seed, grid.eta_y, grid.eta_z)]
    jax.block_until_ready(loop)
    t_loop = time.perf_counter() - start
    max_diff = float(np.max(np.abs(np.stack([r.kl for r in loop]) - np.asarray(vec.kl))))
    p = int(grid.seed.shape[0])
    ratio = t_loop / t_vec
    print(f"configs={p} steps={args.steps} batch={args.batch} device={jax.devices()[0].platform}")
    print(f"vmapped jit : {t_vec:8.3f} s  ({p / t_vec:10.1f} configs/s)  compile {t_compile_v:.2f} s")
    print(f"python loop : {t_loop:8.3f} s  ({p / t_loop:10.1f} configs/s)  compile {t_compile_1:.2f} s")
    print(f"throughput ratio (loop time / vmapped time): {ratio:.1f}x   max |KL diff| = {max_diff:.2e}")
    print(json.dumps({"bench": "theory_sweep", "configs": p, "steps": args.steps, "batch": args.batch,
                      "vmapped_s": round(t_vec, 4), "loop_s": round(t_loop, 4), "ratio": round(ratio, 2),
                      "max_kl_diff": max_diff, "device": jax.devices()[0].platform}))


if __name__ == "__main__":
    main()
