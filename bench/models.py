"""Benchmark: the Flax NNX model ports against HF torch (eager mode) on this CPU, same config and batch.

    python bench/models.py forward   [--family pythia|qwen|llama] [--batch 8] [--seq 128]
    python bench/models.py train     [--family pythia|qwen|llama] [--batch 8] [--seq 128] [--loss-chunk ROWS]
    python bench/models.py generate  [--family pythia|qwen|llama] [--batch 8] [--prompt 32] [--new 64]
    python bench/models.py profile   [--family pythia|qwen|llama]   (why the JAX train step is slow on CPU)
    python bench/models.py decode-profile [--family ...] [--batch 8] [--prompt 32] [--new 64]
                                     (where our decode step's time goes, by kind of XLA:CPU thunk)
    python bench/models.py generate  --shape qwen2.5-0.5b [--sample]   (a real model's shape)
    python bench/models.py rows      [--families olmo olmo2 qwen3_5] [--batch 2] [--seq 64] [--prompt 16] [--new 16]
                                     (forward, train step and generate of each family, one table, one run)

Model: a random-init ~17M-parameter fp32 model built from the same HF config on both sides: the registry's
from-scratch config of the family (``--family``: any registered one) with 6 layers, D = 384, 6 heads (2 KV heads
where the family has grouped-query attention: Qwen2, Llama, OLMo-2, Qwen3.5), F = 1536, V = 8192, untied head.
Qwen3.5's from-scratch config has HF's layer pattern (layers 0-2 and 4-5 Gated DeltaNet, layer 3 full attention)
with 6 value / 2 key heads of width 64 in the linear layers; HF torch runs its reference (pure torch) delta rule
and convolution, as it does on any CPU without the ``flash-linear-attention`` / ``causal-conv1d`` kernels.
The JAX weights are converted from the torch model, so both compute the same function.

* forward: logits of ``[B, S]`` tokens; JAX ``jax.jit`` over split state vs torch ``inference_mode``.
* train: one AdamW step (forward, backward, update) on the next-token loss; JAX whole-step jit with donated
  params/optimizer state vs torch ``loss.backward(); opt.step()``. ``--loss-chunk ROWS``: the JAX side computes
  the same mean NLL with the library's chunked, vocabulary-tiled head loss (``train/losses.head_nll_sum``: one
  ``custom_vjp``, no ``B x S x V`` log-softmax in memory) instead of a log-softmax of the full logits.
* generate: greedy KV-cached decoding of ``--new`` tokens for ``B`` prompts; ours (one jitted decode loop) vs HF
  ``generate(do_sample=False)`` (min_new_tokens = max_new_tokens, no EOS); ``--sample``: the replay builders'
  sampler (T = 1, repetition penalty 1.05) on both sides. Each side is also timed with one new token (the prefill
  and its head, no decode step), which splits a call into prefill + (new - 1) decode steps: the per-step ms printed.

``--shape qwen2.5-0.5b`` (any of ``bench/memory.SHAPES``) replaces the benchmark model by a random-init fp32 model of
that real shape (the replay-generation table of docs/models_bench.md).

Achieved GFLOP/s use the analytic matmul FLOPs (2 per multiply-add: projections, attention scores and values
over the full S x S square as both implementations compute it, LM head; x3 for a training step) and are compared
with the machine's fp32 matmul peak measured here (best of a 2048^3 ``jnp`` and ``numpy`` matmul). Timings are
medians over ``--iters`` runs after compilation/warm-up (compilation is reported separately). torch uses
``torch.get_num_threads()`` threads; XLA uses all cores unless ``--threads 1`` (then both, and the matmul peak,
run single-threaded; on a machine shared with other jobs this is the stable setting: with 2 threads on 2 busy
cores torch's OpenMP workers stall, HF generate slowed ~20x in our runs). Prints a table and ends with one JSON
line of figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time


def _threads_from_argv() -> int | None:
    """``--threads N`` must act before numpy/jax/torch start their thread pools, so it is read here."""
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    return None


THREADS = _threads_from_argv()
if THREADS is not None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(THREADS)
    if THREADS == 1:
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
if "decode-profile" in sys.argv:  # XLA:CPU names each executed thunk in the profiler trace only with this flag
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true"

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfka_jax import models
from cfka_jax.models import family
from cfka_jax.models import generate as gen
from cfka_jax.models.family import ModelSize


BENCH_SIZE = ModelSize(hidden=384, layers=6, heads=6, kv_heads=2, intermediate=1536)


def hf_config(name: str):
    """(HF config, torch model factory) of the benchmark model of family ``name``, asked of the registry: the
    family's from-scratch config of :data:`BENCH_SIZE` (V = 8192, 512 positions, untied head) as ``config.json``
    writes it, read by ``transformers.AutoConfig``."""
    import transformers

    cfg = family.get(name).from_size(BENCH_SIZE, vocab_size=8192, max_position_embeddings=512,
                                     tie_word_embeddings=False)
    return transformers.AutoConfig.for_model(**cfg.to_hf_config()), transformers.AutoModelForCausalLM.from_config


def build(name: str, shape: str | None = None):
    """(torch model, NNX model) with identical weights: the family's benchmark size, or with ``shape`` a real
    model's (``bench/memory.SHAPES``, random init, fp32)."""
    import torch

    torch.manual_seed(0)
    if shape is not None:
        import transformers

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from memory import SHAPES

        fields = {k: v for k, v in SHAPES[shape].items() if k != "architectures"}
        config = transformers.AutoConfig.for_model(**fields)
        make = transformers.AutoModelForCausalLM.from_config
    else:
        config, make = hf_config(name)
    hf = make(config).eval()
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        model = models.from_pretrained(d)
    return hf, model


def hybrid_flops(cfg, batch: int, seq: int) -> float:
    """Qwen3.5's forward matmul FLOPs (2 per multiply-add): full layers' gated q_proj (N·2H), k/v, o_proj and the
    S × S attention square; linear layers' in_proj_qkv (C), z (UW), a and b (U each), out_proj, and the delta rule
    as the recurrence costs it (k·S, the write, q·S: 3 UYW per token); the SwiGLU MLPs and the head."""
    d, f, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    n, k, h = cfg.num_attention_heads, cfg.kv_heads, cfg.head_size
    u, y, w = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    full = d * (2 * n * h + 2 * k * h) + n * h * d + 2 * n * h * seq
    linear = d * (cfg.conv_channels + u * w + 2 * u) + u * w * d + 3 * u * y * w
    per_token = len(cfg.full_layers) * full + len(cfg.linear_layers) * linear + cfg.num_hidden_layers * 3 * d * f + d * v
    return 2.0 * batch * seq * per_token


def matmul_flops(cfg, batch: int, seq: int) -> float:
    """Forward matmul FLOPs for ``[batch, seq]`` tokens (2 per multiply-add)."""
    if models.family.of(cfg).name == "qwen3_5":
        return hybrid_flops(cfg, batch, seq)
    d, f, v, layers = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    n, h = cfg.num_attention_heads, d // cfg.num_attention_heads
    t = models.family.of(cfg).traits(cfg)
    kv = t.kv_heads
    mlp_mats = 2 if t.mlp == "two_layer" else 3  # GELU MLP vs SwiGLU
    per_token = layers * (d * (n + 2 * kv) * h + n * h * d + mlp_mats * d * f) + d * v
    attention = layers * 2 * n * h * seq  # scores + values, full square
    return 2.0 * batch * seq * (per_token + attention)


def timed(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_pair(fn_a, fn_b, iters: int) -> tuple[float, float]:
    """Medians of ``fn_a`` and ``fn_b`` timed alternately, so both see the same background load."""
    ta, tb = [], []
    for _ in range(iters):
        ta.append(timed(fn_a, 1))
        tb.append(timed(fn_b, 1))
    return statistics.median(ta), statistics.median(tb)


def matmul_peak(n: int = 2048) -> tuple[float, float]:
    """GFLOP/s of one ``n^3`` fp32 matmul, best of 7 (a peak; background load only lowers it): (jnp, numpy)."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    f = jax.jit(lambda x, y: x @ y)
    x = jnp.asarray(a)
    f(x, x).block_until_ready()
    t_jax = min(timed(lambda: f(x, x).block_until_ready(), 1) for _ in range(7))
    a @ a
    t_np = min(timed(lambda: a @ a, 1) for _ in range(7))
    return 2.0 * n**3 / t_jax / 1e9, 2.0 * n**3 / t_np / 1e9


# ---------------------------------------------------------------------------------------------------- forward


def bench_forward(hf, model, args) -> dict:
    import torch

    tokens = np.random.default_rng(0).integers(0, hf.config.vocab_size, (args.batch, args.seq))
    graphdef, state = nnx.split(model)
    fwd = jax.jit(lambda state, t: nnx.merge(graphdef, state)(t).logits)
    tj = jnp.asarray(tokens, jnp.int32)
    start = time.perf_counter()
    fwd(state, tj).block_until_ready()
    compile_s = time.perf_counter() - start
    tt = torch.tensor(tokens)
    with torch.inference_mode():
        hf(tt)
        t_jax, t_torch = timed_pair(lambda: fwd(state, tj).block_until_ready(), lambda: hf(tt).logits, args.iters)
        diff = float(np.abs(hf(tt).logits.numpy() - np.asarray(fwd(state, tj))).max())
    return dict(t_jax=t_jax, t_torch=t_torch, compile_s=compile_s, flops=matmul_flops(model.cfg, *tokens.shape),
                max_abs_logit_diff=diff)


# ------------------------------------------------------------------------------------------------------ train


def _nll(logits, tokens):
    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))


def bench_train(hf, model, args) -> dict:
    import torch

    tokens = np.random.default_rng(1).integers(0, hf.config.vocab_size, (args.batch, args.seq))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = optax.adamw(1e-4, weight_decay=0.1)

    if args.loss_chunk:  # the library's chunked, vocabulary-tiled NLL (train/step.chunked_token_nll_loss)
        from cfka_jax.train.step import chunked_token_nll_loss, lm_loss

        chunked = chunked_token_nll_loss(args.loss_chunk)

        def objective(p, tokens):
            data = {"tokens": tokens, "target_mask": jnp.ones(tokens.shape, jnp.float32)}
            return lm_loss(p, graphdef, rest, data, chunked)[0]
    else:
        def objective(p, tokens):
            return _nll(nnx.merge(graphdef, p, rest)(tokens).logits, tokens)

    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(objective)(params, tokens)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    step = jax.jit(step, donate_argnums=(0, 1))
    carry = [params, tx.init(params)]
    tj = jnp.asarray(tokens, jnp.int32)

    def run():
        carry[0], carry[1], loss = step(carry[0], carry[1], tj)
        loss.block_until_ready()

    start = time.perf_counter()
    run()
    compile_s = time.perf_counter() - start
    hf.train()
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-4, weight_decay=0.1)
    tt = torch.tensor(tokens)

    def run_torch():
        loss = hf(tt, labels=tt).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run_torch()
    t_jax, t_torch = timed_pair(run, run_torch, args.iters)
    hf.eval()
    return dict(t_jax=t_jax, t_torch=t_torch, compile_s=compile_s,
                flops=3 * matmul_flops(model.cfg, *tokens.shape))


# --------------------------------------------------------------------------------------------------- generate


def bench_generate(hf, model, args) -> dict:
    import torch

    prompts = np.random.default_rng(2).integers(0, hf.config.vocab_size, (args.batch, args.prompt)).astype(np.int32)
    cfg = gen.SamplerConfig(max_new_tokens=args.new, temperature=1.0 if args.sample else 0.0,
                            repetition_penalty=1.05 if args.sample else 1.0)
    key = jax.random.key(0)

    def ours(new=args.new):
        c = dataclasses.replace(cfg, max_new_tokens=new)
        return gen.generate(model, prompts, None, key, c).tokens.block_until_ready()

    start = time.perf_counter()
    first = np.asarray(ours())
    compile_s = time.perf_counter() - start
    tt = torch.tensor(prompts, dtype=torch.long)

    def theirs(new=args.new):
        with torch.inference_mode():
            sampling = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.05) \
                if args.sample else dict(do_sample=False)
            return hf.generate(tt, attention_mask=torch.ones_like(tt), max_new_tokens=new,
                               min_new_tokens=new, eos_token_id=None, pad_token_id=0, **sampling)

    ref = theirs()[:, args.prompt:].numpy()
    t_jax, t_torch = timed_pair(ours, theirs, args.iters)
    out = dict(t_jax=t_jax, t_torch=t_torch, compile_s=compile_s, tokens_equal=bool((ref == first).all()),
               rows_equal=int((ref == first).all(axis=1).sum()))
    if args.new > 1:  # the prefill alone (one new token, no decode step), then the decode steps' share
        ours(1), theirs(1)
        p_jax, p_torch = timed_pair(lambda: ours(1), lambda: theirs(1), args.iters)
        out.update(prefill_ms_jax=p_jax * 1e3, prefill_ms_torch=p_torch * 1e3,
                   step_ms_jax=(t_jax - p_jax) / (args.new - 1) * 1e3,
                   step_ms_torch=(t_torch - p_torch) / (args.new - 1) * 1e3)
    return out


# --------------------------------------------------------------------------------------------- decode profile


def _thunk_kind(name: str, hlo: str) -> str:
    """A coarse kind for an XLA:CPU thunk of the compiled program ``hlo``: a library matmul (a YNNPACK/XNNPACK
    fusion around a dot), a library reduction (such a fusion without one), an XLA ``dot`` (the batched attention
    contractions), a scatter (KV-cache writes) or another fusion (elementwise, reductions, RoPE, norms)."""
    import re

    m = re.search(r"^\s*%" + re.escape(name) + r" = .*$", hlo, re.MULTILINE)
    line = m.group(0) if m else ""
    if re.search(r" dot\(", line):
        return "dot (attention over the cache)"
    if '"kind":"__ynn_fusion"' in line or '"kind":"__xnn_fusion"' in line:
        called = re.search(r"calls=%([\w.\-]+)", line)
        body = called and re.search(r"^%" + re.escape(called.group(1)) + r" .*?\n\}", hlo, re.MULTILINE | re.DOTALL)
        return "matmul (library fusion)" if body and " dot(" in body.group(0) else "reduction (library fusion)"
    if "scatter" in name:
        return "scatter (cache write)"
    return "other fusions (norms, RoPE, softmax, activations, sampling)"


def decode_profile(hf, model, args) -> dict:
    """Where our decode step's time goes: one greedy ``generate`` call is traced (``jax.profiler``; XLA:CPU names
    each thunk it runs), the thunks run once per decode step are grouped by :func:`_thunk_kind`, and each kind's
    share of a step is the sum over its thunks of (median duration x calls) / (new - 1). Medians, because on a
    shared machine single thunks are stretched by preemption; durations are wall-clock inside the trace. The
    largest thunks of a step are listed with their output shapes."""
    import collections
    import glob
    import gzip
    import re

    del hf
    prompts = np.random.default_rng(2).integers(0, model.cfg.vocab_size, (args.batch, args.prompt)).astype(np.int32)
    cfg = gen.SamplerConfig(max_new_tokens=args.new, temperature=0.0)
    key = jax.random.key(0)
    graphdef, state = nnx.split(model)
    keys = jax.random.split(key, args.batch)
    hlo = gen._compiled(graphdef, cfg).lower(state, jnp.asarray(prompts), jnp.full((args.batch,), args.prompt,
                                                                               jnp.int32), keys).compile().as_text()
    def run():
        gen.generate(model, prompts, None, key, cfg).tokens.block_until_ready()

    run(), run()
    steps = args.new - 1
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            run()
        (path,) = glob.glob(f"{d}/**/perfetto_trace.json.gz", recursive=True)
        with gzip.open(path) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    durations = collections.defaultdict(list)
    for e in events:
        name = e.get("name", "")
        if e.get("ph") == "X" and not name.startswith(("$", "end:")) and "Execute" not in name:
            durations[name].append(e.get("dur", 0.0))
    chunks = len(gen.feed_chunks(steps))
    per_step = {n: statistics.median(ds) * len(ds) / steps for n, ds in durations.items()
                if len(ds) >= steps // max(chunks, 1) // 2 and len(ds) <= steps + 1}
    kinds = collections.Counter()
    for n, us in per_step.items():
        kinds[_thunk_kind(n, hlo)] += us
    total = sum(kinds.values())
    print(f"decode step of {args.batch} rows, prompt {args.prompt} + {args.new} new: {total / 1e3:.2f} ms "
          f"(sum over the thunks run once per step; load avg {os.getloadavg()[0]:.1f})")
    for kind, us in kinds.most_common():
        print(f"  {us / 1e3:7.2f} ms {100 * us / total:5.1f}%  {kind}")
    print("largest thunks per step:")
    for n, us in sorted(per_step.items(), key=lambda kv: -kv[1])[:12]:
        shape = re.search(r"%" + re.escape(n) + r" = (\S+)", hlo)
        print(f"  {us:8.1f} us  {n:<28}{shape.group(1) if shape else ''}")
    return {"step_ms": total / 1e3, "kinds_ms": {k: v / 1e3 for k, v in kinds.items()}}


# ---------------------------------------------------------------------------------------------------- profile


def _train_step_time(model, tokens, iters: int) -> float:
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = optax.adamw(1e-4, weight_decay=0.1)

    def step(p, s):
        loss, g = jax.value_and_grad(lambda p: _nll(nnx.merge(graphdef, p, rest)(tokens).logits, tokens))(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    f = jax.jit(step, donate_argnums=(0, 1))
    carry = [jax.tree.map(jnp.copy, params), tx.init(params)]

    def run():
        carry[0], carry[1], loss = f(carry[0], carry[1])
        loss.block_until_ready()

    run()
    return timed(run, iters)


def profile(hf, model, args) -> dict:
    """Where the JAX train step loses: a ``[B, S, D] @ [D, F]`` projection's kernel gradient contracts two axes
    (B and S), which XLA:CPU runs far slower than the same matmul on ``[B*S, D]``. Times one GELU MLP's gradient
    both ways and the whole train step with ``nnx.Linear`` patched (in this process only) to flatten its input."""
    r = np.random.default_rng(0)
    d, f = model.cfg.hidden_size, model.cfg.intermediate_size
    x2 = jnp.asarray(r.standard_normal((args.batch * args.seq, d)), jnp.float32)
    w1 = jnp.asarray(r.standard_normal((d, f)) * 0.05, jnp.float32)
    w2 = jnp.asarray(r.standard_normal((f, d)) * 0.05, jnp.float32)
    out = {}
    for name, x in (("mlp_grad_2d_s", x2), ("mlp_grad_3d_s", x2.reshape(args.batch, args.seq, d))):
        g = jax.jit(jax.grad(lambda a, b, x=x: jnp.sum(jax.nn.gelu(x @ a, approximate=False) @ b), argnums=(0, 1)))
        jax.block_until_ready(g(w1, w2))
        out[name] = timed(lambda g=g: jax.block_until_ready(g(w1, w2)), args.iters)
    tokens = jnp.asarray(r.integers(0, model.cfg.vocab_size, (args.batch, args.seq)), jnp.int32)
    out["train_step_s"] = _train_step_time(model, tokens, args.iters)
    original = nnx.Linear.__call__

    def flat_call(self, x):
        y = original(self, x.reshape(-1, x.shape[-1]))
        return y.reshape(*x.shape[:-1], y.shape[-1])

    nnx.Linear.__call__ = flat_call
    try:
        out["train_step_2d_linear_s"] = _train_step_time(model, tokens, args.iters)
    finally:
        nnx.Linear.__call__ = original
    for k, v in out.items():
        print(f"{k:<26}{v * 1e3:9.1f} ms")
    return out


# ------------------------------------------------------------------------------------------------------- rows


def rows(args) -> list[dict]:
    """Forward, train step and greedy generate of each of ``args.families`` against HF torch at the benchmark size,
    in one process (each pair timed alternately); prints one table of tokens/s and ratios."""
    out = []
    for name in args.families:
        hf, model = build(name)
        # train last: its step donates the model's parameter buffers
        for what, fn in (("forward", bench_forward), ("generate", bench_generate), ("train", bench_train)):
            r = fn(hf, model, args)
            tokens = args.batch * (args.new if what == "generate" else args.seq)
            row = dict(family=name, what=what, tokens_per_s_jax=tokens / r["t_jax"],
                       tokens_per_s_torch=tokens / r["t_torch"], ratio=r["t_torch"] / r["t_jax"],
                       t_jax_s=r["t_jax"], t_torch_s=r["t_torch"], compile_s=r["compile_s"],
                       **{k: r[k] for k in ("max_abs_logit_diff", "tokens_equal") if k in r})
            out.append(row)
            print(f"{name:<9}{what:<9}{row['tokens_per_s_jax']:>12.0f}{row['tokens_per_s_torch']:>12.0f}"
                  f"{row['ratio']:>8.2f}x  compile {r['compile_s']:.1f} s"
                  + "".join(f"  {k} {r[k]}" for k in ("max_abs_logit_diff", "tokens_equal") if k in r), flush=True)
    return out


# ------------------------------------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["forward", "train", "generate", "decode-profile", "profile", "rows"])
    ap.add_argument("--family", choices=family.names(), default="pythia")
    ap.add_argument("--families", nargs="+", choices=family.names(), default=["olmo", "olmo2", "qwen3_5"],
                    help="rows: the families benchmarked in one run")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--loss-chunk", type=int, default=None,
                    help="train: the JAX step's loss is the library's chunked, vocabulary-tiled NLL with this many rows "
                         "per chunk (the same mean NLL; default: log-softmax of the full logits, as HF computes it)")
    ap.add_argument("--shape", default=None, help="a real model shape of bench/memory.SHAPES (random init, fp32) "
                    "instead of the family's benchmark size (--family is then the shape's)")
    ap.add_argument("--sample", action="store_true",
                    help="generate: the replay sampler (T = 1, repetition penalty 1.05) on both sides, not greedy "
                         "(tokens then differ: different random streams)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for torch, BLAS and XLA (1: single-threaded Eigen); default: all cores")
    args = ap.parse_args()
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)

    if args.what == "rows":
        print(f"rows: batch {args.batch}, seq {args.seq}, prompt {args.prompt} + {args.new} new; {os.cpu_count()} "
              f"cores, torch threads {torch.get_num_threads()}, load avg {os.getloadavg()[0]:.1f}")
        print(f"{'family':<9}{'what':<9}{'jax tok/s':>12}{'torch tok/s':>12}{'ratio':>9} (jax / torch tokens/s)")
        table = rows(args)
        print(json.dumps({"bench": "models_rows", **vars(args), "rows": table, "load_avg_1m": os.getloadavg()[0]}))
        return
    hf, model = build(args.family, args.shape)
    if args.what == "decode-profile":
        row = decode_profile(hf, model, args)
        print(json.dumps({"bench": "models_decode_profile", **vars(args), **row, "load_avg_1m": os.getloadavg()[0]}))
        return
    if args.what == "profile":
        row = profile(hf, model, args)
        print(json.dumps({"bench": "models_profile", **vars(args), **row, "load_avg_1m": os.getloadavg()[0]}))
        return
    n_params = sum(p.numel() for p in hf.parameters())
    peak_jnp, peak_np = matmul_peak()
    peak = max(peak_jnp, peak_np)
    r = {"forward": bench_forward, "train": bench_train, "generate": bench_generate}[args.what](hf, model, args)
    tokens = args.batch * (args.new if args.what == "generate" else args.seq)
    tps_jax, tps_torch = tokens / r["t_jax"], tokens / r["t_torch"]
    load = os.getloadavg()[0]
    print(f"{args.what}: {args.family} {n_params / 1e6:.1f}M params fp32, batch {args.batch}, "
          + (f"prompt {args.prompt} + {args.new} new" if args.what == "generate" else f"seq {args.seq}")
          + f"; {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, load avg {load:.1f}")
    print(f"{'impl':<12}{'time/call':>12}{'tokens/s':>12}{'GFLOP/s':>10}{'% peak':>8}")
    row = {"n_params": n_params, "peak_gflops": peak, "peak_gflops_jnp": peak_jnp, "peak_gflops_numpy": peak_np, "load_avg_1m": load, **vars(args)}
    for name, t, tps in (("jax/nnx", r["t_jax"], tps_jax), ("torch (HF)", r["t_torch"], tps_torch)):
        gf = r["flops"] / t / 1e9 if "flops" in r else float("nan")
        print(f"{name:<12}{t * 1e3:>10.1f}ms{tps:>12.0f}{gf:>10.1f}{100 * gf / peak:>7.1f}%")
    print(f"ratio jax/torch tokens/s: {tps_jax / tps_torch:.2f}x; fp32 2048^3 matmul: jnp {peak_jnp:.1f}, "
          f"numpy {peak_np:.1f} GFLOP/s (peak = the larger); "
          f"jax compile {r['compile_s']:.1f} s")
    extras = {k: v for k, v in r.items() if k not in ("t_jax", "t_torch")}
    if "flops" in r:
        extras["gflops_jax"] = r["flops"] / r["t_jax"] / 1e9
        extras["gflops_torch"] = r["flops"] / r["t_torch"] / 1e9
        extras["frac_peak_jax"] = extras["gflops_jax"] / peak
    for k in ("tokens_equal", "rows_equal", "max_abs_logit_diff"):
        if k in r:
            print(f"{k}: {r[k]}")
    if "step_ms_jax" in r:
        print(f"prefill (1 new token): jax {r['prefill_ms_jax']:.1f} ms, torch {r['prefill_ms_torch']:.1f} ms; "
              f"per decode step ((call - prefill) / (new - 1)): jax {r['step_ms_jax']:.2f} ms, "
              f"torch {r['step_ms_torch']:.2f} ms")
    row.update(extras, bench=f"models_{args.what}", tokens_per_s_jax=tps_jax, tokens_per_s_torch=tps_torch,
               ratio=tps_jax / tps_torch, t_jax_s=r["t_jax"], t_torch_s=r["t_torch"])
    print(json.dumps(row))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
