"""Glue for the synthetic CKL benchmarks: θ0 pre-trained on a synthetic world's PT corpus, θ0's probe scores of
the candidate facts, meta-training pairs, and φ/θ split for the meta-gradient.

    model = build_lm(ModelSize(...), vocab_size=len(tok), arch="qwen")          # any registered family
    pretrain_texts(model, tok, world.pt_texts, PTConfig(...), out_dir)          # resumable (train/loop.py)
    scores = candidate_scores(model, tok, world.all_records())                    # uuid -> {descriptive, schematic}
    fns, phi_train, ops, phi = meta_setup(model, PhiConfig(...), theta_lora)     # φ from a copy of θ0

PT documents are ``[EOS] + ids + [EOS]`` packed with document masking (positions restart per document), so a
probe read as ``[BOS = EOS] + ids`` looks like the start of a PT document.
"""

from __future__ import annotations

import dataclasses
import pathlib

import flax.nnx as nnx
import numpy as np

from cfka_jax.continual.peft import LoRAConfig, apply_lora
from cfka_jax.continual.taalm.meta import ModelFns, Operands
from cfka_jax.continual.taalm.metatrain import PairSet
from cfka_jax.continual.taalm.phi import (PhiConfig, TrainAttention, build_phi, make_logits_fn, make_weights_fn,
                                          phi_trainable, split_trainable)
from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.ckl_encode import encode
from cfka_jax.eval.knowledge_probes import evaluate_probes, make_probe_scorer
from cfka_jax.models import family
from cfka_jax.models.family import ModelSize
from cfka_jax.train.loop import LoopConfig, run_loop
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import init_state, make_train_step, model_logits


def build_lm(size: ModelSize, vocab_size: int, seed: int = 0, arch: str = "qwen") -> nnx.Module:
    """A from-scratch θ0 of family ``arch`` (``models/family.py``; Qwen2 with tied embeddings by default)."""
    fam = family.get(arch)
    return fam.build(fam.from_size(size, vocab_size=vocab_size), seed)


@dataclasses.dataclass(frozen=True)
class PTConfig:
    """Pre-training of θ0 on the PT corpus (AdamW with warm-up + cosine, ``train/optim.py``)."""

    epochs: int = 40
    batch_size: int = 32
    seq_len: int = 128
    peak_lr: float = 3e-3
    min_lr: float = 1e-4
    warmup_frac: float = 0.03
    seed: int = 0

    def __post_init__(self):
        if self.epochs < 0 or self.batch_size < 1 or self.seq_len < 2:
            raise ValueError(f"invalid PT config {self}")


def pretrain_texts(model: nnx.Module, tokenizer, texts, cfg: PTConfig, out_dir: str | pathlib.Path, *,
                   progress: bool = True) -> dict:
    """Train ``model`` in place on ``texts`` (resuming from ``out_dir/checkpoints``); returns the last train record."""
    eos = int(tokenizer.eos_token_id)
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    docs = [np.asarray([eos, *x, eos], np.int32) for x in ids]
    batcher = EpochBatcher(docs, seq_len=cfg.seq_len, eos_id=eos, batch_size=cfg.batch_size, seed=cfg.seed,
                           doc_mask=True)
    steps = cfg.epochs * batcher.steps_per_epoch
    opt = OptimConfig(peak_lr=cfg.peak_lr, min_lr=cfg.min_lr, warmup_steps=int(cfg.warmup_frac * steps),
                      total_steps=max(steps, 1), weight_decay=0.1)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = make_optimizer(opt)
    result = run_loop(init_state(params, tx), make_train_step(graphdef, rest, tx), batcher,
                      cfg=LoopConfig(steps=steps, log_every=max(1, batcher.steps_per_epoch), progress=progress),
                      out_dir=pathlib.Path(out_dir))
    nnx.update(model, result.state.params)
    train = [r for r in result.history if r.get("kind") == "train"]
    return train[-1] if train else {}


def score_texts(model: nnx.Module, tokenizer, texts, objects, *, batch_size: int = 64) -> np.ndarray:
    """θ's §5.5 object accuracy per text (model without adapters or with merged ones)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    scorer = make_probe_scorer(lambda p, batch: model_logits(graphdef, p, rest, batch))
    return evaluate_probes(scorer, params, encode(tokenizer, texts, objects), batch_size=batch_size).per_example_acc


def candidate_scores(model: nnx.Module, tokenizer, records, *, batch_size: int = 64) -> dict[str, dict]:
    """uuid → ``{"descriptive": acc, "schematic": acc}`` for every record."""
    records = list(records)
    objects = [r.object for r in records]
    desc = score_texts(model, tokenizer, [r.task_descriptive for r in records], objects, batch_size=batch_size)
    sche = score_texts(model, tokenizer, [r.task_schematic for r in records], objects, batch_size=batch_size)
    return {r.uuid: {"descriptive": float(a), "schematic": float(b)} for r, a, b in zip(records, desc, sche)}


def pair_set(tokenizer, records, *, max_length: int = 512, probe: str = "task_schematic") -> PairSet:
    """(D = evidence truncated to ``max_length`` tokens, T_D = the probe form, never truncated) pairs with object
    masks (§4.1)."""
    records = list(records)
    objects = [r.object for r in records]
    return PairSet(encode(tokenizer, [r.evidence for r in records], objects, max_length=max_length),
                   encode(tokenizer, [getattr(r, probe) for r in records], objects, max_length=1 << 30))


@dataclasses.dataclass
class MetaSetup:
    """Everything the meta-gradient needs, plus φ's module and split to save the result."""

    fns: ModelFns
    phi_train: object
    ops: Operands
    phi: TrainAttention
    phi_graph: tuple


def meta_setup(pt_model: nnx.Module, phi_cfg: PhiConfig, theta_lora: LoRAConfig, *, lora_seed: int = 0,
               phi_body: nnx.Module | None = None) -> MetaSetup:
    """θ0 = a copy of the PT model with fresh LoRA (seed ``lora_seed``, as every benchmark θ0); φ = a copy of
    ``phi_body`` (default: the PT model, so φ has θ's token ids and a pre-trained body) with a scalar head."""
    theta = apply_lora(nnx.clone(pt_model), theta_lora, rngs=nnx.Rngs(lora_seed))
    tg, theta0, theta_frozen, trest = split_trainable(theta, nnx.LoRAParam)
    phi = build_phi(nnx.clone(phi_body if phi_body is not None else pt_model), phi_cfg)
    pg, phi_train, phi_frozen, prest = split_trainable(phi, phi_trainable(phi, lora=phi_cfg.lora is not None))
    fns = ModelFns(make_logits_fn(tg, trest), make_weights_fn(pg, prest))
    return MetaSetup(fns, phi_train, Operands(phi_frozen, theta0, theta_frozen), phi, (pg, phi_frozen, prest))


def merged_phi(setup: MetaSetup, phi_train) -> TrainAttention:
    """φ's module with the trained pytree ``phi_train`` (for ``weights.save_phi``)."""
    pg, frozen, rest = setup.phi_graph
    return nnx.merge(pg, phi_train, frozen, rest)
