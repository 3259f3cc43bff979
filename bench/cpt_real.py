"""Benchmark: the peak resident memory of a whole ``cfka corpus-cpt`` run at a real model shape, against its floor.

    python bench/cpt_real.py [--shape qwen2.5-0.5b|qwen3-1.7b|pythia-160m] [--update full|lora|freeze]
                             [--docs 145] [--steps 4] [-- EXTRA CORPUS-CPT FLAGS]

Builds (once, under ``--folders``) a random-init HF folder of the shape (``bench/memory.build_folder``: bf16
safetensors shards, a 512-entry BPE tokenizer), a corpus of ``--docs`` synthetic documents and two MMLU-format
question files (``professional_law`` as the Domain subject, ``high_school_biology`` as Original), then runs the
issue's command

    cfka corpus-cpt --data corpus --model model --out run --method stoc --alpha 0.8 --mc mc \\
        --domain-subjects professional_law --steps 4 --warmup 1 --batch 4 --seq-len 256 --eval-every 4 \\
        --replay-sources 4 --replay-new-tokens 32 --replay-samples 1 --mc-limit 8 --eval-batch 4 --dtype bfloat16

plus the flags after ``--`` in a child process whose RSS is sampled every 10 ms from ``/proc/PID/statm``. The
floor is the state a run cannot avoid: 16 B per trained parameter (fp32 master, fp32 gradient, two fp32 AdamW
moments; 12 B with ``--opt-state-dtype bfloat16``) and 2 B per frozen (bf16) parameter. Ends with one JSON line.
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

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import memory  # noqa: E402  (bench/memory.py: the shapes, the folder builder, the floor)

ISSUE_FLAGS = ["--method", "stoc", "--alpha", "0.8", "--domain-subjects", "professional_law", "--warmup", "1",
               "--batch", "4", "--seq-len", "256", "--replay-sources", "4", "--replay-new-tokens", "32",
               "--replay-samples", "1", "--mc-limit", "8", "--eval-batch", "4", "--dtype", "bfloat16"]
GIB = 1024**3


def write_inputs(root: pathlib.Path, docs: int) -> tuple[pathlib.Path, pathlib.Path]:
    """(corpus folder, question folder) under ``root`` (rewritten each time; small)."""
    corpus, mc = root / "corpus", root / "mc"
    corpus.mkdir(parents=True, exist_ok=True)
    mc.mkdir(parents=True, exist_ok=True)
    with open(corpus / "docs.jsonl", "w") as f:
        for text in memory.corpus_texts(docs, seed=2):
            f.write(json.dumps({"text": text}) + "\n")
    words = memory.WORDS
    for subject in ("professional_law", "high_school_biology"):
        rows = []
        for i in range(12):
            choices = [f"{words[(i + k) % len(words)]} {words[(3 * i + k) % len(words)]}" for k in range(4)]
            rows.append(",".join([f"which {words[i % len(words)]} applies in case {i}", *choices, "ABCD"[i % 4]]))
        (mc / f"{subject}_test.csv").write_text("\n".join(rows) + "\n")
    return corpus, mc


def floor_bytes(folder: pathlib.Path, update: str, extra: list[str]) -> dict:
    """The floor of the run (module docstring), counted on an abstract model with the run's update applied."""
    import flax.nnx as nnx
    import jax.numpy as jnp

    from cfka_jax.experiments.update_flags import updated_model
    from cfka_jax.models import family, hub

    cfg = family.config_from_hf(hub.read_config(folder), dtype=jnp.bfloat16)
    rank = int(extra[extra.index("--lora-rank") + 1]) if "--lora-rank" in extra else 128
    layers = int(extra[extra.index("--freeze-layers") + 1]) if "--freeze-layers" in extra else None
    box = {}

    def build():
        model, trainable = updated_model(family.of(cfg).build(cfg), update, layers, rank, 0)
        box["trainable"] = trainable
        return model

    params = nnx.state(nnx.eval_shape(build), nnx.Param)
    mask = box["trainable"](params) if box["trainable"] is not None else None
    bf16_moments = "--opt-state-dtype" in extra and extra[extra.index("--opt-state-dtype") + 1] == "bfloat16"
    floor, n_train, n_frozen = memory.floor_bytes(params, mask, 4 if bf16_moments else 8)
    return {"floor_gib": floor / GIB, "n_trained": n_train, "n_frozen": n_frozen}


def run_sampled(cmd: list[str], log: pathlib.Path, interval: float = 0.01) -> tuple[int, int, float, list]:
    """(exit code, peak RSS bytes, wall seconds, phases) of ``cmd``; its output goes to ``log``, each line stamped
    with the seconds since the start and the peak RSS (GiB) seen since the line before, and ``phases`` lists the
    five lines after which the highest peaks were reached (which part of the run holds the memory)."""
    page = os.sysconf("SC_PAGE_SIZE")
    state = {"peak": 0, "since": 0}
    lines = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def sample():
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/statm") as f:
                    v = int(f.read().split()[1]) * page
            except (FileNotFoundError, ProcessLookupError):
                break
            state["peak"], state["since"] = max(state["peak"], v), max(state["since"], v)
            time.sleep(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    last = "(start)"
    with open(log, "w") as out:
        for line in proc.stdout:
            for part in line.rstrip("\n").split("\r"):
                if not part.strip():
                    continue
                since, state["since"] = state["since"], 0
                lines.append((since, last))
                out.write(f"[{time.perf_counter() - t0:7.1f} s, {since / GIB:6.2f} GiB] {part}\n")
                last = part[:160]
    rc = proc.wait()
    thread.join()
    lines.append((state["since"], last))
    top = sorted(lines, key=lambda x: -x[0])[:5]
    return rc, state["peak"], time.perf_counter() - t0, [{"peak_gib": v / GIB, "after": text} for v, text in top]


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=list(memory.SHAPES))
    ap.add_argument("--update", default="full", choices=["full", "lora", "freeze"])
    ap.add_argument("--docs", type=int, default=145)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--folders", default=os.path.join(tempfile.gettempdir(), "cfka_bench_memory"))
    args = ap.parse_args(argv)
    folder = pathlib.Path(args.folders) / args.shape
    memory.build_in_child(args.shape, folder)
    root = pathlib.Path(args.folders) / f"cpt-{args.shape}"
    corpus, mc = write_inputs(root, args.docs)
    out = root / f"run-{args.update}-{os.getpid()}"
    cmd = [sys.executable, "-m", "cfka_jax.cli", "corpus-cpt", "--data", str(corpus), "--model", str(folder),
           "--out", str(out), "--mc", str(mc), "--steps", str(args.steps), "--eval-every", str(args.steps),
           "--update", args.update, "--no-progress", *ISSUE_FLAGS, *extra]
    floor = floor_bytes(folder, args.update, extra)
    rc, peak, wall, phases = run_sampled(cmd, root / f"log-{args.update}-{os.getpid()}.txt")
    final = json.loads((out / "final.json").read_text()) if (out / "final.json").exists() else {}
    row = {"bench": "cpt_real", "shape": args.shape, "update": args.update, "extra": extra, "exit": rc,
           "wall_s": round(wall, 1), "peak_gib": peak / GIB, **floor, "ratio": peak / GIB / floor["floor_gib"],
           "final_step": final.get("step"), "phases": phases, "load_avg_1m": os.getloadavg()[0],
           "log": str(root / f"log-{args.update}-{os.getpid()}.txt")}
    print(f"{args.shape} {args.update} {' '.join(extra)}: exit {rc}, {wall:.0f} s, peak {peak / GIB:.2f} GiB, "
          f"floor {floor['floor_gib']:.2f} GiB, x{row['ratio']:.2f}", flush=True)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
