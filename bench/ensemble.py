"""Benchmark: a seed ensemble of Biography ports in one jitted program vs the same seeds trained one by one.

    python bench/ensemble.py [--preset smoke] [--seeds 8] [--steps 30] [--rounds 3] [--arch qwen]

Trains N members of the preset's port for ``steps`` PT steps (a) as N sequential lone runs of the jitted lone
step (``train/step.py``) and (b) as one ensemble program in each form of ``train/ensemble.make_ensemble_step``:
``vmap`` (the lone step vmapped over the seed axis) and ``map`` (``lax.map`` over the members inside the one
program). Each member has its own batch stream (``EpochBatcher`` seeded with its seed, built on the fly in every
variant) and the preset's AdamW schedule. Compilation is timed separately and excluded; the variants run in
interleaved rounds (the machine's load changes from minute to minute) and the median is reported: seed-steps/s,
the ratio to the sequential runs (target ≥ 2× on CPU at the smoke preset), the largest parameter difference
between member i and lone run i, the load average, and ends with one JSON line.

Steady state is the hard comparison: the sequential runs above share ONE compiled lone step. Separate runs (N
invocations of ``cfka pretrain``) each compile their own; ``end_to_end`` therefore also times the preset's whole
PT schedule both ways from a fresh jit, compilation included: N lone runs, each building and compiling its step,
against one ensemble program (the form ``auto`` picks), in the same interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np

from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.ensemble import EnsembleSpec, ensemble_models
from cfka_jax.train.ensemble import (ENSEMBLE_MODES, init_ensemble, make_ensemble_step, member, split_members,
                                     stack_members)
from cfka_jax.train.optim import make_optimizer
from cfka_jax.train.step import init_state, make_train_step


def _batchers(bundle, seeds, batch):
    return [EpochBatcher(bundle.splits["pt_train"].docs(), seq_len=bundle.config.seq_len, eos_id=bundle.eos_id,
                         batch_size=batch, seed=s, doc_mask=bundle.config.doc_mask) for s in seeds]


def _ensemble_runner(graphdef, rest, params_E, tx, batchers, mode):
    """``run(steps) -> final params_E``: the ensemble program from the initial state (one compiled step)."""
    step = make_ensemble_step(graphdef, rest, tx, mode=mode)

    def run(steps):
        state = init_ensemble(jax.tree.map(np.copy, params_E), tx)
        for t in range(steps):
            state, _ = step(state, stack_members([b(t) for b in batchers]))
        return jax.block_until_ready(state.params)

    return run


def _sequential_runner(graphdef, rest, params_E, tx, batchers):
    """``run(steps) -> [final params of each lone run]``: the members one after another (one compiled step)."""
    step = make_train_step(graphdef, rest, tx)

    def run(steps):
        finals = []
        for e, b in enumerate(batchers):
            state = init_state(jax.tree.map(np.copy, member(params_E, e)), tx)
            for t in range(steps):
                state, _ = step(state, b(t))
            finals.append(jax.block_until_ready(state.params))
        return finals

    return run


def _fresh_sequential(graphdef, rest, params_E, tx, batchers):
    """``run(steps)``: N separate runs, each compiling its own lone step (as N ``cfka pretrain`` calls would)."""

    def run(steps):
        finals = []
        for e, b in enumerate(batchers):
            step = make_train_step(graphdef, rest, tx)
            state = init_state(jax.tree.map(np.copy, member(params_E, e)), tx)
            for t in range(steps):
                state, _ = step(state, b(t))
            finals.append(jax.block_until_ready(state.params))
        return finals

    return run


def _fresh_ensemble(graphdef, rest, params_E, tx, batchers, mode):
    """``run(steps)``: one ensemble program built and compiled from scratch."""
    return lambda steps: _ensemble_runner(graphdef, rest, params_E, tx, batchers, mode)(steps)


def _timed(run, steps) -> tuple[object, float]:
    start = time.perf_counter()
    out = run(steps)
    return out, time.perf_counter() - start


def _max_diff(ens, lone) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for e in range(len(lone)) for x, y in zip(jax.tree.leaves(member(ens, e)), jax.tree.leaves(lone[e])))


def _end_to_end(spec, bundle, graphdef, params_E, rest, tx, batch, rounds) -> dict:
    """The preset's whole PT schedule, N fresh lone runs vs one fresh ensemble, compile included (median)."""
    steps, mode = spec.scale.pt.steps, spec.step_mode
    runs = {"sequential": _fresh_sequential(graphdef, rest, params_E, tx, _batchers(bundle, spec.seeds, batch)),
            "ensemble": _fresh_ensemble(graphdef, rest, params_E, tx, _batchers(bundle, spec.seeds, batch), mode)}
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(_timed(run, steps)[1])
    med = {name: float(np.median(t)) for name, t in times.items()}
    return {"steps": steps, "mode": mode, "sequential_s": round(med["sequential"], 2),
            "ensemble_s": round(med["ensemble"], 2), "ratio": round(med["sequential"] / med["ensemble"], 2),
            "seed_steps_per_s": round(len(spec.seeds) * steps / med["ensemble"], 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="smoke", choices=["smoke", "small"])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per member and round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median time is reported")
    ap.add_argument("--arch", default="qwen", choices=["qwen", "pythia"])
    ap.add_argument("--cache-dir", default="runs/data-cache")
    a = ap.parse_args()
    spec = EnsembleSpec(preset=a.preset, arch=a.arch, seeds=tuple(range(a.seeds)))
    bundle = build_data(spec.scale.data_config(), a.cache_dir)
    graphdef, params_E, rest = split_members(ensemble_models(spec, len(bundle.tokenizer)))
    tx, batch = make_optimizer(spec.scale.pt.optim()), spec.scale.pt.batch
    runners = {"sequential": _sequential_runner(graphdef, rest, params_E, tx, _batchers(bundle, spec.seeds, batch))}
    runners |= {m: _ensemble_runner(graphdef, rest, params_E, tx, _batchers(bundle, spec.seeds, batch), m)
                for m in ENSEMBLE_MODES}
    compile_s = {name: _timed(run, 1)[1] for name, run in runners.items()}
    times, finals = {name: [] for name in runners}, {}
    for _ in range(a.rounds):  # interleaved, so a change of machine load hits every variant alike
        for name, run in runners.items():
            finals[name], t = _timed(run, a.steps)
            times[name].append(t)
    med = {name: float(np.median(t)) for name, t in times.items()}
    e2e = _end_to_end(spec, bundle, graphdef, params_E, rest, tx, batch, a.rounds)
    seed_steps, load = a.seeds * a.steps, os.getloadavg()[0]
    res = {m: {"seed_steps_per_s": round(seed_steps / med[m], 2), "ratio": round(med["sequential"] / med[m], 2),
               "compile_s": round(compile_s[m], 1), "max_param_diff": _max_diff(finals[m], finals["sequential"])}
           for m in ENSEMBLE_MODES}
    print(f"preset={a.preset} arch={a.arch} seeds={a.seeds} steps={a.steps} rounds={a.rounds} "
          f"cpus={os.cpu_count()} load={load:.1f}")
    print(f"sequential     : {med['sequential']:8.2f} s  ({seed_steps / med['sequential']:8.1f} seed-steps/s)")
    for m, r in res.items():
        print(f"ensemble {m:5s}: {med[m]:8.2f} s  ({r['seed_steps_per_s']:8.1f} seed-steps/s)  ratio "
              f"{r['ratio']:.2f}x  compile {r['compile_s']:.1f} s  max |param diff| vs lone {r['max_param_diff']:.2e}")
    print(f"end to end ({e2e['steps']} PT steps, compile included): sequential {e2e['sequential_s']:.1f} s, "
          f"ensemble ({e2e['mode']}) {e2e['ensemble_s']:.1f} s, ratio {e2e['ratio']:.2f}x")
    print(json.dumps({"bench": "ensemble", "preset": a.preset, "arch": a.arch, "seeds": a.seeds, "steps": a.steps,
                      "rounds": a.rounds, "sequential_seed_steps_per_s": round(seed_steps / med["sequential"], 2),
                      **res, "best_ratio": max(r["ratio"] for r in res.values()), "end_to_end": e2e,
                      "load_avg_1m": round(load, 2),
                      "device": jax.devices()[0].platform}))


if __name__ == "__main__":
    main()
