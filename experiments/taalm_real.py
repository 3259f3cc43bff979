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

import dataclasses
import pathlib

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
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


@dataclasses.dataclass(frozen=True)
class Config:
    """``cfka taalm --lama-ckl DIR | --temporalwiki DIR --model HF_DIR ...``: TAALM on the reference's own files."""

    lama_ckl: str | None = None
    """folder with variant.jsonl and invariant_descriptive.jsonl"""
    temporalwiki: str | None = None
    """folder with eval/ probes and train/ diff sets (or TWiki_Diffsets/*.csv)"""
    model: str = ""
    """local HF folder of θ"""
    phi_model: str | None = None
    """φ's body (default --model); must share θ's tokenizer"""
    phi_train: str | None = None
    """φ's meta-training pairs (LAMA TA file or TemporalWiki TA rows); required by TAALM methods"""
    out: str = ""
    """run folder (resumed when it exists)"""
    methods: tuple[str, ...] = ()
    """comma-separated methods (empty: the paper's rows)"""
    update: str = "lora"
    """θ's trainable weights (reference: lora)"""
    lora_rank: int = 64
    """LoRA rank of θ and φ (alpha = rank / 4)"""
    freeze_layers: int | None = None
    """--update freeze: blocks frozen (default half)"""
    dtype: str = "float32"
    """θ's parameters (φ is float32)"""
    mesh: str | None = None
    """shard θ and the batches, e.g. data=2,fsdp=4 or auto"""
    epochs: int | None = None
    """default 30 (LAMA-CKL) / 1 per period (TemporalWiki)"""
    batch_size: int = 64
    lr: float = 1e-4
    eval_batch: int = 8
    max_length: int = 512
    """training documents truncated to this many tokens"""
    limit: int | None = None
    """first N records of every file (not the benchmark; default: all)"""
    max_docs: int | None = None
    """TemporalWiki: first N diff-set documents per period (default: all)"""
    review: str | None = None
    """TemporalWiki Mix-review documents"""
    phi_epochs: int = 30
    phi_meta_batch: int = 16
    phi_max_steps: int | None = None
    """stop φ's meta-training after this many steps (default: the epochs')"""
    phi_val_size: int = 16
    seed: int = 42
    progress: bool = True
    """progress bars"""

    def spec(self) -> RealCKLSpec:
        """The run (validated by ``runs/ckl_real.RealCKLSpec``)."""
        twiki = self.temporalwiki is not None
        methods = self.methods or (TWIKI_DEFAULT if twiki else LAMA_DEFAULT)
        epochs = self.epochs if self.epochs is not None else (1 if twiki else 30)
        ckl = CKLConfig(epochs=epochs, batch_size=self.batch_size, lr=self.lr, eval_batch=self.eval_batch,
                        seed=self.seed)
        meta = MetaTrainConfig(epochs=self.phi_epochs, meta_batch=self.phi_meta_batch, max_steps=self.phi_max_steps,
                               val_size=self.phi_val_size)
        return RealCKLSpec(model=self.model, out=self.out, lama_ckl=self.lama_ckl, temporalwiki=self.temporalwiki,
                           phi_model=self.phi_model, phi_train=self.phi_train, methods=tuple(methods),
                           update=self.update, lora_rank=self.lora_rank, lora_alpha=self.lora_rank / 4,
                           freeze_layers=self.freeze_layers, dtype=self.dtype, mesh=self.mesh, ckl=ckl,
                           metatrain=meta, max_length=self.max_length, limit=self.limit, review=self.review,
                           max_docs=self.max_docs, progress=self.progress)


FLAGS = Flags(Config, prog="cfka taalm", description=__doc__.split("\n\n")[0], required=("model", "out"),
              choices={"update": lambda: list(UPDATES), "dtype": lambda: sorted(DTYPES)},
              metavars={"lama_ckl": "DIR", "temporalwiki": "DIR", "model": "HF_DIR", "phi_model": "HF_DIR",
                        "phi_train": "FILE", "review": "FILE", "out": "DIR"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


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
    return command(FLAGS.parse(argv))


def command(cfg: Config) -> int:
    """Runs the benchmark and prints its table: ``cfka taalm --lama-ckl/--temporalwiki``'s run function."""
    spec = cfg.spec()
    results = run_lama(spec) if spec.lama_ckl else run_twiki(spec)
    print(write_tables(spec, results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
