"""Benchmark: forward-only attribution vs exact per-example gradient inner products on the same pairs.

    python bench/geometry.py [--scale small] [--arch pythia] [--preset ch1] [--rh-form gram|explicit] [--hidden 256]

The synthetic identification task of ``cfka geometry attribution`` (small scale: 100 test × 900 train sequences
of 18 tokens, so 90,000 pairs) on its base model. Both methods score every (test, train) pair:

* forward-only: one batched forward pass per split for the RH/GH factors, then the token-Gram scores
  (``geometry/attribution.py``, preset ``--preset``), or for ``ch1`` with ``--rh-form explicit`` one product of
  the materialised ``|V′| × d`` RH matrices (the same score);
* exact: the per-sequence gradients of ``Σ_t log p_t`` (``lax.map`` over sequences, all parameters), then
  one matrix product ``G_test G_trainᵀ`` (``geometry/baselines.py``).

Times are warm (each jitted program runs once before it is timed; compile times are reported separately).
Agreement: Spearman of the forward-only scores with the exact first-order term (all parameters) over all pairs,
over the pairs where CH1 dominates (the readout block is at least half of the exact term,
``|RH| ≥ |exact − RH|``), and with the exact readout block (equal to RH by the readout-block lemma for an untied
head). Target (issue 12): pairs/s ratio ≥ 20× with Spearman ≥ 0.9 where CH1 dominates. Prints a table and ends
with one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time

if "--threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _n
    if _n == "1":
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"

import jax
import numpy as np

from cfka_jax.geometry import attribution, baselines
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.stats import spearman
from cfka_jax.experiments.geometry_common import base_model, scale


def timed(fn, *args, repeats: int = 1):
    """(result, first-call seconds, best warm seconds)."""
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return out, first, best


def forward_only(params, net, task, preset: str, vocab_mask, rh_form: str = "gram"):
    gh = attribution.PRESETS[preset][1]
    feats = jax.jit(functools.partial(attribution.sequence_features, net=net, gh=gh, vocab_mask=vocab_mask))
    if rh_form == "explicit":
        ids = None if vocab_mask is None else np.flatnonzero(np.asarray(vocab_mask))
        score = jax.jit(functools.partial(attribution.rh_scores, vocab_ids=ids))
    else:
        score = jax.jit(functools.partial(attribution.gram_scores, preset=preset))

    def run(p):
        return score(feats(p, task.batch("test")), feats(p, task.batch("train")))

    return timed(run, params)


def exact(params, net, task, scope: str):
    grads = jax.jit(functools.partial(baselines.sequence_grads, net=net, scope=scope))
    score = jax.jit(baselines.exact_scores)

    def run(p):
        (gte, _), (gtr, _) = grads(p, task.batch("test")), grads(p, task.batch("train"))
        return score(gte, gtr)

    return timed(run, params)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=("smoke", "small"), default="small")
    ap.add_argument("--arch", choices=("qwen", "pythia"), default="pythia")
    ap.add_argument("--preset", choices=sorted(attribution.PRESETS), default="ch1")
    ap.add_argument("--vocab", choices=("full", "total_unique"), default="total_unique")
    ap.add_argument("--rh-form", dest="rh_form", choices=("gram", "explicit"), default="gram",
                    help="ch1 only: token-Gram form, or the materialised |V′| × d RH matrices")
    ap.add_argument("--hidden", type=int, default=None, help="model width override (intermediate = 2 × hidden)")
    ap.add_argument("--threads", type=int, default=None, help="1: single-threaded XLA")
    args = ap.parse_args()
    s = scale(args.scale)
    if args.hidden:
        s = dataclasses.replace(s, model=dataclasses.replace(s.model, hidden=args.hidden, intermediate=2 * args.hidden))
    task, model, _ = base_model(s, args.arch)
    net, params = Net.split(model)
    mask = None
    if args.vocab == "total_unique":
        mask = attribution.total_unique_mask([task.train_tokens, task.test_tokens], s.task.vocab_size)
    if args.rh_form == "explicit" and args.preset != "ch1":
        raise SystemExit("--rh-form explicit needs --preset ch1 (GH is never materialised, spec pitfall 20)")
    fwd, fwd_first, fwd_s = forward_only(params, net, task, args.preset, mask, args.rh_form)
    ex, ex_first, ex_s = exact(params, net, task, "all")
    ro, _, _ = exact(params, net, task, "readout_only")
    pairs = int(np.prod(np.shape(fwd)))
    fwd, ex, ro = (np.asarray(x, np.float64).ravel() for x in (fwd, ex, ro))
    rh = np.asarray(forward_only(params, net, task, "ch1", mask)[0], np.float64).ravel()
    dominant = np.abs(rh) >= np.abs(ex - rh)
    row = {"bench": f"geometry_{args.scale}_{args.arch}_{args.preset}_{args.rh_form}", "hidden": s.model.hidden, "pairs": pairs,
           "params": int(sum(x.size for x in jax.tree.leaves(params))), "seq_len": s.task.seq_len,
           "forward_pairs_per_s": pairs / fwd_s, "exact_pairs_per_s": pairs / ex_s, "ratio": ex_s / fwd_s,
           "forward_s": fwd_s, "exact_s": ex_s, "forward_compile_s": fwd_first - fwd_s,
           "exact_compile_s": ex_first - ex_s, "spearman_vs_exact_all": spearman(fwd, ex),
           "ch1_dominant_fraction": float(dominant.mean()),
           "spearman_vs_exact_where_ch1_dominates": spearman(fwd[dominant], ex[dominant]),
           "spearman_vs_exact_readout_block": spearman(fwd, ro), "vocab": args.vocab,
           "load_avg_1m": os.getloadavg()[0]}
    row["target_met"] = row["ratio"] >= 20.0 and row["spearman_vs_exact_where_ch1_dominates"] >= 0.9
    for k, v in row.items():
        print(f"{k:>38}: {v:.4g}" if isinstance(v, float) else f"{k:>38}: {v}")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
