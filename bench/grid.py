"""Benchmark: a 16-member run grid of Biography CPT in one program vs the same 16 runs one after another.

    python bench/grid.py [--preset small] [--steps 20] [--method 'replay-all + ewc']
                         [--grid 'lr=1e-3,5e-4,3e-4,2e-4;alpha=0.5,0.8;seeds=0,1'] [--mode auto] [--cache-dir C]

Both sides train the grid's members (``runs/grid.py``: each its own learning rate, replay share α with its own
document mixture and batch stream, seed, and the method's EWC λ) for the same ``--steps`` CPT steps from the same
starting parameters (the preset's freshly initialised port: the timing does not depend on what PT learned), in
the same process, back to back:

* ``sequential``: 16 lone runs, each building and compiling its own jitted step (``train/step.make_train_step``
  with its own AdamW schedule, as 16 ``cfka cpt`` runs do) and running ``--steps`` steps;
* ``grid``: one program (``train/ensemble.make_grid_step``, compiled once; ``--mode`` as ``run_grid`` picks it)
  running ``--steps`` steps of all 16 members.

What both sides share is built once, outside the timings: the data, each member's documents and batch streams, the
EWC Fisher (a lone run computes its own: left out, which favours the sequential side), the models. Evaluation and
generation EM are left out (the same work per member on both sides). Reported: wall and CPU seconds of each side,
their ratios, each side's first step (compilation included) and steady per-member-step time (what bounds the
ratio: 16 compilations against one, and the steady cost of a member-step in each form), the largest parameter
difference of a member against its lone run, the load average; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp

from cfka_jax.continual.ewc import EWCAnchor
from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.pipeline import build_data
from cfka_jax.runs import grid as grid_run
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.grid_spec import GridSpec, parse_grid
from cfka_jax.runs.specs import CPTSpec
from cfka_jax.train import ensemble as ens
from cfka_jax.train.optim import make_optimizer
from cfka_jax.train.step import Loss, Update, init_state, make_train_step
from flax import nnx


def _clock():
    return time.perf_counter(), time.process_time()


def _since(start) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def _sequential(setup, steps: int):
    """16 lone runs, each compiling its own step: (final params per member, wall, cpu, first-step walls, walls of
    the steps after the first)."""
    _, graphdef, rest, params_E, mask, member_masks, batchers, penalty, args, specs = setup
    out, firsts, rests, start = [], [], [], _clock()
    for e, spec in enumerate(specs):
        tx = make_optimizer(spec.scale.cpt.optim())
        if member_masks is not None:  # this member's freeze-k mask, as its lone run has it
            mask = jax.tree.map(lambda m: bool(m[e] > 0), member_masks)
        step = make_train_step(graphdef, rest, tx, loss=Loss(penalty=penalty), update=Update(trainable=mask))
        state = init_state(jax.tree.map(jnp.copy, ens.member(params_E, e)), step.tx)
        lone_args = () if args is None else (EWCAnchor(args.fisher, args.anchor, args.lam[e]),)
        t0 = time.perf_counter()
        for t in range(steps):
            state, metrics = step(state, batchers[e](t), *lone_args)
            if t == 0:
                jax.block_until_ready(metrics["loss"])
                firsts.append(time.perf_counter() - t0)
        out.append(jax.block_until_ready(state.params))
        rests.append(time.perf_counter() - t0 - firsts[-1])
    return out, *_since(start), firsts, rests


def _grid(setup, steps: int, mode: str):
    """The grid program: (final stacked params, wall, cpu, wall up to the end of the first step (building and
    compiling included), wall of the steps after it)."""
    _, graphdef, rest, params_E, mask, member_masks, batchers, penalty, args, specs = setup
    start = _clock()
    sharding = ens.member_sharding(len(specs)) if mode == "vmap" else None
    step, tx_of, numbers = grid_run.grid_step(graphdef, rest, specs[0].scale.cpt.optim(), specs, mask,
                                              member_masks, penalty, mode)
    state = ens.shard_members(ens.init_grid(jax.tree.map(jnp.copy, params_E), tx_of, numbers), sharding)
    extra = (() if args is None else (ens.replicate(args, sharding),)) + (
        () if member_masks is None else (ens.shard_members(member_masks, sharding),))
    first = None
    for t in range(steps):
        state, metrics = step(state, ens.stack_members([b(t) for b in batchers]), *extra)
        if t == 0:
            jax.block_until_ready(metrics["loss"])
            first = _since(start)[0]
    params = jax.block_until_ready(state.params)
    wall, cpu = _since(start)
    return params, wall, cpu, first, wall - first


def _setup(grid: GridSpec, cache_dir: str):
    p = grid.base.scale
    data = build_data(p.data_config(), cache_dir)
    start = build_model(p, grid.base.arch, len(data.tokenizer), grid.base.seed)
    params = nnx.split(start, nnx.Param, ...)[1]
    graphdef, rest, params_E, mask, member_masks, docs, penalty, args = grid_run._members(grid, data, params, p)
    specs = [grid.member_spec(i) for i in range(len(grid))]
    batchers = [EpochBatcher(d, seq_len=data.config.seq_len, eos_id=data.eos_id, batch_size=p.cpt.batch,
                             seed=s.seed + 1, doc_mask=data.config.doc_mask) for d, s in zip(docs, specs)]
    return grid, graphdef, rest, params_E, mask, member_masks, batchers, penalty, args, specs




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--method", default="replay-all + ewc")
    ap.add_argument("--grid", default="lr=1e-3,5e-4,3e-4,2e-4;alpha=0.5,0.8;seeds=0,1")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--mode", default="auto", choices=("auto", "vmap", "map"))
    ap.add_argument("--cache-dir", default="runs/data-cache")
    a = ap.parse_args()
    grid = GridSpec(CPTSpec(preset=a.preset, method=a.method, out="bench-grid-unused", progress=False),
                    parse_grid(a.grid), mode=a.mode)
    mode = grid_run._step_mode(grid)
    setup = _setup(grid, a.cache_dir)
    num = len(grid)
    print(f"{num} members, preset {a.preset}, method {a.method!r}, {a.steps} CPT steps per member, mode {mode}, "
          f"{jax.device_count()} {jax.default_backend()} device(s), load {os.getloadavg()[0]:.1f}")
    lone, s_wall, s_cpu, s_first, s_rest = _sequential(setup, a.steps)
    print(f"sequential: {s_wall:.1f} s wall, {s_cpu:.1f} s CPU (first steps incl. compile: {sum(s_first):.1f} s)")
    params_E, g_wall, g_cpu, g_first, g_rest = _grid(setup, a.steps, mode)
    print(f"grid      : {g_wall:.1f} s wall, {g_cpu:.1f} s CPU (build + compile + first step: {g_first:.1f} s)")
    err = max(ens.max_rel_diff(ens.member(params_E, e), lone[e]) for e in range(num))
    steady_lone = sum(s_rest) / (num * max(a.steps - 1, 1))
    steady_grid = g_rest / (num * max(a.steps - 1, 1))
    ratio, cpu_ratio = s_wall / g_wall, s_cpu / g_cpu
    print(f"ratio: {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU (target >= 3x on 2 cores)")
    print(f"bounded by: {num} compilations vs 1 ({sum(s_first):.1f} s vs {g_first:.1f} s of first steps) and the "
          f"steady member-step ({1e3 * steady_lone:.1f} ms alone vs {1e3 * steady_grid:.1f} ms in the grid); "
          f"max member-vs-lone parameter difference {err:.1e} of a leaf's largest entry; "
          f"load {os.getloadavg()[0]:.1f}")
    print(json.dumps({"bench": "grid", "preset": a.preset, "method": a.method, "grid": a.grid, "members": num,
                      "steps": a.steps, "mode": mode, "backend": jax.default_backend(), "devices": jax.device_count(),
                      "sequential_wall_s": s_wall, "sequential_cpu_s": s_cpu, "sequential_first_steps_s": sum(s_first),
                      "grid_wall_s": g_wall, "grid_cpu_s": g_cpu, "grid_first_step_s": g_first,
                      "ratio_wall": ratio, "ratio_cpu": cpu_ratio, "steady_member_step_ms_lone": 1e3 * steady_lone,
                      "steady_member_step_ms_grid": 1e3 * steady_grid, "max_rel_param_diff": err,
                      "loadavg": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
