"""Benchmark: peak host memory of a pretrained-model run at the sizes users run, against the state floor.

    python bench/memory.py [--shapes pythia-160m qwen2.5-0.5b qwen3-1.7b] [--updates full lora freeze]
                           [--batch 4] [--seq 256] [--opt-state-dtype float32|bfloat16] [--remat]
                           [--scan-layers] [--guard state|gradient]
                           [--loss-chunk ROWS] [--xla | --checkpoints]

``--xla`` prints, per shape, XLA's buffer assignment of the full-update train step instead (compiled, not run).
``--checkpoints`` prints, per (shape, update), the bytes on disk of what a run's checkpoint holds (no step is run:
the state is the one ``runs/engine.train_lm`` builds, every floating leaf filled with noise as after training
(``trained_like``), written by the same calls): ``whole`` = the whole
``TrainState`` (what every checkpoint held before frozen leaves were held), ``resumable`` = a checkpoint as
``train_lm``'s loop writes it now (frozen leaves held: checksums, not values), ``params`` = the export a run
finished with ``--final-checkpoint params`` keeps (``runs/folder.RunFolder.finish_checkpoints``).

For each shape a random-init HF folder is written first (``config.json`` with the real model's sizes, bf16
tensors in safetensors shards of <= 1 GB with an index, a small BPE tokenizer; built here from the family's key
table, no torch, no download). Each (shape, update) pair then runs in its *own child process* (so one
measurement's high-water mark cannot leak into the next), under a thread that samples the process's resident
set size (RSS, ``/proc/self/statm``) every 5 ms and keeps the maximum of each phase:

* ``load``: ``models.from_pretrained(folder, dtype=bfloat16)``;
* ``replay``: a STOC replay corpus (``continual/replay.build_replay``, 2 sources, 16 new tokens, one sample);
* ``train_step``: ``runs/engine.train_lm`` for one step of ``--batch`` x ``--seq`` tokens with ``--update``
  (full / LoRA rank 128 on the family's targets / freeze of the embedding and the first half of the blocks),
  bf16 compute, float32 master weights of the trained leaves; compile included;
* ``checkpoint``: the end-of-run checkpoint save of the same call (``train/checkpoint.CheckpointDir``).

``--loss-chunk ROWS`` trains with the chunked next-token NLL (``train/step.chunked_token_nll_loss``: the loss from
the final hidden states, ``ROWS`` predicting positions at a time, no ``B x S x V`` logits buffers).

``rss_base`` is the RSS after the imports and the JAX backend start. The *state floor* is what the run must
hold, in bytes per parameter: trained leaves 16 (float32 master 4 + float32 gradient 4 + AdamW moments 4 + 4;
with ``--opt-state-dtype bfloat16`` 12), frozen leaves 2 (their bf16 weights). ``ratio`` = peak / floor
(the largest phase peak over the whole child). Children of the 1.7B shape run only when ``free`` reports more
than ``--big-free-gib`` GiB available. Every process runs with the XLA flags of a ``cfka`` process
(``cfka_jax/cli.XLA_CPU_FLAGS``: XLA:CPU's memory scheduler). Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

SHAPES = {
    "pythia-160m": dict(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"], vocab_size=50304,
                        hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                        max_position_embeddings=2048, rotary_pct=0.25, rotary_emb_base=10000,
                        use_parallel_residual=True, layer_norm_eps=1e-5, hidden_act="gelu",
                        tie_word_embeddings=False),
    "qwen2.5-0.5b": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], vocab_size=151936,
                         hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0,
                         rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=True),
    "qwen3-1.7b": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], vocab_size=151936,
                       hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=True),
}
"""HF ``config.json`` sizes of the three models (from their published configs)."""
BIG = ("qwen3-1.7b",)
FULL_FLOOR_GIB = {"qwen3-1.7b": 1_720_574_976 * 16 / 1024**3}
"""16 B per parameter of the full update (the parameter count as ``bench/cpt_real.py`` counts it)."""
GIB = 1024**3
WORDS = ("court statute lease contract appeal judge ruling tenant estate plaintiff defendant evidence witness "
         "verdict motion clause party damages remedy breach notice title deed trust").split()


MC_TEXT = " ".join(f"Question : which applies ? {x} . {x} {x} Answer : {x}" for x in "ABCDEFGHIJ")
"""MMLU prompt words and answer letters, in the tokenizer's corpus so that each letter is one token (the
multiple-choice scorer needs distinct letter ids; ``bench/cpt_real.py``)."""


def corpus_texts(n: int = 64, seed: int = 0) -> list[str]:
    """``n`` synthetic legal-looking documents of ~300 words (tokenizer training and replay sources)."""
    import numpy as np

    r = np.random.default_rng(seed)
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
    coined = ["".join(r.choice(syllables, r.integers(1, 4))) for _ in range(2000)]
    vocab = np.array(WORDS + coined)
    return [" ".join(r.choice(vocab, 300)) + " ." for _ in range(n)]


# ------------------------------------------------------------------------------------------------ the folders


def _table(cfg):
    """(rules, transforms) of the family's strict key table."""
    from cfka_jax.models import family

    name = family.of(cfg).name
    if name == "pythia":
        from cfka_jax.models.pythia import convert
        return convert.rules(cfg), convert.transforms(cfg)
    from cfka_jax.models.qwen import convert
    return convert.rules(cfg), convert.TRANSFORMS


def build_folder(shape: str, dest: pathlib.Path, *, shard_bytes: int = 1 << 30, seed: int = 0) -> pathlib.Path:
    """A random-init HF folder of ``shape`` at ``dest`` (reused when complete): bf16 shards, index, tokenizer.

    Every tensor is drawn N(0, 0.02^2) in the NNX layout and run through the table's export transform (norm
    scales are ones, biases zeros), so the folder loads through exactly the path a downloaded model does.
    """
    import flax.nnx as nnx
    import ml_dtypes
    import numpy as np
    from safetensors.numpy import save_file

    from cfka_jax.data.tokenize import train_word_tokenizer
    from cfka_jax.models import family, hub

    if (dest / "done").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    raw = dict(SHAPES[shape], torch_dtype="bfloat16")
    cfg = family.config_from_hf(raw)
    rules, transforms = _table(cfg)
    abstract = nnx.eval_shape(lambda: family.of(cfg).build(cfg))
    from cfka_jax.trees import flatten_mapping
    target = flatten_mapping(nnx.to_pure_dict(nnx.state(abstract)))
    plan = hub._plan(rules, cfg.num_hidden_layers, cfg.scan_layers)
    r = np.random.default_rng(seed)
    shard, size, shards, weight_map = {}, 0, [], {}

    def flush():
        nonlocal shard, size
        name = f"model-{len(shards) + 1:05d}.safetensors"
        save_file(shard, str(dest / name), metadata={"format": "pt"})
        shards.append(name)
        weight_map.update({k: name for k in shard})
        shard, size = {}, 0

    for key, slot in plan.items():
        spec = target[slot.path]
        shp = tuple(spec.shape if slot.layer is None else spec.shape[1:])
        leaf = str(slot.path[-1])
        if leaf in ("scale", "weight") and len(shp) == 1:
            value = np.ones(shp, np.float32)
        elif leaf == "bias":
            value = np.zeros(shp, np.float32)
        else:
            value = r.standard_normal(shp, dtype=np.float32) * np.float32(0.02)
        hf = np.ascontiguousarray(transforms[slot.transform][1](value)).astype(ml_dtypes.bfloat16)
        if size and size + hf.nbytes > shard_bytes:
            flush()
        shard[key], size = hf, size + hf.nbytes
    flush()
    (dest / hub.INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (dest / hub.CONFIG_FILE).write_text(json.dumps(raw, indent=1))
    train_word_tokenizer(corpus_texts() + [MC_TEXT] * 8, dest, bpe_vocab=512)
    (dest / "done").write_text("")
    return dest


# ------------------------------------------------------------------------------------------------- the child


class PeakSampler:
    """A thread sampling this process's RSS every ``interval`` s; ``peaks[phase]`` is each phase's maximum."""

    def __init__(self, interval: float = 0.005):
        self.interval, self.phase, self.peaks, self._stop = interval, "base", {}, threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def _run(self):
        while not self._stop.is_set():
            v = self.rss()
            if v > self.peaks.get(self.phase, 0):
                self.peaks[self.phase] = v
            time.sleep(self.interval)

    def mark(self, phase: str) -> None:
        v = self.rss()
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), v)
        self.phase = phase
        self.peaks[phase] = max(self.peaks.get(phase, 0), v)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.mark("end")
        self._stop.set()
        self._thread.join()


def floor_bytes(params, trainable, state_bytes: int) -> tuple[int, int, int]:
    """(floor bytes, trained parameter count, frozen parameter count): trained leaves ``4 + 4 + state_bytes``
    bytes each (master, gradient, moments), frozen leaves 2 (bf16)."""
    import jax
    import numpy as np

    sizes = jax.tree.leaves(jax.tree.map(lambda p: int(np.prod(p.shape)), params))
    mask = jax.tree.leaves(trainable) if trainable is not None else [True] * len(sizes)
    n_train = sum(s for s, m in zip(sizes, mask) if m)
    n_frozen = sum(s for s, m in zip(sizes, mask) if not m)
    return n_train * (8 + state_bytes) + 2 * n_frozen, n_train, n_frozen


def child(args) -> dict:
    import resource

    with PeakSampler() as sampler:
        import flax.nnx as nnx
        import jax
        import jax.numpy as jnp
        import numpy as np

        from cfka_jax.continual.replay import ReplayConfig, build_replay
        from cfka_jax.data.tokenize import load_tokenizer
        from cfka_jax.experiments.update_flags import updated_model
        from cfka_jax.models import from_pretrained
        from cfka_jax.runs.engine import RunHooks, RunMemory, RunObjective, RunUpdate, train_lm
        from cfka_jax.runs.folder import RunFolder
        from cfka_jax.train.loop import LoopConfig
        from cfka_jax.train.optim import OptimConfig

        jnp.zeros(()).block_until_ready()
        sampler.mark("base")
        sampler.mark("load")
        t0 = time.perf_counter()
        model = from_pretrained(args.folder, dtype=jnp.bfloat16, remat=args.remat, scan_layers=args.scan_layers)
        times = {"load": time.perf_counter() - t0}
        tok = load_tokenizer(args.folder)
        docs = [np.asarray(tok(t)["input_ids"][:args.seq - 1] + [tok.eos_token_id], np.int32)
                for t in corpus_texts(8, seed=1)]
        sampler.mark("replay")
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            rcfg = ReplayConfig.real("stoc", num_source_seqs=2, max_new_tokens=16, max_len=args.seq, num_samples=1,
                                     batch_size=2, seed=0, minhash=None)
            corpus = build_replay(model, docs, tok, rcfg, out_dir=pathlib.Path(d) / "replay")
        times["replay"] = time.perf_counter() - t0
        sampler.mark("update")
        model, trainable = updated_model(model, args.update, None, 128, 0)
        params = nnx.state(model, nnx.Param)
        mask = trainable(params) if trainable is not None else None
        floor, n_train, n_frozen = floor_bytes(params, mask, 2 * (2 if args.opt_state_dtype == "bfloat16" else 4))
        del params, mask
        r = np.random.default_rng(0)
        tokens = jnp.asarray(r.integers(2, 300, (args.batch, args.seq)), jnp.int32)
        batch = {"tokens": tokens, "target_mask": jnp.ones_like(tokens)}
        opt = OptimConfig(peak_lr=5e-5, min_lr=1e-5, warmup_steps=0, total_steps=1,
                          **({"state_dtype": args.opt_state_dtype} if args.opt_state_dtype != "float32" else {}))
        sampler.mark("train_step")
        t0 = time.perf_counter()

        def on_record(rec):
            if rec.get("kind") == "train":
                times["train_step"] = time.perf_counter() - t0
                sampler.mark("checkpoint")

        from cfka_jax.train.step import chunked_token_nll_loss

        loss = {"loss_fn": chunked_token_nll_loss(args.loss_chunk)} if args.loss_chunk else {}
        with tempfile.TemporaryDirectory() as d:
            train_lm(model, lambda t: batch, update=RunUpdate(opt=opt, trainable=trainable),
                     loop=LoopConfig(steps=1, log_every=1, progress=False), folder=RunFolder(d),
                     objective=RunObjective(compute_dtype=jnp.bfloat16, **loss), memory=RunMemory(guard=args.guard),
                     hooks=RunHooks(on_record=on_record))
            ckpt_bytes = sum(f.stat().st_size for f in pathlib.Path(d, "checkpoints").rglob("*") if f.is_file())
            times["checkpoint"] = time.perf_counter() - t0 - times["train_step"]
    peaks = sampler.peaks
    peak = max(peaks.values())
    return {"shape": args.shape, "update": args.update, "opt_state_dtype": args.opt_state_dtype,
            "remat": args.remat, "scan_layers": args.scan_layers, "guard": args.guard, "loss_chunk": args.loss_chunk, "batch": args.batch, "seq": args.seq, "n_trained": n_train, "n_frozen": n_frozen,
            "floor_gib": floor / GIB, "peak_gib": peak / GIB, "ratio": peak / floor,
            "ru_maxrss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
            **{f"rss_{k}_gib": v / GIB for k, v in peaks.items() if k != "end"},
            "checkpoint_gib": ckpt_bytes / GIB, "replay_sequences": len(corpus.sequences),
            **{f"{k}_s": v for k, v in times.items()}}


def xla_analysis(folder: str, *, batch: int, seq: int, remat: bool, opt_state_dtype: str,
                 loss_chunk: int | None = None, scan_layers: bool = False, guard: str = "state") -> dict:
    """XLA's buffer assignment of the full-update train step (``train/step.make_train_step``, bf16 compute,
    fp32 masters): argument / output / aliased / temporary bytes, compiled on abstract shapes (the folder's
    ``config.json`` only; no weight is read and the step is not run)."""
    import dataclasses

    import flax.nnx as nnx
    import jax
    import jax.numpy as jnp

    from cfka_jax.models import family, hub
    from cfka_jax.train import step as S
    from cfka_jax.train.optim import OptimConfig, make_optimizer

    cfg = family.config_from_hf(hub.read_config(folder), dtype=jnp.bfloat16)
    cfg = dataclasses.replace(cfg, remat=remat, scan_layers=scan_layers)
    graphdef, params, rest = nnx.split(nnx.eval_shape(lambda: family.of(cfg).build(cfg)), nnx.Param, ...)
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.float32), params)  # fp32 masters
    tx = make_optimizer(OptimConfig(warmup_steps=0, total_steps=1, state_dtype=opt_state_dtype))
    state = jax.eval_shape(lambda p: S.init_state(p, tx), params)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
    loss = {"loss_fn": S.chunked_token_nll_loss(loss_chunk)} if loss_chunk else {}
    step = S.make_train_step(graphdef, rest, tx, loss=S.Loss(compute_dtype=jnp.bfloat16, **loss),
                             update=S.Update(guard=guard))
    m = step.lower(state, {"tokens": tokens, "target_mask": tokens}).compile().memory_analysis()
    n = sum(x.size for x in jax.tree.leaves(params))
    return {"argument_gib": m.argument_size_in_bytes / GIB, "output_gib": m.output_size_in_bytes / GIB,
            "alias_gib": m.alias_size_in_bytes / GIB, "temp_gib": m.temp_size_in_bytes / GIB,
            "fp32_gradient_gib": 4 * n / GIB}


# ------------------------------------------------------------------------------------------------ the parent


def trained_like(tree):
    """``tree`` with every floating leaf replaced by standard-normal noise of its shape and dtype: the sizes of a
    *trained* state. At initialisation the moments are zeros and fp32 masters of bf16 weights have 16 zero mantissa
    bits, both of which orbax's compression shrinks, so a step-0 state understates a real checkpoint's bytes."""
    import jax
    import jax.numpy as jnp

    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    return treedef.unflatten([jax.random.normal(k, x.shape, jnp.float32).astype(x.dtype)
                              if jnp.issubdtype(x.dtype, jnp.floating) else x for k, x in zip(keys, leaves)])


def checkpoint_sizes(folder: str, update: str, opt_state_dtype: str) -> dict:
    """Bytes on disk of the whole train state, of a resumable checkpoint and of the params-only export
    (module docstring, ``--checkpoints``) of a bf16-compute run with ``update``."""
    import flax.nnx as nnx
    import jax.numpy as jnp

    from cfka_jax.experiments.update_flags import updated_model
    from cfka_jax.models import from_pretrained
    from cfka_jax.runs.folder import RunFolder
    from cfka_jax.train.checkpoint import CheckpointDir, frozen_paths, save
    from cfka_jax.train.optim import OptimConfig, make_optimizer
    from cfka_jax.train.step import init_state, master_params

    model, trainable = updated_model(from_pretrained(folder, dtype=jnp.bfloat16), update, None, 128, 0)
    params = master_params(nnx.split(model, nnx.Param, ...)[1])  # as train_lm: fp32 masters of every leaf
    mask = trainable(params) if trainable is not None else None
    state = init_state(params, make_optimizer(OptimConfig(warmup_steps=0, total_steps=1,
                                                          state_dtype=opt_state_dtype), mask))
    held = frozen_paths(params, mask) if mask is not None else ()
    state = trained_like(state)

    def size(path) -> float:
        return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file()) / GIB

    with tempfile.TemporaryDirectory() as d:
        whole = size(save(pathlib.Path(d, "whole"), state, step=1))
        run = RunFolder(pathlib.Path(d, "run"))
        ckpts = CheckpointDir(run.checkpoints)
        ckpts.hold(tuple(("params", *p) for p in held))
        resumable = size(ckpts.save(1, state))
        run.finish_checkpoints("params", state.params, 1, held=held)
        return {"whole_gib": whole, "resumable_gib": resumable, "params_gib": size(run.params_dir),
                "checkpoints_left_gib": size(run.checkpoints)}


def available_gib() -> float:
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) * 1024 / GIB


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--updates", nargs="+", default=["full", "lora", "freeze"], choices=["full", "lora", "freeze"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--opt-state-dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--remat", action="store_true", help="rematerialise each block in the backward pass")
    ap.add_argument("--scan-layers", action="store_true", help="stacked blocks under one nnx.scan")
    ap.add_argument("--guard", default="state", choices=["state", "gradient"],
                    help="the train step's finite guard (train/step.GUARDS)")
    ap.add_argument("--loss-chunk", type=int, default=None, metavar="ROWS",
                    help="chunked next-token NLL, ROWS predicting positions per chunk (no B x S x V logits)")
    ap.add_argument("--folders", default=os.path.join(tempfile.gettempdir(), "cfka_bench_memory"),
                    help="where the random-init model folders are written (reused)")
    ap.add_argument("--big-free-gib", type=float, default=14.0)
    ap.add_argument("--xla", action="store_true", help="only XLA's buffer sizes of the full-update step per shape")
    ap.add_argument("--checkpoints", action="store_true",
                    help="only the bytes on disk of a run's checkpoint and params export per (shape, update)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    ap.add_argument("--update", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from cfka_jax.cli import xla_flags  # the XLA flags a `cfka` process runs with (the children inherit them)

    os.environ["XLA_FLAGS"] = xla_flags(os.environ.get("XLA_FLAGS", ""))
    if args.child:
        print("RESULT " + json.dumps(child(args)))
        return
    rows = []
    for shape in args.shapes:
        if shape in BIG and available_gib() <= args.big_free_gib:
            print(f"skipped {shape}: {available_gib():.1f} GiB available <= {args.big_free_gib}", flush=True)
            continue
        folder = pathlib.Path(args.folders) / shape
        build_in_child(shape, folder)
        if args.checkpoints:
            for update in args.updates:
                row = {"shape": shape, "update": update, "opt_state_dtype": args.opt_state_dtype,
                       **checkpoint_sizes(str(folder), update, args.opt_state_dtype)}
                print(json.dumps(row), flush=True)
                rows.append(row)
            continue
        if args.xla:
            row = {"shape": shape, "remat": args.remat, "scan_layers": args.scan_layers, "guard": args.guard,
                   "loss_chunk": args.loss_chunk,
                   **xla_analysis(str(folder), batch=args.batch, seq=args.seq, remat=args.remat,
                                  opt_state_dtype=args.opt_state_dtype, loss_chunk=args.loss_chunk,
                                  scan_layers=args.scan_layers, guard=args.guard)}
            print(json.dumps(row), flush=True)
            rows.append(row)
            continue
        for update in args.updates:
            if shape in BIG and update == "full" and available_gib() < FULL_FLOOR_GIB[shape]:
                print(f"skipped {shape} full: its full-update floor ({FULL_FLOOR_GIB[shape]:.1f} GiB) exceeds the "
                      f"{available_gib():.1f} GiB available", flush=True)
                rows.append({"shape": shape, "update": update, "skipped": "floor exceeds available memory"})
                continue
            cmd = [sys.executable, __file__, "--child", "--shape", shape, "--update", update, "--folder", str(folder),
                   "--batch", str(args.batch), "--seq", str(args.seq), "--opt-state-dtype", args.opt_state_dtype]
            cmd += (["--remat"] if args.remat else []) + (["--loss-chunk", str(args.loss_chunk)] if args.loss_chunk else [])
            cmd += (["--scan-layers"] if args.scan_layers else []) + ["--guard", args.guard]
            out = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode or not lines:
                print(f"{shape} {update}: child failed (exit {out.returncode}):\n{out.stderr[-3000:]}", flush=True)
                rows.append({"shape": shape, "update": update, "error": out.returncode})
                continue
            row = json.loads(lines[-1][len("RESULT "):])
            rows.append(row)
            print(f"{shape:<14}{update:<8}floor {row['floor_gib']:6.2f} GiB  peak {row['peak_gib']:6.2f} GiB  "
                  f"x{row['ratio']:.2f}  (base {row['rss_base_gib']:.2f}, load {row['rss_load_gib']:.2f}, "
                  f"replay {row['rss_replay_gib']:.2f}, step {row['rss_train_step_gib']:.2f}, "
                  f"ckpt {row['rss_checkpoint_gib']:.2f}; ckpt files {row['checkpoint_gib']:.2f} GiB)", flush=True)
    print(json.dumps({"bench": "memory", "rows": rows, "load_avg_1m": os.getloadavg()[0]}))


def build_in_child(shape: str, folder: pathlib.Path) -> None:
    """Write the folder in a separate process, so its arrays are not counted in (or kept by) this one."""
    code = (f"import sys, pathlib; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r}); import memory; "
            f"memory.build_folder({shape!r}, pathlib.Path({str(folder)!r}))")
    subprocess.run([sys.executable, "-c", code], check=True)


if __name__ == "__main__":
    main()
