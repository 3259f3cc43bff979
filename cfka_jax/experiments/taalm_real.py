"""TAALM's two benchmarks on the reference's own files with a local HF model (Seo et al., NeurIPS 2024: Table 1,
LAMA-CKL with Llama-2-7B; the TemporalWiki table with TinyLlama-1.1B; spec taalm.md §5, §8):

    cfka taalm --lama-ckl data/LAMA_ckl --model models/Llama-2-7b --phi-model models/TinyLlama-1.1B \\
        --phi-train data/LAMA_ckl/train_attention_traindata.jsonl --out runs/lama-real --dtype bfloat16
    cfka taalm --temporalwiki data/TemporalWiki --model models/TinyLlama-1.1B \\
        --phi-train data/TemporalWiki/train_TA/train_attention_traindata_0809.jsonl --out runs/twiki-real

The recipes are ``runs/ckl_real.run_lama`` and ``runs/twiki_real.run_twiki`` (resumable from ``--out``); this
script parses the flags and writes ``table.md`` / ``table.json`` (beside the paper's numbers) and, for LAMA-CKL,
``accuracy.png`` (TO-LEARN and NOT-TO-FORGET accuracy per epoch per method). Defaults are the reference's
settings (30 epochs, batch 64, AdamW lr 1e-4, LoRA r 64 α 16 dropout 0.1, φ meta-trained 30 epochs of 16 pairs);
TemporalWiki trains 1 epoch per period.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from cfka_jax import jsonio
from cfka_jax.continual.ckl import CKLConfig
from cfka_jax.continual.taalm import MetaTrainConfig
from cfka_jax.runs.ckl_real import RealCKLSpec, run_lama
from cfka_jax.runs.specs import DTYPES, UPDATES
from cfka_jax.runs.twiki_real import run_twiki
from cfka_jax.experiments import taalm_report as report

LAMA_DEFAULT = ("Finetune", "Oracle", "RHO-1", "Mix-review", "RecAdam", "K-Adapter", "TAALM", "TAALM + K-Adapter",
                "TAALM + Mix-review", "TAALM + RecAdam", "TAALM + K-Adapter + RecAdam",
                "TAALM + K-Adapter + Mix-review + RecAdam")
TWIKI_DEFAULT = ("Finetune", "RHO-1", "RecAdam", "K-Adapter", "TAALM")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cfka taalm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lama-ckl", default=None, metavar="DIR", help="folder with variant.jsonl and "
                    "invariant_descriptive.jsonl")
    ap.add_argument("--temporalwiki", default=None, metavar="DIR", help="folder with eval/ probes and train/ "
                    "diff sets (or TWiki_Diffsets/*.csv)")
    ap.add_argument("--model", required=True, metavar="HF_DIR", help="local HF folder of θ")
    ap.add_argument("--phi-model", default=None, metavar="HF_DIR", help="φ's body (default --model); must share "
                    "θ's tokenizer")
    ap.add_argument("--phi-train", default=None, metavar="FILE", help="φ's meta-training pairs (LAMA TA file or "
                    "TemporalWiki TA rows); required by TAALM methods")
    ap.add_argument("--out", required=True, help="run folder (resumed when it exists)")
    ap.add_argument("--methods", default=None, help="comma-separated methods (default: the paper's rows)")
    ap.add_argument("--update", default="lora", choices=UPDATES, help="θ's trainable weights (reference: lora)")
    ap.add_argument("--lora-rank", type=int, default=64, help="LoRA rank of θ and φ (alpha = rank / 4)")
    ap.add_argument("--freeze-layers", type=int, default=None, help="--update freeze: blocks frozen (default half)")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="θ's parameters (φ is float32)")
    ap.add_argument("--mesh", default=None, help="shard θ and the batches, e.g. data=2,fsdp=4 or auto")
    ap.add_argument("--epochs", type=int, default=None, help="default 30 (LAMA-CKL) / 1 per period (TemporalWiki)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval-batch", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=512, help="training documents truncated to this many tokens")
    ap.add_argument("--limit", type=int, default=None, help="first N records of every file (not the benchmark)")
    ap.add_argument("--max-docs", type=int, default=None, help="TemporalWiki: first N diff-set documents per period")
    ap.add_argument("--review", default=None, metavar="FILE", help="TemporalWiki Mix-review documents")
    ap.add_argument("--phi-epochs", type=int, default=30)
    ap.add_argument("--phi-meta-batch", type=int, default=16)
    ap.add_argument("--phi-max-steps", type=int, default=None)
    ap.add_argument("--phi-val-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--no-progress", action="store_true")
    return ap


def spec_from_args(a: argparse.Namespace) -> RealCKLSpec:
    twiki = a.temporalwiki is not None
    methods = tuple(m.strip() for m in a.methods.split(",") if m.strip()) if a.methods else (
        TWIKI_DEFAULT if twiki else LAMA_DEFAULT)
    epochs = a.epochs if a.epochs is not None else (1 if twiki else 30)
    ckl = CKLConfig(epochs=epochs, batch_size=a.batch_size, lr=a.lr, eval_batch=a.eval_batch, seed=a.seed)
    meta = MetaTrainConfig(epochs=a.phi_epochs, meta_batch=a.phi_meta_batch, max_steps=a.phi_max_steps,
                           val_size=a.phi_val_size)
    return RealCKLSpec(model=a.model, out=a.out, lama_ckl=a.lama_ckl, temporalwiki=a.temporalwiki,
                       phi_model=a.phi_model, phi_train=a.phi_train, methods=methods, update=a.update,
                       lora_rank=a.lora_rank, lora_alpha=a.lora_rank / 4, freeze_layers=a.freeze_layers,
                       dtype=a.dtype, mesh=a.mesh, ckl=ckl, metatrain=meta, max_length=a.max_length, limit=a.limit,
                       review=a.review, max_docs=a.max_docs, progress=not a.no_progress)


def write_tables(spec: RealCKLSpec, results: dict) -> str:
    out = pathlib.Path(spec.out)
    meta_path = out / "metatrain.json"
    meta = jsonio.read_json_object(meta_path, "a meta-training record (JSON object)") if meta_path.exists() else {}
    head = (f"# TAALM on real files: {spec.lama_ckl or spec.temporalwiki}, θ = {spec.model} ({spec.update}, "
            f"{spec.dtype}), φ body = {spec.phi_model or spec.model}; φ checkpoint of meta-step "
            f"{meta.get('best_step')}\n\n")
    if spec.lama_ckl:
        body = "## LAMA-CKL (ours vs paper, Llama-2-7B)\n\n" + report.lama_markdown(results)
        summary = {k: v["summary"] for k, v in results.items()}
        report.plot_accuracy(results, out / "accuracy.png")
    else:
        body = "## TemporalWiki (object NLL; paper: TinyLlama-1.1B)\n\n" + report.twiki_markdown(results)
        summary = {k: [{"period": r["period"], "before": r["before"], "after": r["after"]} for r in v]
                   for k, v in results.items()}
    text = head + body + "\n"
    jsonio.write_text_atomic(out / "table.md", text)
    jsonio.write_json_atomic(out / "table.json", {"spec": dataclasses.asdict(spec), "phi_best_step":
                                                  meta.get("best_step"), "results": summary}, indent=1, default=float)
    return text


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    spec = spec_from_args(a)
    results = run_lama(spec) if spec.lama_ckl else run_twiki(spec)
    print(write_tables(spec, results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
