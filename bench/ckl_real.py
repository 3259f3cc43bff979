"""What one LAMA-CKL epoch of ``cfka taalm --lama-ckl`` costs at a given model shape: the training step of
``runs/ckl_real`` (``continual.ckl.Trainer`` on θ0 from ``theta_for``) and the probe scorer, timed on random
token ids of the protocol's lengths (wall and process CPU seconds: on a shared machine the CPU time is the
steadier number), with the process's peak resident memory.

    python bench/ckl_real.py --layers 2 --batch 8 --seq 256        # Qwen2.5-0.5B width (d 896, F 4864, V 151,936)
    python bench/ckl_real.py --layers 4 --batch 8 --seq 256

Two depths separate the per-block cost from the fixed cost (embedding and LM head over 151,936 tokens), which
docs/taalm.md scales to the 24 blocks of Qwen2.5-0.5B and, by FLOPs, to Llama-2-7B. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import flax.nnx as nnx
import jax
import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--intermediate", type=int, default=4864)
    ap.add_argument("--heads", type=int, default=14)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256, help="training batch length (the set's longest evidence)")
    ap.add_argument("--probe-len", type=int, default=24)
    ap.add_argument("--update", default="lora", choices=("lora", "full", "freeze"))
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)

    from cfka_jax.continual.ckl import CKLConfig, Stream, Trainer
    from cfka_jax.data.ckl_encode import Encoded
    from cfka_jax.models.qwen import QwenConfig, QwenModel
    from cfka_jax.runs.ckl_real import RealCKLSpec, theta_for
    from cfka_jax.runs.method import resolve

    cfg = QwenConfig(model_type="qwen2", vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                     num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                     tie_word_embeddings=True)
    model = QwenModel(cfg, rngs=nnx.Rngs(0))
    n_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    spec = RealCKLSpec(model=".", out=".", lama_ckl=".", methods=("Finetune",), update=a.update,
                       ckl=CKLConfig(epochs=1, batch_size=a.batch, eval_batch=a.batch))
    theta = theta_for(model, resolve("Finetune", "ckl"), spec)
    n_train = sum(x.size for x in jax.tree.leaves(theta.train))
    rng = np.random.default_rng(0)

    def enc(n, length):
        ids = tuple(rng.integers(1, a.vocab, size=length).astype(np.int32) for _ in range(n))
        masks = tuple(np.concatenate([np.zeros(length - 3, np.float32), np.ones(3, np.float32)]) for _ in ids)
        return Encoded(ids, masks, 0)

    docs = enc(a.batch * a.repeats, a.seq)
    trainer = Trainer(theta, resolve("Finetune", "ckl"), spec.ckl, a.repeats)
    t0 = time.perf_counter()
    trainer.train_epoch(Stream(docs.select(range(a.batch))), None, 1)  # one step: compile + run
    compile_s = time.perf_counter() - t0
    times, cpu = [], []
    for r in range(a.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train_epoch(Stream(docs.select(range(r * a.batch, (r + 1) * a.batch))), None, 2 + r)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    probes = {"p": enc(a.batch, a.probe_len)}
    trainer.score(probes)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.score(probes)
    eval_s, eval_cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"layers": a.layers, "hidden": a.hidden, "vocab": a.vocab, "params": int(n_params),
           "trainable": int(n_train), "update": a.update, "batch": a.batch, "seq": a.seq,
           "first_step_s": compile_s, "step_s": min(times), "step_cpu_s": min(cpu), "probe_batch_s": eval_s,
           "probe_batch_cpu_s": eval_cpu, "probe_len": a.probe_len,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "device": jax.devices()[0].platform}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
