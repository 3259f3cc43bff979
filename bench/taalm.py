"""Benchmark: one TAALM meta-step against one plain token-weighted train step on the same model and batch, and
the meta-step's memory with and without remat.

    python bench/taalm.py [--hidden 64 --layers 3 --vocab 1901 --seq-len 96 --probe-len 32 --pairs 16]
                          [--pair-chunk 4] [--iters 10] [--threads N]

θ (a Qwen2-architecture port with LoRA r 16 on every linear layer, the small preset's size by default) and φ (the
same size, LoRA + scalar head) are randomly initialised; the costs do not depend on the weights. The plain step is
``train.step.make_train_step`` with ``taalm.twppl.twppl_loss`` on the P evidence documents D (batch P × S); the
meta-step is ``taalm.meta.make_meta_step`` on the P pairs (D, T_D), ``adamw2_ref`` (1 detached + 1 differentiated
inner AdamW step, L_solve on T_D, the outer AdamW on φ); LoRA dropout is off in both (the shared step has no
dropout keys). Times are the fastest of ``--iters`` calls after a warm-up call (compile excluded; the minimum
because the project machine is shared). Memory is XLA's compiled estimate (arguments + outputs + temporaries) of
the meta-step with and without ``remat``, and with one pair per scan step (``pair_chunk`` 1, the knob that does
scale memory); on a GPU the measured device peak is reported too. The script runs unchanged
on CPU and GPU and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

if "--threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _n

import flax.nnx as nnx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from cfka_jax.continual.ckl_setup import ModelSize, build_lm, meta_setup  # noqa: E402
from cfka_jax.continual.peft import LoRAConfig, apply_lora  # noqa: E402
from cfka_jax.continual.taalm import MetaConfig, PhiConfig, make_meta_step  # noqa: E402
from cfka_jax.continual.taalm.meta import init_meta_state  # noqa: E402
from cfka_jax.continual.taalm.twppl import twppl_loss  # noqa: E402
from cfka_jax.train.step import Loss, init_state, make_train_step  # noqa: E402


def _batch(key, p: int, s: int, vocab: int, obj: bool) -> dict:
    tokens = jax.random.randint(key, (p, s), 1, vocab).at[:, 0].set(0)
    target = jnp.ones((p, s), jnp.float32).at[:, 0].set(0.0)
    out = {"tokens": tokens, "attention_mask": jnp.ones((p, s), jnp.int32),
           "positions": jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (p, s)), "target_mask": target}
    if obj:
        out["object_mask"] = jnp.zeros((p, s), jnp.float32).at[:, -3:].set(1.0)
    return out


def _best_time(fn, state, iters: int):
    """The fastest of ``iters`` calls after a warm-up call: on a shared machine the minimum is the least
    contended measurement of the same work."""
    state, m = fn(state)
    jax.block_until_ready(m)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        state, m = fn(state)
        jax.block_until_ready(m)
        times.append(time.perf_counter() - t)
    return float(np.min(times))


def _memory(compiled) -> int | None:
    mem = compiled.memory_analysis()
    if mem is None:
        return None
    return int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes)


def plain_step(model, lora_cfg: LoRAConfig, d: dict, iters: int) -> float:
    """The plain token-weighted step over θ's LoRA parameters (θ0 as ``meta_setup`` builds it; frozen base in
    ``rest``)."""
    theta = apply_lora(nnx.clone(model), lora_cfg, rngs=nnx.Rngs(0))
    graphdef, lora, rest = nnx.split(theta, nnx.LoRAParam, ...)
    tx = optax.adamw(1e-4, eps=1e-8, weight_decay=0.01)
    step = make_train_step(graphdef, rest, tx, loss=Loss(loss_fn=twppl_loss))
    batch = dict(d, token_weights=jnp.full(d["tokens"].shape, 0.9, jnp.float32))
    return _best_time(lambda s: step(s, batch), init_state(lora, tx), iters)


def meta_step(setup, pairs: dict, cfg: MetaConfig, iters: int) -> tuple[float, int | None, float | None]:
    step = make_meta_step(setup.fns, cfg)
    state = init_meta_state(jax.tree.map(jnp.copy, setup.phi_train))  # the step donates its state
    key = jax.random.key(0)
    mem = _memory(step.lower(state, setup.ops, pairs, key).compile())
    seconds = _best_time(lambda s: step(s, setup.ops, pairs, key), state, iters)
    stats = jax.devices()[0].memory_stats() or {}
    return seconds, mem, stats.get("peak_bytes_in_use")


def compiled_memory(setup, pairs: dict, cfg: MetaConfig) -> int | None:
    step = make_meta_step(setup.fns, cfg)
    return _memory(step.lower(init_meta_state(setup.phi_train), setup.ops, pairs, jax.random.key(0)).compile())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/taalm.py", description=__doc__.splitlines()[0])
    for name, default in (("hidden", 64), ("layers", 3), ("heads", 4), ("vocab", 1901), ("seq-len", 96),
                          ("probe-len", 32), ("pairs", 16), ("pair-chunk", 4), ("iters", 10), ("rank", 16)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--threads", default=None)
    a = ap.parse_args(argv)
    size = ModelSize(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=max(a.heads // 2, 1),
                     intermediate=3 * a.hidden)
    lora = LoRAConfig(rank=a.rank, alpha=a.rank / 4, dropout=0.0)  # the shared train step has no dropout keys
    model = build_lm(size, a.vocab)
    setup = meta_setup(model, PhiConfig(lora=lora), lora)
    k1, k2 = jax.random.split(jax.random.key(1))
    d = _batch(k1, a.pairs, a.seq_len, a.vocab, obj=True)
    pairs = {"d": d, "t": _batch(k2, a.pairs, a.probe_len, a.vocab, obj=True)}
    t_plain = plain_step(model, lora, d, a.iters)
    base = MetaConfig(pair_chunk=a.pair_chunk, dropout=False)
    t_meta, mem, peak = meta_step(setup, pairs, base, a.iters)
    t_remat, mem_remat, peak_remat = meta_step(setup, pairs, dataclasses.replace(base, remat=True), a.iters)
    mem_seq = compiled_memory(setup, pairs, dataclasses.replace(base, pair_chunk=1))
    res = {"device": jax.devices()[0].platform, "hidden": a.hidden, "layers": a.layers, "vocab": a.vocab,
           "pairs": a.pairs, "seq_len": a.seq_len, "probe_len": a.probe_len, "pair_chunk": a.pair_chunk,
           "plain_step_s": t_plain, "meta_step_s": t_meta, "meta_step_remat_s": t_remat,
           "meta_over_plain": t_meta / t_plain, "meta_memory_bytes": mem, "meta_memory_remat_bytes": mem_remat,
           "meta_memory_chunk1_bytes": mem_seq, "device_peak_bytes": peak, "device_peak_remat_bytes": peak_remat}
    print(f"plain token-weighted step ({a.pairs} × {a.seq_len}): {1e3 * t_plain:.1f} ms")
    print(f"meta-step ({a.pairs} pairs, chunk {a.pair_chunk}): {1e3 * t_meta:.1f} ms "
          f"({t_meta / t_plain:.2f}× the plain step); with remat {1e3 * t_remat:.1f} ms")
    if mem is not None:
        print(f"compiled memory: {mem / 2**20:.1f} MiB, with remat {mem_remat / 2**20:.1f} MiB, one pair at a "
              f"time (pair_chunk 1) {mem_seq / 2**20:.1f} MiB")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
