"""Bring-your-own-corpus continual pre-training of a pretrained LM, with STOC / LAMOL / Random replay (spec
cfka_stoc.md §1 "IndustryCorpus2 legal" setting, §4.7 schedule, §6.3–§6.4 real-data replay).

The paper's domain experiment (CPT of Qwen3 on a legal corpus, MMLU accuracy split into "Original" = general
subjects and "Continual"/"Domain" = law subjects; [REPORTED] STOC beats LAMOL by 1–4 points) with any local
corpus, model and MMLU-format question files:

    cfka corpus-cpt --data corpus/ --model models/Qwen2.5-0.5B --out runs/law-stoc --method stoc --alpha 0.8 \\
        --mc data/mmlu/test --domain-subjects professional_law international_law jurisprudence

Pipeline: read and tokenise the corpus (``cfka_jax/data/corpus.py``); hold out a seeded ``--heldout`` fraction of the documents
for perplexity (before tokenising, so no piece of a held-out document is trained on); cut long documents into
``--max-length`` pieces (default: the chunk length; ``--overflow truncate`` keeps only the head instead);
build the replay corpus from the base model with the real-data settings (``continual/replay.py``,
``runs/replay.real_replay_config``: window-sum spans of 10, 3 samples per prompt, stop at EOS, ``--replay-new-tokens``, keep
all candidates, MinHash on) using the first ``--replay-sources`` training documents as STOC sources; mix so that
replay tokens / all tokens ≈ 1 − α (``data/mixing.mix_replay``, rule ``token_share``); train (§4.7 defaults: chunks of 256, 8000 steps,
warm-up 500, 5e-5 → 1e-5 cosine, batch 48); evaluate at step 0, every ``--eval-every`` steps and at the end:
held-out perplexity (``Heldout/ppl``) and MC accuracy (``cfka_jax/eval/multiple_choice.py``: ``Original/acc``,
``Domain/acc``, ``All/acc``, per subject ``<set>/acc/<subject>``).

``--method`` is a name of the one method registry (``runs/method.py``): ``naive``, a replay kind, ``ewc``
(``--ewc-lambda``, ``--ewc-batches``, ``--ewc-fisher``; the Fisher of the base model on the first training
batches, ``runs/methods.train_hooks``), ``rho1`` (``--rho-k``; RHO-1's excess loss against the frozen base model)
or a ``+`` composition such as ``stoc + ewc``.

``--update full|freeze|lora`` (with ``--freeze-layers`` / ``--lora-rank``) picks the paper's update mode and
``--mesh`` shards the run over devices (``experiments/update_flags.py``); the replay corpus is always drawn from the
unchanged base model.

Output in ``--out``: ``config.json``, ``replay/`` (the corpus, reused when the run is restarted), ``metrics.jsonl``,
``checkpoints/``, ``final.json`` and ``summary.md`` (step 0 vs final). ``--preset smoke`` runs in seconds (tests).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax.numpy as jnp
import numpy as np

from cfka_jax import jsonio
from cfka_jax.data.batching import EpochBatcher, packed_batch
from cfka_jax.data.corpus import CorpusConfig, read_texts, split_heldout, tokenize_texts
from cfka_jax.data.mixing import mix_replay
from cfka_jax.data.mmlu import question_sets, read_mc
from cfka_jax.data.packing import Packed, pack
from cfka_jax.eval import multiple_choice as mc
from cfka_jax.eval.perplexity import perplexity_metric
from cfka_jax.eval.sets import combine, named_sets
from cfka_jax.continual.replay import build_replay, check_replay_dir
from cfka_jax.cli_gen import Flags
from cfka_jax.models import from_pretrained, load_tokenizer
from cfka_jax.runs.engine import (RunHooks, RunMemory, RunObjective, RunUpdate, check_loss_chunk, check_run_options,
                                  finish_run, resolve_loss_chunk, train_lm)
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.method import Method, recipe_components, resolve
from cfka_jax.runs.methods import optimizer_core, replay_documents, train_hooks, with_update
from cfka_jax.runs.presets import CORPUS, Preset, lookup, override
from cfka_jax.runs.replay import model_replay_made_from, real_replay_config
from cfka_jax.runs.specs import DTYPES, UPDATES
from cfka_jax.train.checkpoint import FINAL_CHECKPOINTS
from cfka_jax.train.optim import STATE_DTYPES
from cfka_jax.train.step import GUARDS, make_eval_logits, token_nll_loss
from cfka_jax.experiments.update_flags import (PretrainedRunFields, check_model_update, model_config, run_mesh,
                                               updated_model)

METHODS = recipe_components("corpus")
"""One-component methods of the recipe (``runs/method.RECIPES['corpus']``); ``+`` composes them."""
SUMMARY_KEYS = ("Heldout/ppl", "Original/acc", "Domain/acc", "All/acc")
OVERRIDES = {"steps": "cpt.steps", "warmup": "cpt.warmup", "lr": "cpt.peak_lr", "min_lr": "cpt.min_lr",
         "batch": "cpt.batch", "eval_every": "cpt.eval_every", "ckpt_every": "cpt.ckpt_every", "seq_len": "seq_len",
         "eval_batch": "eval_batch", "replay_sources": "replay.sources", "replay_new_tokens": "replay.new_tokens",
         "replay_samples": "replay.samples", "replay_batch": "replay.batch", "mc_max_length": "mc_max_length"}
"""Command-line overrides of the preset: flag name → dotted preset field (``runs/presets.override``)."""


LOOPED_NEEDS = frozenset({"old_keys"})
"""Context capabilities read per looped block (GPM's and the null-space update's key Grams are collected from each
block's own linears), so a method that needs one runs on looped blocks when ``--scan-layers`` is left unset."""


@dataclasses.dataclass(frozen=True)
class CorpusCPTConfig(PretrainedRunFields):
    """One ``cfka corpus-cpt`` run. ``overrides`` replaces preset fields by flag name (:data:`OVERRIDES`)."""

    data: tuple[str, ...]
    model: str
    out: str
    method: str = "naive"
    alpha: float = 0.8
    preset: str = "paper"
    overrides: tuple[tuple[str, object], ...] = ()
    mc: tuple[str, ...] = ()
    mc_original: tuple[str, ...] = ()
    mc_domain: tuple[str, ...] = ()
    domain_subjects: tuple[str, ...] = ()
    mc_dev: tuple[str, ...] = ()
    mc_shots: int = 0
    mc_limit: int | None = None
    text_field: str = "text"
    max_length: int | None = None
    overflow: str = "split"
    heldout: float = 0.02
    heldout_max_docs: int = 500
    ewc_fisher: str | None = None
    remat: bool = True
    opt_state_dtype: str | None = None
    loss_chunk: int | None = None
    final_checkpoint: str = "full"
    scan_layers: bool | None = None
    guard: str = "gradient"

    def __post_init__(self):
        super().__post_init__()
        check_run_options(self.loss_chunk, self.final_checkpoint, self.guard)
        check_loss_chunk(self.loss_chunk, self.resolved)
        if self.opt_state_dtype is not None and self.opt_state_dtype not in STATE_DTYPES:
            raise ValueError(f"--opt-state-dtype must be one of {tuple(STATE_DTYPES)}, got {self.opt_state_dtype!r}")
        if not self.data:
            raise ValueError("--data needs at least one corpus file or folder")
        lookup(CORPUS, self.preset, "corpus-cpt")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {sorted(DTYPES)}; got {self.dtype!r}")
        if not 0.0 <= self.alpha <= 1.0 or (self.resolved.mixes and not 0.0 < self.alpha < 1.0):
            raise ValueError(f"--alpha (the new-data fraction) must be in (0, 1) for replay and in [0, 1] "
                             f"otherwise, got {self.alpha}")
        if self.mc and (self.mc_original or self.mc_domain):
            raise ValueError("give either --mc (split with --domain-subjects) or --mc-original/--mc-domain")
        if self.domain_subjects and not self.mc:
            raise ValueError("--domain-subjects splits the --mc questions; --mc is missing")
        if self.mc_shots < 0 or (self.mc_shots and not self.mc_dev):
            raise ValueError("--mc-shots needs >= 0 shots and a --mc-dev file for them")
        if self.mc_limit is not None and self.mc_limit < 1:
            raise ValueError(f"--mc-limit must be >= 1, got {self.mc_limit}")
        if not 0.0 < self.heldout < 1.0 or self.heldout_max_docs < 1:
            raise ValueError(f"need 0 < --heldout < 1 and --heldout-max-docs >= 1, got {self.heldout}, "
                             f"{self.heldout_max_docs}")
        CorpusConfig(text_field=self.text_field, max_length=self.max_length or 2, overflow=self.overflow)
        self.loop(self.scale.cpt)  # validates the overrides and the loop options against the preset's batch
        if self.resolved.hooks.optimizer is not None and self.opt_state_dtype not in (None, "float32"):
            raise ValueError(f"--opt-state-dtype {self.opt_state_dtype} stores AdamW's moments; --method "
                             f"{self.method!r} trains with {self.resolved.optimizer}, whose state stays float32")
        if self.scan_layers and self.resolved.needs & LOOPED_NEEDS:
            raise ValueError(f"--method {self.method!r} reads key Grams from each block's own linears, which "
                             f"--scan-layers stacks into one module; drop --scan-layers (unset, it runs looped)")
        if "old_keys" in self.resolved.needs and not (self.mc or self.mc_original):
            raise ValueError(f"--method {self.method!r} protects the keys of the model's old knowledge, taken on the "
                             f"original-knowledge questions: give --mc-original FILE (or --mc FILE)")

    @property
    def resolved(self) -> Method:
        """``--method`` resolved once by the one registry (``runs/method.resolve``, recipe ``corpus``)."""
        return resolve(self.method, "corpus", self.options(ewc_fisher=self.ewc_fisher))

    @property
    def scale(self) -> Preset:
        """The preset with the command-line overrides (warm-up capped at the step count)."""
        unknown = sorted(set(dict(self.overrides)) - set(OVERRIDES))
        if unknown:
            raise ValueError(f"unknown preset override(s) {unknown}; known: {sorted(OVERRIDES)}")
        p = lookup(CORPUS, self.preset, "corpus-cpt")
        changes = {OVERRIDES[k]: v for k, v in self.overrides}
        steps = changes.get("cpt.steps", p.cpt.steps)
        changes.setdefault("cpt.warmup", min(p.cpt.warmup, steps) if isinstance(steps, int) else p.cpt.warmup)
        return override(p, changes)


# --------------------------------------------------------------------------------------------------- the run


def evaluator_factory(cfg: CorpusCPTConfig, heldout: Packed, sets: dict, dev: list, tokenizer):
    """``(graphdef, rest) -> evaluate(params, step)``: held-out perplexity plus MC accuracy."""
    p, compute = cfg.scale, DTYPES[cfg.dtype]

    def factory(graphdef, rest):
        ppl = perplexity_metric(make_eval_logits(graphdef, rest, compute), heldout, batch_size=p.eval_batch)
        mc_cfg = mc.MCConfig(shots=cfg.mc_shots, batch_size=p.eval_batch, max_length=p.mc_max_length)
        mc_eval = mc.mc_evaluator(graphdef, rest, sets, tokenizer, mc_cfg, dev=dev, compute_dtype=compute) \
            if sets else None
        return combine(named_sets({"Heldout": ppl}), mc_eval)

    return factory


def summary_markdown(cfg: CorpusCPTConfig, start: dict, final: dict) -> str:
    """A short report: the run, the data and replay counts, step 0 vs final for the headline metrics."""
    lines = [f"# corpus-cpt: {cfg.method}" + (f", alpha = {cfg.alpha:g}" if cfg.resolved.mixes else ""), "",
             f"- model: `{cfg.model}`; data: {', '.join(f'`{d}`' for d in cfg.data)}",
             f"- steps: {final['step']}, epochs over the mixture: {final['epochs']:.3g}",
             (f"- corpus: {final['corpus']['texts']} documents, {final['corpus']['heldout_texts']} held out; "
              f"{final['corpus']['train_docs']} training pieces ({final['mixture']['new_tokens']} tokens)"),
             (f"- replay: {final['mixture']['replay_docs']} documents, {final['mixture']['replay_tokens']} tokens, "
              f"share {final['mixture']['replay_share']:.3f}"), "",
             "| metric | step 0 | final | change |", "|---|---|---|---|"]
    for key in SUMMARY_KEYS:
        if key in start and key in final:
            a, b = start[key], final[key]
            lines.append(f"| {key} | {a:.4g} | {b:.4g} | {b - a:+.4g} |")
    return "\n".join(lines) + "\n"


def corpus_docs(cfg: CorpusCPTConfig, tokenizer) -> tuple[list, list, dict]:
    """(training pieces, held-out pieces, counts): documents are held out before they are cut into pieces."""
    corpus_cfg = CorpusConfig(text_field=cfg.text_field, max_length=cfg.max_length or cfg.scale.seq_len,
                              overflow=cfg.overflow)
    texts = read_texts(list(cfg.data), text_field=cfg.text_field)
    train_texts, held_texts = split_heldout(texts, min(cfg.heldout, cfg.heldout_max_docs / len(texts)), cfg.seed)
    train, held = tokenize_texts(train_texts, tokenizer, corpus_cfg), tokenize_texts(held_texts, tokenizer, corpus_cfg)
    stats = {"texts": len(texts), "heldout_texts": len(held_texts), "train_docs": len(train),
             "heldout_docs": len(held), "tokens": int(sum(map(len, train + held)))}
    return train, held, stats


def old_key_batches(sets: dict, tokenizer, p: Preset) -> list[dict]:
    """The old knowledge whose keys a projection protects (``nullspace``, ``gpm``): the original-knowledge questions
    (set ``Original``, else ``MC``), each question followed by its right answer, packed into up to 8 batches of
    the CPT batch size (at least one, rows repeated when there are few questions)."""
    questions = sets.get("Original") or sets.get("MC") or []
    if not questions:
        raise ValueError("no original-knowledge questions (--mc-original or --mc) for the old keys")
    eos = int(tokenizer.eos_token_id)
    docs = [np.asarray(tokenizer.encode(f"{q.question} {q.choices[q.answer]}"), np.int32) for q in questions]
    packed = pack(docs, p.seq_len, eos)
    rows, n = p.cpt.batch, max(1, min(8, packed.num_chunks // p.cpt.batch))
    return [packed_batch(packed, np.arange(i * rows, (i + 1) * rows) % packed.num_chunks) for i in range(n)]


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything a run reads, resolved and checked before ``--out`` is touched (:func:`prepare`)."""

    tokenizer: object
    train_docs: list
    held_docs: list
    corpus_stats: dict
    sets: dict
    dev: list
    model: object
    mesh: object
    made_from: dict | None


def prepare(cfg: CorpusCPTConfig) -> Inputs:
    """Resolves every input of the run and checks the options against them, writing nothing: the model's shape
    against the update options, the mesh against this machine, the tokenizer, the corpus, the question files, the
    weights, a replay corpus left in ``--out`` and the folder itself (another run's is refused).

    Raises:
      ValueError / OSError: naming the option, file or folder.
    """
    model_cfg = model_config(cfg.model)  # config.json only: before any long read
    check_model_update(cfg, model_cfg)
    mesh = run_mesh(cfg.mesh)
    tokenizer = load_tokenizer(cfg.model)
    train_docs, held_docs, corpus_stats = corpus_docs(cfg, tokenizer)
    sets = question_sets(mc=cfg.mc, domain_subjects=cfg.domain_subjects, original=cfg.mc_original,
                         domain=cfg.mc_domain, limit=cfg.mc_limit, seed=cfg.seed)
    dev = read_mc(list(cfg.mc_dev)) if cfg.mc_dev else []
    model = from_pretrained(cfg.model, dtype=DTYPES[cfg.dtype] or jnp.float32, remat=cfg.remat,
                            scan_layers=scanned(cfg, model_cfg))
    made_from = model_replay_made_from(cfg.model, tokenizer, train_docs) if cfg.resolved.mixes else None
    if made_from is not None:  # a corpus left in --out by a run of another model or corpus is refused
        check_replay_dir(pathlib.Path(cfg.out) / "replay", made_from, flag="--out")
    RunFolder(cfg.out).check(cfg, cfg.scale)  # another run's folder, or one holding other files
    return Inputs(tokenizer, train_docs, held_docs, corpus_stats, sets, dev, model, mesh, made_from)


def scanned(cfg: CorpusCPTConfig, model_cfg=None) -> bool:
    """Whether the run stacks its blocks: ``--scan-layers`` / ``--no-scan-layers``, or unset: scanned unless the
    method needs looped blocks (:data:`LOOPED_NEEDS`) or the model's blocks cannot be stacked (``model_cfg``, its
    port config, refuses ``scan_layers``: Qwen3.5's two kinds of block)."""
    if cfg.scan_layers is not None:
        return cfg.scan_layers
    if cfg.resolved.needs & LOOPED_NEEDS:
        return False
    if model_cfg is not None:
        try:
            dataclasses.replace(model_cfg, scan_layers=True)
        except ValueError:
            return False
    return True


def run(cfg: CorpusCPTConfig) -> dict:
    """Runs (or resumes) the CPT and returns the final metrics (also in ``final.json`` and ``summary.md``); every
    input is resolved (:func:`prepare`) before ``--out`` is written."""
    inputs = prepare(cfg)
    p, folder = cfg.scale, RunFolder(cfg.out)
    folder.start(cfg, p)  # after every check: a refused run leaves --out as it was
    tokenizer, train_docs, model, method = inputs.tokenizer, inputs.train_docs, inputs.model, cfg.resolved
    eos = int(tokenizer.eos_token_id)

    def sampled(kind: str):  # the documents hook's generative replay: a corpus of the base model
        corpus = build_replay(model, train_docs, tokenizer, real_replay_config(kind, p, seed=cfg.seed,
                              minhash=cfg.minhash), out_dir=folder.path / "replay", made_from=inputs.made_from,
                              flag="--out")
        return corpus.sequences, corpus.stats

    replayed = replay_documents(method, model, sampled)
    replay_docs, replay_stats, alpha = ([], {}, 1.0) if replayed is None else (*replayed, cfg.alpha)
    mixture, mix_stats = mix_replay(train_docs, replay_docs, alpha, rule="token_share", seed=cfg.seed)
    batcher = EpochBatcher(mixture, seq_len=p.seq_len, eos_id=eos, batch_size=p.cpt.batch, seed=cfg.seed + 1)
    factory = evaluator_factory(cfg, pack(inputs.held_docs, p.seq_len, eos), inputs.sets, inputs.dev, tokenizer)
    hook_stats = {}
    hooks = train_hooks(method, model, batcher, compute_dtype=DTYPES[cfg.dtype], stats=hook_stats,  # base model
                        key_batches=lambda: old_key_batches(inputs.sets, tokenizer, p))
    model, trainable = updated_model(model, cfg.update, cfg.freeze_layers, cfg.lora_rank, cfg.seed)
    hooks = with_update(hooks, model, cfg.update)
    opt = dataclasses.replace(p.cpt.optim(), state_dtype=cfg.opt_state_dtype or "float32")
    trained = train_lm(model, hooks.batch_at,
                       update=RunUpdate(opt=opt, trainable=trainable, optimizer=optimizer_core(method, opt),
                                        post_update=hooks.post_update),
                       loop=cfg.loop(p.cpt), folder=folder,
                       objective=RunObjective(loss_fn=hooks.loss_fn, penalty=hooks.penalty,
                                              penalty_args=hooks.penalty_args, compute_dtype=DTYPES[cfg.dtype]),
                       memory=RunMemory(mesh=inputs.mesh, loss_chunk=resolve_loss_chunk(cfg.loss_chunk, hooks.loss_fn),
                                        guard=cfg.guard, final_checkpoint=cfg.final_checkpoint,
                                        consume=hooks.penalty is None and hooks.loss_fn is token_nll_loss),
                       hooks=RunHooks(evaluate_factory=factory))
    memory = {"remat": cfg.remat, "scan_layers": bool(getattr(model.cfg, "scan_layers", False)),
              "loss_chunk": resolve_loss_chunk(cfg.loss_chunk, hooks.loss_fn), "guard": cfg.guard}
    extra = {"method": cfg.method, "alpha": cfg.alpha if method.mixes else None, "update": cfg.update, "memory": memory,
             "epochs": p.cpt.steps / batcher.steps_per_epoch, "mixture": mix_stats, "replay": replay_stats,
             "corpus": inputs.corpus_stats, **hook_stats}
    final = finish_run(folder, factory(trained.graphdef, trained.rest), trained, extra).final
    jsonio.write_text_atomic(folder.path / "summary.md", summary_markdown(cfg, trained.eval_at(0), final))
    return final


# ------------------------------------------------------------------------------------------------ command line


def _override_field(flag: str):
    kind = float if flag in ("lr", "min_lr") else int
    return (flag, kind | None, dataclasses.field(default=None, metadata={"help": f"preset override of "
                                                                          f"{OVERRIDES[flag]}"}))


Config = dataclasses.make_dataclass(
    "Config", [*map(_override_field, OVERRIDES), *[(name, bool, dataclasses.field(default=False))
                                                    for name in ("remat_on", "no_remat", "scan_on", "no_scan")]],
    bases=(CorpusCPTConfig,), frozen=True, kw_only=True,
    namespace={"__doc__": "``cfka corpus-cpt``'s configuration: a :class:`CorpusCPTConfig` with the preset "
                          "overrides (:data:`OVERRIDES`) as fields and the memory options as flags (``--no-remat``, "
                          "``--no-scan-layers``; ``--remat`` and ``--scan-layers`` of older command lines).",
               "__module__": __name__,
               "run_config": lambda self: _run_config(self)})
"""``cfka corpus-cpt``'s command-line config (generated: one field per preset override)."""


def _run_config(cli) -> CorpusCPTConfig:
    values = {f.name: getattr(cli, f.name) for f in dataclasses.fields(CorpusCPTConfig)}
    values["overrides"] = tuple((flag, getattr(cli, flag)) for flag in OVERRIDES if getattr(cli, flag) is not None)
    for on, off, flag in (("remat_on", "no_remat", "remat"), ("scan_on", "no_scan", "scan-layers")):
        if getattr(cli, on) and getattr(cli, off):
            raise ValueError(f"--{flag} and --no-{flag} contradict each other; give one")
    values["remat"] = not cli.no_remat
    values["scan_layers"] = False if cli.no_scan else (True if cli.scan_on else None)
    return CorpusCPTConfig(**values)


FLAGS = Flags(
    Config, prog="cfka corpus-cpt", description=__doc__.split("\n\n")[0],
    hidden=("overrides", "remat", "scan_layers"),
    names={"remat_on": "remat", "no_remat": "no-remat", "scan_on": "scan-layers", "no_scan": "no-scan-layers"},
    spaced=("data", "mc", "domain_subjects", "mc_original", "mc_domain", "mc_dev"),
    inputs=("data", "model", "mc", "mc_original", "mc_domain", "mc_dev"),
    choices={"preset": lambda: sorted(CORPUS), "dtype": lambda: sorted(DTYPES), "update": lambda: UPDATES,
             "ewc_fisher": lambda: ["code", "per_example"], "overflow": lambda: ["split", "truncate"],
             "opt_state_dtype": lambda: sorted(STATE_DTYPES), "final_checkpoint": lambda: FINAL_CHECKPOINTS,
             "guard": lambda: GUARDS},
    metavars={"data": "FILE", "model": "HF_DIR", "out": "DIR"},
    help={"accumulate": "micro-batches per optimiser step (gradient accumulation; divides the preset's batch)",
          "profile": "START:STOP: a jax.profiler trace of those steps into <out>/profile/",
          "keep_checkpoints": "how many of the newest checkpoints the run keeps (default: 2)",
          "data": ".txt/.jsonl/.parquet files or folders of them",
          "model": "local HF folder: config.json, safetensors, tokenizer", "out": "run folder",
          "method": f"one of {', '.join(METHODS)} or a '+' composition (runs/method.py)",
          "ewc_lambda": "--method ewc: strength λ (default: 1e3)",
          "ewc_batches": "--method ewc: Fisher batches (default: 8)", "ewc_fisher": "--method ewc: estimator",
          "rho_k": "--method rho1: kept fraction of tokens (default: 0.6)",
          "alpha": "new-data fraction (replay share 1 - alpha)", "preset": "scale (runs/presets.py CORPUS)",
          "mc": "MMLU-format question files/folders (split them with --domain-subjects)",
          "domain_subjects": "subjects of --mc that form the Domain set",
          "mc_original": "question files of the Original set", "mc_domain": "question files of the Domain set",
          "mc_dev": "dev questions for k-shot prompts", "mc_shots": "k of the k-shot prompts",
          "mc_limit": "at most this many (seeded) questions per set (default: all)",
          "text_field": "jsonl field / parquet column of the text",
          "max_length": "tokens per document piece (default: --seq-len)", "overflow": "long documents",
          "heldout": "fraction of documents held out for perplexity",
          "heldout_max_docs": "at most this many held-out documents",
          "minhash": "MinHash de-duplication of the replay candidates (off: keep every one, the reference)",
          "dtype": "parameter dtype", "seed": "PRNG seed", "progress": "progress bars",
          "update": "which weights train (spec §4.4, §4.6)",
          "freeze_layers": "--update freeze: blocks frozen after the embedding (default: half of the model's)",
          "lora_rank": "--update lora: adapter rank (alpha = 2 x rank)",
          "mesh": "shard the run over devices, e.g. data=2,fsdp=4 or auto",
          "remat_on": "rematerialise each block in the backward pass (the default; kept for older command lines)",
          "no_remat": "keep every block's activations for the backward pass (more memory, no second forward; by "
                      "default each block is rematerialised)",
          "opt_state_dtype": "storage dtype of the AdamW moments (bfloat16: 4 bytes per trained parameter, not 8)",
          "loss_chunk": "next-token NLL from the final hidden states, this many predicting rows at a time (no "
                        "batch x seq x vocab logits; the same loss up to float rounding); 0: full logits "
                        "(default: 256 rows for the plain NLL, full logits for another token objective)",
          "final_checkpoint": "what the finished run keeps: its resumable checkpoints, the final parameters alone "
                              "(params/; trained leaves only under LoRA/freeze), or nothing",
          "scan_on": "stack the blocks and run them under one nnx.scan (the default unless the method reads "
                     "per-block key Grams; kept for older command lines)",
          "no_scan": "run the blocks as a Python loop of separate modules (by default they are stacked under one "
                     "nnx.scan, so the backward holds one block's activations and gradients at a time)",
          "guard": "finite guard: 'gradient' decides before the update and updates in place; 'state' keeps the "
                   "previous state while checking the new one (a state-sized temporary); the same states either way",
          **{flag: f"preset override of {field}" for flag, field in OVERRIDES.items()}})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def config_from_args(argv: list[str] | None) -> CorpusCPTConfig:
    return FLAGS.parse(argv).run_config()


def main(argv: list[str] | None = None) -> int:
    return command(FLAGS.parse(argv))


def command(cli) -> int:
    """Runs CPT on the corpus and prints the final metrics: ``cfka corpus-cpt``'s run function."""
    final = run(cli.run_config())
    print(json.dumps({k: v for k, v in final.items() if k.count("/") <= 1 and not isinstance(v, dict)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
