"""Benchmark: forward-only attribution vs exact per-example gradient inner products on the same pairs.

    python bench/geometry.py [--scale small] [--arch pythia] [--preset ch1] [--rh-form gram|explicit] [--hidden 256]
                             [--layers 6] [--pool 2000] [--pretrain-steps 0] [--train-chunk 50]
                             [--model-vocab 151936] [--feature-chunk 50] [--exact-test 10] [--exact-product numpy]

The synthetic identification task of ``cfka geometry attribution`` (small scale: 100 test × 900 train sequences
of 18 tokens, so 90,000 pairs) on its base model. ``--hidden`` / ``--layers`` / ``--pool`` (train sequences, a
multiple of the 10 classes) reach the paper's regime; ``--pretrain-steps 0`` benchmarks the random-init model
(the timings and memory do not depend on the weights; the agreement columns then describe an untrained model).
Both methods score every (test, train) pair:

* forward-only: one batched forward pass per split for the RH/GH factors, then the token-Gram scores
  (``geometry/attribution.py``, preset ``--preset``), or for ``ch1`` with ``--rh-form explicit`` one product of
  the materialised ``|V′| × d`` RH matrices (the same score);
* exact: the per-sequence gradients of ``Σ_t log p_t`` (``lax.map`` over sequences, all parameters), then
  one matrix product ``G_test G_trainᵀ`` (``geometry/baselines.py``). With ``--train-chunk c`` the test
  gradients ``[m, P]`` are kept and the train gradients are computed and multiplied ``c`` sequences at a time, so
  the exact side holds ``(m + c) · P`` floats instead of ``(m + n) · P`` (the least an exact method needs
  without recomputing the test gradients). ``--exact-train N`` runs the exact side on the first N train
  sequences only and extrapolates its time linearly to the pool (every train chunk costs the same; the test
  gradients are paid once), reported as ``exact_extrapolated``; the agreement columns are then over those pairs.
  ``--exact-test M`` does the same on the test side (at a real vocabulary 100 test gradients of ~1e8 floats do not
  fit): test gradients scale by m/M, products by mn/(M·n′); ``exact_needed_buffer_bytes`` is what the whole test
  set would hold. ``--exact-product numpy`` runs the products through numpy's BLAS instead of XLA.

``--model-vocab V`` gives the model V embedding/head rows (151,936: the Qwen2.5 vocabulary) while the task keeps
its own ids, so the readout dominates P as in a real LM; the forward side then stores g compacted to V′
(``--g-store compact``, ``sequence_features(vocab_ids=...)``) and runs ``--feature-chunk`` sequences per forward
so that the ``[chunk, S, V]`` logits, not ``[N, S, V]``, are its largest buffer.

Peak memory: a thread samples the resident set size (``bench/memory.py``'s ``PeakSampler``) per phase
(``forward`` runs first, then ``exact``, so the exact phase's peak includes what the forward phase left); the
sizes of the buffers each method must hold are also reported (``*_buffer_bytes``).

Times are warm: each jitted program is compiled ahead of time (``lower(...).compile()``, timed as the compile
time) and then run once. ``ratio_products_at_peak`` is a floor for any exact method: its measured per-example
gradients plus the ``2 m n P`` product flops at the fp32 matmul peak measured at the start of the same run
(``bench/models.matmul_peak``), over the forward-only time.
Agreement: Spearman of the forward-only scores with the exact first-order term (all parameters) over all pairs,
over the pairs where CH1 dominates (the readout block is at least half of the exact term,
``|RH| ≥ |exact − RH|``), and with the exact readout block (equal to RH by the readout-block lemma for an untied
head). Target (issues 12, 25): pairs/s ratio ≥ 20× with Spearman ≥ 0.9 where CH1 dominates. Prints a table and ends
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
from cfka_jax.experiments.geometry_common import Scale, base_model, scale

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory import PeakSampler  # noqa: E402  (bench/memory.py: the project's RSS sampler)
from models import matmul_peak  # noqa: E402  (bench/models.py: fp32 matmul peak of this run)


class Clock:
    """Compile-ahead timing: ``compile(fn, *args)`` lowers and compiles a jitted function (the time goes to
    ``compile_s``) and returns the compiled program; ``run`` times a call of compiled programs (``run_s``)."""

    def __init__(self):
        self.compile_s = 0.0
        self.run_s = 0.0
        self.cpu_s = 0.0
        """Process CPU seconds (all threads) of the runs: less sensitive than wall time to other load."""

    def compile(self, fn, *args):
        t = time.perf_counter()
        out = fn.lower(*args).compile()
        self.compile_s += time.perf_counter() - t
        return out

    def run(self, fn, *args):
        t, c = time.perf_counter(), time.process_time()
        out = jax.block_until_ready(fn(*args))
        self.run_s += time.perf_counter() - t
        self.cpu_s += time.process_time() - c
        return out


def nbytes(tree) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def forward_only(params, net, task, preset: str, vocab_mask, rh_form: str = "gram", compact: bool = False,
                 chunk: int = 0):
    """(scores, clock, bytes of the train-side features the scores are computed from). ``compact`` stores g on
    the ids of ``vocab_mask`` only (``sequence_features(vocab_ids=...)``); ``chunk`` > 0 runs the forward that many
    sequences at a time."""
    gh = attribution.PRESETS[preset][1]
    ids = None if vocab_mask is None else np.flatnonzero(np.asarray(vocab_mask))
    store = {"vocab_ids": ids} if compact and ids is not None else {"vocab_mask": vocab_mask}
    feats = jax.jit(functools.partial(attribution.sequence_features, net=net, gh=gh, chunk=chunk or None, **store))
    if rh_form == "explicit":
        score = jax.jit(functools.partial(attribution.rh_scores, vocab_ids=None if "vocab_ids" in store else ids))
    else:
        score = jax.jit(functools.partial(attribution.gram_scores, preset=preset))
    clock = Clock()
    te, tr = task.batch("test"), task.batch("train")
    f_te, f_tr = clock.compile(feats, params, te), clock.compile(feats, params, tr)
    a, b = clock.run(f_te, params, te), clock.run(f_tr, params, tr)
    out = clock.run(clock.compile(score, a, b), a, b)
    return out, clock, nbytes(a) + nbytes(b)


def numpy_exact_scores(grads_a: dict, grads_b: dict) -> np.ndarray:
    """``baselines.exact_scores`` through numpy's BLAS (host arrays, no copy on CPU): at m′, c ≈ 10 against P ≈ 1e8
    the product is memory-bound and XLA:CPU's dot ran it ~3× slower than OpenBLAS here."""
    return sum(np.asarray(grads_a[p]) @ np.asarray(grads_b[p]).T for p in grads_a)


def exact(params, net, task, scope: str, train_chunk: int = 0, train_limit: int = 0, test_limit: int = 0,
          product: str = "xla"):
    """(scores, clock, bytes of the gradients held at once, train sequences done, test sequences done): all train
    gradients at once (``train_chunk`` 0) or the test gradients kept and the train gradients ``train_chunk``
    sequences at a time. ``train_limit`` > 0 stops after that many train sequences (whole chunks) and
    ``test_limit`` > 0 takes the first that many test sequences; ``clock`` then holds the time extrapolated to the
    whole split: test gradients × m/m′, train gradients × n/n′, products × (m n)/(m′ n′) (each is linear in its
    count), with ``clock.measured_*`` the measured part and ``clock.parts`` the three measured times. ``product``:
    ``xla`` (``baselines.exact_scores`` jitted) or ``numpy`` (:func:`numpy_exact_scores`)."""
    grads = jax.jit(functools.partial(baselines.sequence_grads, net=net, scope=scope))
    score = jax.jit(baselines.exact_scores)
    clock = Clock()
    te, tr = task.batch("test"), task.batch("train")
    n, m = tr["tokens"].shape[0], te["tokens"].shape[0]
    c = n if train_chunk <= 0 else train_chunk
    if n % c:
        raise SystemExit(f"--train-chunk {train_chunk} must divide the {n} train sequences")
    done = n if train_limit <= 0 else min(n, -(-train_limit // c) * c)
    m_done = m if test_limit <= 0 else min(m, test_limit)
    te = jax.tree.map(lambda x: x[:m_done], te)
    chunks = [jax.tree.map(lambda x, i=i: x[i:i + c], tr) for i in range(0, done, c)]
    g_te = clock.compile(grads, params, te)
    g_tr = g_te if c == m_done else clock.compile(grads, params, chunks[0])
    gte, _ = clock.run(g_te, params, te)
    parts = {"test_grads_s": clock.run_s, "train_grads_s": 0.0, "products_s": 0.0}
    cpu = {"test_grads_s": clock.cpu_s, "train_grads_s": 0.0, "products_s": 0.0}
    held = nbytes(gte)
    prod, cols = None, []
    for chunk in chunks:
        for key, fn, args in (("train_grads_s", g_tr, (params, chunk)), ("products_s", None, None)):
            t, t_cpu = clock.run_s, clock.cpu_s
            if fn is not None:
                gtr, _ = clock.run(fn, *args)
                held = max(held, nbytes(gte) + nbytes(gtr))
            else:
                if prod is None:
                    prod = numpy_exact_scores if product == "numpy" else clock.compile(score, gte, gtr)
                cols.append(clock.run(prod, gte, gtr))
                del gtr
            parts[key] += clock.run_s - t
            cpu[key] += clock.cpu_s - t_cpu
    clock.measured_run_s, clock.measured_cpu_s = clock.run_s, clock.cpu_s
    scale = {"test_grads_s": m / m_done, "train_grads_s": n / done, "products_s": m * n / (m_done * done)}
    clock.run_s = sum(parts[k] * scale[k] for k in parts)
    clock.cpu_s = sum(cpu[k] * scale[k] for k in cpu)
    clock.parts = parts
    clock.extrapolated_parts = {k: parts[k] * scale[k] for k in parts}
    return np.concatenate([np.asarray(x) for x in cols], axis=1), clock, held, done, m_done


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=("smoke", "small"), default="small")
    ap.add_argument("--arch", choices=("qwen", "pythia"), default="pythia")
    ap.add_argument("--preset", choices=sorted(attribution.PRESETS), default="ch1")
    ap.add_argument("--vocab", choices=("full", "total_unique"), default="total_unique")
    ap.add_argument("--rh-form", dest="rh_form", choices=("gram", "explicit"), default="gram",
                    help="ch1 only: token-Gram form, or the materialised |V′| × d RH matrices")
    ap.add_argument("--hidden", type=int, default=None, help="model width override (intermediate = 2 × hidden)")
    ap.add_argument("--layers", type=int, default=None, help="number of blocks override")
    ap.add_argument("--pool", type=int, default=None,
                    help="train sequences (a multiple of the task's classes); the test set stays the scale's")
    ap.add_argument("--pretrain-steps", dest="pretrain_steps", type=int, default=None,
                    help="base-model AdamW steps override; 0 = the random-init model")
    ap.add_argument("--train-chunk", dest="train_chunk", type=int, default=0,
                    help="exact side: train gradients per chunk (0 = all at once); the test gradients are kept")
    ap.add_argument("--exact-train", dest="exact_train", type=int, default=0,
                    help="exact side: run only the first N train sequences (whole chunks) and extrapolate its time "
                         "linearly to the pool (0 = all); agreement is then over those pairs")
    ap.add_argument("--exact-test", dest="exact_test", type=int, default=0,
                    help="exact side: run only the first M test sequences and extrapolate (0 = all); with a real "
                         "vocabulary m test gradients of P floats each do not fit in memory")
    ap.add_argument("--model-vocab", dest="model_vocab", type=int, default=None,
                    help="the model's vocabulary (embedding/head rows), e.g. 151936 for the Qwen2.5 shapes; the "
                         "task uses its own first ids")
    ap.add_argument("--g-store", dest="g_store", choices=("compact", "masked"), default="compact",
                    help="forward side: g stored on the |V′| ids (compact) or at the full vocabulary, zero outside V′")
    ap.add_argument("--feature-chunk", dest="feature_chunk", type=int, default=0,
                    help="forward side: sequences per forward pass (0 = a whole split at once)")
    ap.add_argument("--exact-product", dest="exact_product", choices=("xla", "numpy"), default="xla",
                    help="exact side: the G_test G_trainᵀ products jitted (XLA) or through numpy's BLAS")
    ap.add_argument("--threads", type=int, default=None, help="1: single-threaded XLA")
    return ap.parse_args(argv)


def bench_scale(args: argparse.Namespace) -> Scale:
    """The scale of ``args.scale`` with the ``--hidden`` / ``--layers`` / ``--pool`` / ``--pretrain-steps``
    overrides; a bad value exits with a one-line error naming the flag."""
    s = scale(args.scale)
    for flag, v in (("--hidden", args.hidden), ("--layers", args.layers), ("--pool", args.pool)):
        if v is not None and v < 1:
            raise SystemExit(f"{flag} must be a positive integer, got {v}")
    if args.pretrain_steps is not None and args.pretrain_steps < 0:
        raise SystemExit(f"--pretrain-steps must be >= 0, got {args.pretrain_steps}")
    if args.train_chunk < 0:
        raise SystemExit(f"--train-chunk must be >= 0, got {args.train_chunk}")
    for flag, v in (("--exact-train", args.exact_train), ("--exact-test", args.exact_test),
                    ("--feature-chunk", args.feature_chunk)):
        if v < 0:
            raise SystemExit(f"{flag} must be >= 0, got {v}")
    if args.model_vocab is not None and args.model_vocab < s.task.vocab_size:
        raise SystemExit(f"--model-vocab {args.model_vocab} is below the task's {s.task.vocab_size} ids")
    model = s.model
    if args.hidden:
        if args.hidden % model.heads:
            raise SystemExit(f"--hidden {args.hidden} must be a multiple of the {model.heads} heads")
        model = dataclasses.replace(model, hidden=args.hidden, intermediate=2 * args.hidden)
    if args.layers:
        model = dataclasses.replace(model, layers=args.layers)
    task = s.task
    if args.pool:
        if args.pool % task.num_classes:
            raise SystemExit(f"--pool {args.pool} must be a multiple of the {task.num_classes} classes")
        task = dataclasses.replace(task, train_per_class=args.pool // task.num_classes)
    steps = s.pretrain_steps if args.pretrain_steps is None else args.pretrain_steps
    return dataclasses.replace(s, task=task, model=model, pretrain_steps=steps)


def main(argv=None) -> None:
    args = parse_args(argv)
    s = bench_scale(args)
    if args.rh_form == "explicit" and args.preset != "ch1":
        raise SystemExit("--rh-form explicit needs --preset ch1 (GH is never materialised, spec pitfall 20)")
    peak_gflops = max(matmul_peak())
    with PeakSampler() as mem:
        task, model, _ = base_model(s, args.arch, args.model_vocab)
        net, params = Net.split(model)
        vocab = args.model_vocab or s.task.vocab_size
        mask = None
        if args.vocab == "total_unique":
            mask = attribution.total_unique_mask([task.train_tokens, task.test_tokens], vocab)
        fwd_opts = {"compact": args.g_store == "compact", "chunk": args.feature_chunk}
        mem.mark("forward")
        start = {"forward": mem.rss()}
        fwd, fclock, f_bytes = forward_only(params, net, task, args.preset, mask, args.rh_form, **fwd_opts)
        mem.mark("exact")
        start["exact"] = mem.rss()
        ex, eclock, e_bytes, done, m_done = exact(params, net, task, "all", args.train_chunk, args.exact_train,
                                                  args.exact_test, args.exact_product)
        mem.mark("checks")
        ro = exact(params, net, task, "readout_only", args.train_chunk, args.exact_train, args.exact_test,
                   args.exact_product)[0]
        rh = fwd if args.preset == "ch1" else forward_only(params, net, task, "ch1", mask, **fwd_opts)[0]
    pairs = int(np.prod(np.shape(fwd)))
    fwd, rh = (np.asarray(x)[:m_done, :done] for x in (fwd, rh))
    fwd, ex, ro, rh = (np.asarray(x, np.float64).ravel() for x in (fwd, ex, ro, rh))
    dominant = np.abs(rh) >= np.abs(ex - rh)
    n_params = int(sum(x.size for x in jax.tree.leaves(params)))
    base = mem.peaks.get("base", 0)
    row = {"bench": f"geometry_{args.scale}_{args.arch}_{args.preset}_{args.rh_form}", "hidden": s.model.hidden,
           "layers": s.model.layers, "train_seqs": len(task.train_tokens), "test_seqs": len(task.test_tokens),
           "pairs": pairs, "params": n_params, "seq_len": s.task.seq_len, "pretrain_steps": s.pretrain_steps,
           "train_chunk": args.train_chunk,
           "forward_pairs_per_s": pairs / fclock.run_s, "exact_pairs_per_s": pairs / eclock.run_s,
           "ratio": eclock.run_s / fclock.run_s, "forward_s": fclock.run_s, "exact_s": eclock.run_s,
           "forward_cpu_s": fclock.cpu_s, "exact_cpu_s": eclock.cpu_s, "ratio_cpu": eclock.cpu_s / fclock.cpu_s,
           "exact_product": args.exact_product, "model_vocab": vocab, "vocab_prime": None if mask is None else int(mask.sum()), "g_store": args.g_store,
           "feature_chunk": args.feature_chunk, "exact_train_measured": done, "exact_test_measured": m_done,
           "exact_extrapolated": done < len(task.train_tokens) or m_done < len(task.test_tokens),
           **{f"exact_measured_{k}": v for k, v in eclock.parts.items()},
           "matmul_peak_gflops": peak_gflops,
           "exact_products_at_peak_s": 2.0 * pairs * n_params / (peak_gflops * 1e9),
           "exact_grads_s": eclock.extrapolated_parts["test_grads_s"] + eclock.extrapolated_parts["train_grads_s"],
           "exact_needed_buffer_bytes": int(e_bytes * (len(task.test_tokens) + (args.train_chunk or len(
               task.train_tokens))) / (m_done + (args.train_chunk or len(task.train_tokens)))),
           "exact_measured_s": eclock.measured_run_s, "exact_measured_cpu_s": eclock.measured_cpu_s,
           "forward_compile_s": fclock.compile_s, "exact_compile_s": eclock.compile_s,
           "forward_buffer_bytes": f_bytes, "exact_buffer_bytes": e_bytes,
           "forward_start_rss_bytes": start["forward"], "exact_start_rss_bytes": start["exact"],
           "forward_peak_rss_bytes": mem.peaks.get("forward", 0), "exact_peak_rss_bytes": mem.peaks.get("exact", 0),
           "rss_base_bytes": base,
           "spearman_vs_exact_all": spearman(fwd, ex), "ch1_dominant_fraction": float(dominant.mean()),
           "spearman_vs_exact_where_ch1_dominates": spearman(fwd[dominant], ex[dominant]) if dominant.sum() > 2
           else float("nan"),
           "spearman_vs_exact_readout_block": spearman(fwd, ro), "vocab": args.vocab,
           "load_avg_1m": os.getloadavg()[0]}
    row["ratio_products_at_peak"] = (row["exact_grads_s"] + row["exact_products_at_peak_s"]) / fclock.run_s
    row["target_met"] = bool(row["ratio"] >= 20.0 and row["spearman_vs_exact_where_ch1_dominates"] >= 0.9)
    row["ratio_target_met"] = bool(row["ratio"] >= 20.0)
    for k, v in row.items():
        print(f"{k:>38}: {v:.4g}" if isinstance(v, float) else f"{k:>38}: {v}")
    print(json.dumps({k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in row.items()}))


if __name__ == "__main__":
    main()
