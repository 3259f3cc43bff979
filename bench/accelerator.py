"""Benchmark: the ports against HF torch on one accelerator (or this CPU), same weights, same device.

    python bench/accelerator.py                      # Pythia-160M and Qwen2.5-0.5B shapes, bf16, + the grid (≤ 6 min on a GPU)
    python bench/accelerator.py --sizes tiny --dtype float32 --iters 2 --grid-steps 2   # a CPU check that it runs

Rows: forward logits, one AdamW train step (forward, backward, update; ours: whole-step jit with donation; torch:
autocast + fused AdamW where the device has it), greedy KV-cached generation of 64 × (32 + 128) tokens, each at
both shapes, plus the theory sweep (4,096 configurations × 200 steps, one ``jit(vmap)`` against a Python loop of
jitted single runs over the first 64 configurations, scaled) and the run grid (``bench/grid.py``: 16 Biography CPT
members of the ``small`` preset for ``--grid-steps`` steps in one program against 16 lone runs; 0 skips it).
Sizes: ``160m`` (Pythia-160M: GPT-NeoX), ``0.5b`` (Qwen2.5-0.5B: Qwen2 with grouped-query attention, tied
embeddings), ``tiny`` (a CPU check). torch uses its ``sdpa`` attention; ours uses the
fused ``jax.nn.dot_product_attention`` path for the calls that need no attention probabilities
(``attention_impl`` of the model config, default ``auto``). The bf16 matmul peak of the device (an 8192³ jnp
matmul; 2048³ on CPU) is measured in the same run and every row reports its share of it. The train-step rows
also carry what every train record of a run carries (``cfka_jax/train/throughput.py``): ``tokens_per_s`` and
``mfu`` against the vendor's dense bf16 peak of the device kind (``peak_source``; measured on CPU; None with
``mfu_reason`` for a kind the table lacks), the FLOPs from the lowered step's cost analysis (``flops_source``).
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from cfka_jax.models.layers import resolve_attention_impl

SIZES = {
    "160m": dict(vocab_size=50304, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                 num_attention_heads=12),
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4),
}
SHAPES = {"160m": ((8, 2048), (32, 512)), "0.5b": ((4, 2048), (16, 512)), "tiny": ((2, 128), (4, 32))}


def _median(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build(size: str, dtype: str, attention_impl: str = "auto"):
    """(torch model on the JAX default device's platform, our port with the same weights)."""
    import torch
    import transformers

    from cfka_jax import models

    torch.manual_seed(0)
    if "num_key_value_heads" in SIZES[size]:  # Qwen2.5-0.5B
        cfg = transformers.Qwen2Config(**SIZES[size], max_position_embeddings=2048, tie_word_embeddings=True,
                                       attn_implementation="sdpa")
        hf = transformers.Qwen2ForCausalLM(cfg).eval()
    else:
        cfg = transformers.GPTNeoXConfig(**SIZES[size], rotary_pct=0.25, max_position_embeddings=2048,
                                         tie_word_embeddings=False, attn_implementation="sdpa")
        hf = transformers.GPTNeoXForCausalLM(cfg).eval()
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        ours = models.from_pretrained(d, dtype=jnp.bfloat16 if dtype == "bfloat16" else jnp.float32,
                                      attention_impl=attention_impl)
    device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
    return hf.to(device), ours, device


def matmul_peak(dtype) -> float:
    n = 8192 if jax.default_backend() != "cpu" else 2048
    x = jnp.ones((n, n), dtype)
    f = jax.jit(lambda a: a @ a)
    f(x).block_until_ready()
    return 2.0 * n**3 / min(_median(lambda: f(x).block_until_ready(), 1) for _ in range(5)) / 1e9


def flops(cfg: dict, b: int, s: int) -> float:
    """Forward matmul FLOPs of ``b × s`` tokens: q/o and k/v projections (k/v narrower under grouped-query
    attention), the MLP (three matrices when gated: the Qwen2 shape; two for GPT-NeoX), scores and values over the
    full S × S square, the LM head."""
    d, f, v, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    kv = d * cfg.get("num_key_value_heads", cfg["num_attention_heads"]) // cfg["num_attention_heads"]
    mlp = 3 if "num_key_value_heads" in cfg else 2
    return 2.0 * b * s * (layers * (2 * d * d + 2 * d * kv + mlp * d * f + 2 * d * s) + d * v)


def forward_row(hf, ours, device, b, s, iters, autocast) -> tuple[float, float]:
    import torch

    tokens = np.random.default_rng(0).integers(0, hf.config.vocab_size, (b, s))
    graphdef, state = nnx.split(ours)
    fwd = jax.jit(lambda st, t: nnx.merge(graphdef, st)(t).logits)
    tj = jnp.asarray(tokens, jnp.int32)
    fwd(state, tj).block_until_ready()
    tt = torch.tensor(tokens, device=device)
    with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        hf(tt)
        t_torch = _median(lambda: (hf(tt).logits, _sync(device)), iters)
    return _median(lambda: fwd(state, tj).block_until_ready(), iters), t_torch


def _sync(device):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def train_row(hf, ours, device, b, s, iters, autocast) -> tuple[float, float]:
    import torch

    from cfka_jax.train import throughput as tp
    from cfka_jax.train.step import init_state, make_train_step

    tokens = np.random.default_rng(1).integers(0, hf.config.vocab_size, (b, s))
    graphdef, params, rest = nnx.split(ours, nnx.Param, ...)
    params = jax.tree.map(jnp.copy, params)  # the step donates its state; the model keeps its weights
    tx = optax.adamw(1e-4, weight_decay=0.1)
    step = make_train_step(graphdef, rest, tx)
    carry = [init_state(params, tx)]
    batch = {"tokens": jnp.asarray(tokens, jnp.int32), "target_mask": jnp.ones((b, s), jnp.float32)}
    count = tp.step_flops(step, carry[0], batch)  # before the first call donates the state

    def ours_step():
        carry[0], m = step(carry[0], batch)
        m["loss"].block_until_ready()

    ours_step()
    hf.train()
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-4, weight_decay=0.1, fused=device == "cuda")
    tt = torch.tensor(tokens, device=device)

    def torch_step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = hf(tt, labels=tt).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)

    torch_step()
    out = _median(ours_step, iters), _median(torch_step, iters)
    hf.eval()
    return (*out, train_throughput(count, batch, out[0]))


def train_throughput(count, batch, seconds: float) -> dict:
    """The fields every train record of a run carries (``train/throughput.py``): tokens/s and MFU of one step of
    ``seconds`` against the vendor's peak (measured on CPU), with where the FLOP count and the peak came from."""
    from cfka_jax.train import throughput as tp

    flops, source = count
    peak = tp.device_peak()
    return dict(tokens_per_s=tp.batch_tokens(batch) / seconds, flops_per_step=flops, flops_source=source,
                peak_flops=peak.flops, peak_source=peak.source, **tp.utilisation(flops, source, seconds, peak))


def generate_row(hf, ours, device, iters, small: bool) -> tuple[float, float]:
    import torch

    from cfka_jax.models import generate as gen

    b, p, n = (4, 8, 16) if small else (64, 32, 128)
    prompts = np.random.default_rng(2).integers(0, hf.config.vocab_size, (b, p)).astype(np.int32)
    cfg = gen.SamplerConfig(max_new_tokens=n, temperature=0.0)
    ours_fn = lambda: gen.generate(ours, prompts, None, jax.random.key(0), cfg).tokens.block_until_ready()  # noqa
    ours_fn()
    tt = torch.tensor(prompts, dtype=torch.long, device=device)

    def theirs():
        with torch.inference_mode():
            hf.generate(tt, attention_mask=torch.ones_like(tt), max_new_tokens=n, min_new_tokens=n,
                        do_sample=False, eos_token_id=None, pad_token_id=0)
        _sync(device)

    theirs()
    return _median(ours_fn, iters), _median(theirs, iters)


def sweep_row(small: bool) -> tuple[float, float]:
    from cfka_jax.theory.rate_sweep import make_grid, run_one_jit, sweep_jit
    from cfka_jax.theory.train import SGDConfig
    from cfka_jax.theory.world import WorldConfig, make_world

    world = make_world(WorldConfig())
    configs = 64 if small else 4096
    grid = make_grid(seeds=range(configs // 2), eta_ys=[0.5, 1.0], eta_zs=[0.02])
    cfg = SGDConfig(steps=200, batch_size=16, log_every=200)
    jax.block_until_ready(sweep_jit(world, grid, cfg=cfg))
    t_vec = _median(lambda: jax.block_until_ready(sweep_jit(world, grid, cfg=cfg)), 3)
    loop_n = min(64, configs)
    jax.block_until_ready(run_one_jit(world, grid.seed[0], grid.eta_y[0], grid.eta_z[0], cfg=cfg))
    t0 = time.perf_counter()
    for i in range(loop_n):
        jax.block_until_ready(run_one_jit(world, grid.seed[i], grid.eta_y[i], grid.eta_z[i], cfg=cfg))
    return t_vec, (time.perf_counter() - t0) * configs / loop_n


def grid_row(steps: int) -> dict:
    """``bench/grid.py``'s comparison at the ``small`` preset: 16 members in one program vs 16 lone runs."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    import grid as gb  # noqa: E402  (bench/grid.py)

    from cfka_jax.runs import grid as grid_run
    from cfka_jax.runs.grid_spec import GridSpec, parse_grid
    from cfka_jax.runs.specs import CPTSpec

    spec = GridSpec(CPTSpec(preset="small", method="replay-all + ewc", out="bench-grid-unused", progress=False),
                    parse_grid("lr=1e-3,5e-4,3e-4,2e-4;alpha=0.5,0.8;seeds=0,1"), mode="auto")
    setup = gb._setup(spec, os.path.join(tempfile.gettempdir(), "cfka_bench_grid_data"))
    _, s_wall, _, _, _ = gb._sequential(setup, steps)
    _, g_wall, _, _, _ = gb._grid(setup, steps, grid_run._step_mode(spec))
    return dict(work="grid16", ours_s=g_wall, loop_s=s_wall, ratio=s_wall / g_wall, steps=steps)


def _print(rows: list[dict], size: str) -> None:
    for r in rows:
        shape = f"{r['batch']} × {r['seq']}" if "batch" in r else ""
        share = f"{100 * r['peak_share']:.0f} % of peak" if "peak_share" in r else ""
        if "tokens_per_s" in r:
            mfu = f"MFU {100 * r['mfu']:.1f} %" if r["mfu"] is not None else f"MFU n/a ({r['mfu_reason']})"
            share += f"   {r['tokens_per_s']:,.0f} tokens/s   {mfu} ({r['flops_source'].split(' ')[0]} FLOPs)"
        print(f"{size:>5} {r['work']:>12} {shape:>12} ours {r['ours_s'] * 1e3:9.2f} ms   ratio {r['ratio']:6.2f}x   "
              f"{share}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["160m", "0.5b"])
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--grid-steps", type=int, default=10, help="steps per member of the grid row (0: skip it)")
    ap.add_argument("--attention-impl", choices=["auto", "explicit", "fused"], default="auto",
                    help="our attention kernel (auto: fused on GPU/TPU, explicit on CPU)")
    a = ap.parse_args()
    autocast = a.dtype == "bfloat16"
    peak = matmul_peak(jnp.bfloat16 if autocast else jnp.float32)
    rows, small = [], a.sizes == ["tiny"]
    print(f"device {jax.devices()[0].device_kind}, {a.dtype}, matmul peak {peak:.0f} GFLOP/s")
    for size in a.sizes:
        hf, ours, device = build(size, a.dtype, a.attention_impl)
        mine = []
        for b, s in SHAPES[size]:
            for name, fn, mult in (("forward", forward_row, 1), ("train_step", train_row, 3)):
                t_ours, t_torch, *extra = fn(hf, ours, device, b, s, a.iters, autocast)
                mine.append(dict(size=size, work=name, batch=b, seq=s, ours_s=t_ours, torch_s=t_torch,
                                 ratio=t_torch / t_ours, peak_share=mult * flops(SIZES[size], b, s) / t_ours / 1e9 / peak,
                                 **(extra or [{}])[0]))
        t_ours, t_torch = generate_row(hf, ours, device, a.iters, small)
        mine.append(dict(size=size, work="generate", ours_s=t_ours, torch_s=t_torch, ratio=t_torch / t_ours))
        _print(mine, size)
        rows += mine
        del hf, ours
    t_vec, t_loop = sweep_row(small)
    rows.append(dict(work="theory_sweep", ours_s=t_vec, loop_s=t_loop, ratio=t_loop / t_vec))
    if a.grid_steps > 0:
        rows.append(grid_row(a.grid_steps))
    _print(rows[-2:] if a.grid_steps > 0 else rows[-1:], "")
    print(json.dumps({"bench": "accelerator", "device": jax.devices()[0].device_kind, "jax": jax.__version__,
                      "sizes": a.sizes, "dtype": a.dtype, "peak_gflops": peak,
                      "attention_impl": resolve_attention_impl(a.attention_impl), "rows": rows}))


if __name__ == "__main__":
    main()
