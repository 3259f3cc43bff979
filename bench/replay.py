"""Benchmark: the small-preset STOC replay build, and its two model-bound stages against HF torch on this CPU.

    python bench/replay.py [--pt-dir runs/stoc-small/pt-small-qwen] [--rows 64] [--threads 1] [--preset small]

1. The whole small-preset build (``continual/replay.build_replay`` with ``runs/replay.synthetic_replay_config``:
   attention scores of every ``cpt_train`` biography, 3 spans of 3 tokens each, 3 samples of 128 tokens per
   prompt at T = 1.0 with repetition penalty 1.05 through EOS, MinHash LSH over the decoded candidates, the
   token-budget draw), timed stage by stage: prompts/s, generated tokens/s, MinHash docs/s and the wall time
   (target ≤ 5 minutes on 2 cores).
2. Against HF torch (eager attention, same weights exported with ``save_pretrained``):
   * scoring: ``--rows`` biographies, ours (right-padded batches, one jitted program) vs the reference's way
     (one sequence at a time, ``output_attentions=True``, mean over layers and heads, column sums / (j + 1));
     the scores must agree.
   * sampling: the first ``--rows`` prompt rows, 128 new tokens each; ours (one jitted KV-cached while-loop) vs
     ``generate(do_sample=True, temperature=1, top_k=0, top_p=1, repetition_penalty=1.05)`` with
     ``min_new_tokens = max_new_tokens`` (sampling through EOS).

The model is the small preset's (Qwen2 architecture, 3 layers, d = 96; ``--preset smoke`` for a quick check of
the script): the PT parameters exported to ``--pt-dir``'s ``params/`` (a finished ``cfka pt --preset <preset>``
run of the qwen family), else a random initialisation (costs are the same; MinHash and EOS counts are not). Prints
a table and ends with one JSON line of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

if "--threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _n
    if _n == "1":
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"

import dataclasses  # noqa: E402

import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from cfka_jax.continual import replay, stoc  # noqa: E402
from cfka_jax.runs.biography import build_model  # noqa: E402
from cfka_jax.runs.folder import RunFolder, RunFolderError  # noqa: E402
from cfka_jax.runs.presets import BIOGRAPHY, Preset  # noqa: E402
from cfka_jax.runs.replay import ReplaySwitches, synthetic_replay_config  # noqa: E402
from cfka_jax.train.step import master_params  # noqa: E402


def _model(p: Preset, bundle, pt_dir: str | None):
    """The preset's qwen model: random init (seed 0), or the float32 parameters a finished PT run exported to
    ``pt_dir/params`` (as ``runs/biography.continual`` loads them)."""
    model = build_model(p, "qwen", len(bundle.tokenizer), seed=0)
    if pt_dir is None:
        return model
    folder = RunFolder(pt_dir)
    params, step = folder.load_params(master_params(nnx.split(model, nnx.Param, ...)[1]))
    if step != p.pt.steps:
        raise RunFolderError(f"PT parameters in {folder.params_dir} are at step {step}, expected {p.pt.steps} "
                             f"(preset {p.name!r})")
    nnx.update(model, params)
    return model


def full_build(model, bundle) -> dict:
    cfg = synthetic_replay_config("stoc", bundle.config.seq_len, ReplaySwitches(), seed=0)
    new = bundle.splits["cpt_train"]
    t = time.perf_counter()
    corpus = replay.build_replay(model, new.docs(), bundle.tokenizer, cfg, budget_tokens=len(new.tokens))
    return {"wall_s": time.perf_counter() - t, **corpus.stats}


def hf_scores(hf, docs) -> list[np.ndarray]:
    """The reference's scoring: one sequence at a time, attention probabilities, mean over layers and heads."""
    import torch

    out = []
    with torch.inference_mode():
        for d in docs:
            att = hf(torch.as_tensor(d[None].astype(np.int64)), output_attentions=True).attentions
            abar = torch.stack([a[0] for a in att]).mean(dim=(0, 1))  # L N S T -> S T
            out.append((abar.sum(0) / torch.arange(1, len(d) + 1)).numpy())
    return out


def compare_scoring(model, hf, docs) -> dict:
    stoc.attention_scores(model, docs)  # compile
    t = time.perf_counter()
    ours = stoc.attention_scores(model, docs)
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    theirs = hf_scores(hf, docs)
    t_hf = time.perf_counter() - t
    err = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs))
    return {"score_docs": len(docs), "score_ours_s": t_ours, "score_hf_s": t_hf, "score_speedup": t_hf / t_ours,
            "score_max_abs_diff": err}


def compare_sampling(model, hf, prompts, cfg, eos_id) -> dict:
    import torch

    cfg = dataclasses.replace(cfg, batch_size=len(prompts) * cfg.num_samples, minhash=None)
    replay.sample_candidates(model, prompts, cfg, eos_id)  # compile
    t = time.perf_counter()
    _, generated = replay.sample_candidates(model, prompts, cfg, eos_id)
    t_ours = time.perf_counter() - t
    ids = torch.as_tensor(np.repeat(np.array([p.ids for p in prompts], np.int64), cfg.num_samples, axis=0))
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=cfg.repetition_penalty,
              max_new_tokens=cfg.max_new_tokens, min_new_tokens=cfg.max_new_tokens, pad_token_id=eos_id,
              attention_mask=torch.ones_like(ids))
    with torch.inference_mode():
        hf.generate(ids[:2], **(kw | {"attention_mask": torch.ones_like(ids[:2])}))  # warm-up
        t = time.perf_counter()
        hf.generate(ids, **kw)
        t_hf = time.perf_counter() - t
    return {"sample_rows": int(ids.shape[0]), "sample_new_tokens": cfg.max_new_tokens,
            "sample_ours_tok_s": generated / t_ours, "sample_hf_tok_s": ids.shape[0] * cfg.max_new_tokens / t_hf,
            "sample_speedup": t_hf / t_ours}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pt-dir", default=None, help="a finished PT run folder of --preset (default: random init)")
    ap.add_argument("--preset", default="small", choices=sorted(BIOGRAPHY),
                    help="Biography preset of the data and model (smoke: a quick check of the script)")
    ap.add_argument("--cache-dir", default="runs/data-cache")
    ap.add_argument("--rows", type=int, default=64, help="documents / prompt rows of the HF comparisons")
    ap.add_argument("--threads", type=int, default=None, help="1: single-threaded XLA and torch")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from cfka_jax.data.pipeline import build_data
    from cfka_jax.models import save_pretrained

    p = BIOGRAPHY[args.preset]
    bundle = build_data(p.data_config(), args.cache_dir)
    model = _model(p, bundle, args.pt_dir)
    build = full_build(model, bundle)
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tmp)
        hf = AutoModelForCausalLM.from_pretrained(tmp, attn_implementation="eager", dtype=torch.float32).eval()
    docs = bundle.splits["cpt_train"].docs()[:args.rows]
    cfg = synthetic_replay_config("stoc", bundle.config.seq_len, ReplaySwitches(), seed=0)
    prompts = replay.make_prompts(model, docs, cfg, bundle.eos_id)[:max(1, args.rows // cfg.num_samples)]
    row = {"bench": f"replay_{p.name}", **{k: build[k] for k in (
        "wall_s", "num_prompts", "num_candidates", "minhash_dropped", "num_sequences", "prompts_per_s",
        "gen_tokens_per_s", "minhash_docs_per_s", "prompt_s", "sample_s", "minhash_s")},
        **compare_scoring(model, hf, docs), **compare_sampling(model, hf, prompts, cfg, bundle.eos_id),
        "torch_threads": torch.get_num_threads(), "pt_dir": args.pt_dir, "load_avg_1m": os.getloadavg()[0]}
    row["target_5min_met"] = row["wall_s"] <= 300.0
    for k, v in row.items():
        print(f"{k:>22}: {v:.4g}" if isinstance(v, float) else f"{k:>22}: {v}")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
