"""KnowEdit continual pre-training of a pretrained LM with Naive, LAMOL and STOC replay (spec cfka_stoc.md §4.7,
§5.3, §6.3, §8, §9 KnowEdit table).

Reproduces the paper's KnowEdit comparison (Qwen2.5-0.5B: average soft token accuracy on the Original = locality
facts and the Continual = edited facts after CPT on the edit facts):

    cfka knowedit --data data/zsre/test.json --model models/Qwen2.5-0.5B --out runs/knowedit-zsre \\
        --methods naive,lamol,stoc --alpha 0.5

Pipeline: load ``test.json`` (``data/knowedit.py``; without ``--augmentation`` the training texts are the prompts
and their rephrases themselves, not the reference's LLM rewrites), build each replay corpus once from the base
model (``continual/replay.py``, real-data settings of §6.3: questions + EOS as STOC sources, window-sum spans of
10, 3 samples, stop at EOS, 256 tokens, keep all), mix at new-data fraction α (``--mixing alpha``; ``code_5050``
reproduces the reference's 50/50 bug), and train every method from the base weights (``--methods``: names of the one
method registry, ``runs/method.py``: also ``ewc``, ``rho1`` and ``+`` compositions such as ``stoc + ewc``; their
hooks are ``runs/methods.train_hooks``) (§4.7: chunks of 256, 8000
steps, warm-up 500, 5e-5 → 1e-5 cosine, batch 48 — the reference's Qwen 12 × 4 accumulation is run as one batch
of 48). Fluency (``eval/fluency.py``) is logged as ``Original/fluency`` and ``Continual/fluency`` at step 0,
every eval interval and the end.

Output: ``<out>/replay-<kind>/`` (corpora), one run folder per method (``config.json``, ``metrics.jsonl``,
``checkpoints/``, ``final.json``), and ``<out>/table.md`` + ``table.json``: final-step Fluency × 100 per method
beside the paper's Qwen2.5-0.5B numbers for the same dataset. ``--preset smoke`` runs in seconds (tests).
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax.numpy as jnp

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
from cfka_jax.continual.replay import build_replay, check_replay_dir
from cfka_jax.data import knowedit as ke
from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.mixing import mix_replay
from cfka_jax.eval.fluency import MODES as FLUENCY_MODES
from cfka_jax.eval.fluency import fluency_evaluator, fluency_layout
from cfka_jax.models import from_pretrained, load_tokenizer
from cfka_jax.runs.engine import (RunHooks, RunMemory, RunObjective, RunUpdate, check_loss_chunk, check_run_options,
                                  finish_run, resolve_loss_chunk, train_lm)
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.method import Method, recipe_components, resolve
from cfka_jax.runs.methods import optimizer_core, replay_documents, train_hooks, with_update
from cfka_jax.runs.presets import KNOWEDIT, Preset, lookup, override
from cfka_jax.runs.replay import model_replay_made_from, real_replay_config
from cfka_jax.runs.specs import DTYPES, UPDATES
from cfka_jax.train.checkpoint import FINAL_CHECKPOINTS
from cfka_jax.train.optim import STATE_DTYPES
from cfka_jax.experiments.update_flags import (PretrainedRunFields, check_model_update, model_config, run_mesh,
                                               updated_model)

METHODS = ("naive", "lamol", "stoc")
"""The default methods (the paper's table); any name of ``runs/method.RECIPES['knowedit']`` runs too."""
SETS = ("Original", "Continual")
# §9 [REPORTED]: Qwen2.5-0.5B average soft token accuracy × 100, (Original, Continual), keyed (method, alpha).
PAPER = {
    "zsre": {("naive", None): (34.58, 63.28), ("lamol", 0.5): (37.54, 58.37), ("stoc", 0.5): (37.12, 62.26),
             ("stoc", 0.8): (37.47, 62.59)},
    "wiki_bio": {("naive", None): (32.33, 35.50), ("lamol", 0.5): (31.29, 34.49), ("stoc", 0.5): (35.57, 35.46),
                 ("stoc", 0.8): (35.28, 33.16)},
    "wiki_recent": {("naive", None): (19.28, 28.42), ("lamol", 0.5): (20.48, 27.19), ("stoc", 0.5): (21.40, 28.75),
                    ("stoc", 0.8): (20.12, 27.34)},
}


MIXING_RULES = {"alpha": "token_share", "code_5050": "code_5050"}
"""``--mixing`` → ``data/mixing.mix_replay`` rule: ``alpha`` mixes at new-data fraction α by tokens."""


@dataclasses.dataclass(frozen=True)
class KnowEditRun(PretrainedRunFields):
    """One ``cfka knowedit`` invocation (decisions #8, #12, #21, #25, #26 as fields)."""

    data: str
    model: str
    out: str
    methods: tuple[str, ...] = METHODS
    alpha: float = 0.5
    mixing: str = "alpha"
    preset: str = "paper"
    steps: int | None = None
    kind: str | None = None
    wrap_strings: bool = True
    augmentation: str | None = None
    aug_align: str = "per_truth"
    fluency_mode: str = "packed"
    eval_stride: int = 1
    remat: bool | None = None
    opt_state_dtype: str | None = None
    loss_chunk: int | None = None
    final_checkpoint: str = "full"

    def __post_init__(self):
        super().__post_init__()
        check_run_options(self.loss_chunk, self.final_checkpoint)
        if self.opt_state_dtype is not None and self.opt_state_dtype not in STATE_DTYPES:
            raise ValueError(f"--opt-state-dtype must be one of {tuple(STATE_DTYPES)}, got {self.opt_state_dtype!r}")
        ke.KnowEditConfig(self.kind, self.wrap_strings, self.aug_align)  # validates those three
        if self.mixing not in MIXING_RULES:
            raise ValueError(f"--mixing must be one of {sorted(MIXING_RULES)}, got {self.mixing!r}")
        if not self.methods or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct names (e.g. {','.join(METHODS)}), got {self.methods}")
        for name in self.methods:
            try:
                self.resolved(name)
            except ValueError as e:
                raise ValueError(f"--methods {name!r}: {e}") from e
            check_loss_chunk(self.loss_chunk, self.resolved(name), flag="--methods")
            if self.resolved(name).hooks.optimizer is not None and self.opt_state_dtype not in (None, "float32"):
                raise ValueError(f"--opt-state-dtype {self.opt_state_dtype} stores AdamW's moments; --methods "
                                 f"{name!r} trains with {self.resolved(name).optimizer}, whose state stays float32")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        lookup(KNOWEDIT, self.preset, "KnowEdit")
        if self.dtype not in DTYPES or self.fluency_mode not in FLUENCY_MODES:
            raise ValueError(f"dtype in {sorted(DTYPES)}, fluency_mode in {FLUENCY_MODES}; got {self.dtype!r}, "
                             f"{self.fluency_mode!r}")
        if (self.steps is not None and self.steps < 1) or self.eval_stride < 1:
            raise ValueError(f"steps and eval_stride must be >= 1, got {self.steps}, {self.eval_stride}")
        self.loop(self.scale.cpt)  # the loop options against the preset's batch

    @property
    def scale(self) -> Preset:
        """The preset with ``steps`` overridden (warm-up and evaluation interval capped at the step count)."""
        p = KNOWEDIT[self.preset]
        steps = self.steps or p.cpt.steps
        return override(p, {"cpt.steps": steps, "cpt.warmup": min(p.cpt.warmup, steps),
                            "cpt.eval_every": min(p.cpt.eval_every, steps)})

    def resolved(self, name: str) -> Method:
        """A method of ``methods`` resolved once by the one registry (``runs/method.resolve``, recipe knowedit)."""
        return resolve(name, "knowedit", self.options())

    def run_name(self, method: str) -> str:
        """``<method>`` / ``<method>-a<alpha>[-code5050]`` for a replay method (spaces dropped), with
        ``-<update>`` unless the update is full."""
        suffix = "" if self.update == "full" else f"-{self.update}"
        if not self.resolved(method).mixes:
            return method.replace(" ", "") + suffix
        return (f"{method.replace(' ', '')}-a{self.alpha:g}" + ("-code5050" if self.mixing == "code_5050" else "")
                + suffix)


@dataclasses.dataclass(frozen=True)
class Data:
    """The tokenised inputs shared by every method."""

    kind: str
    new_docs: list
    questions: list
    tests: dict  # set name -> TestSequences
    eos_id: int


def load_data(cfg: KnowEditRun, tokenizer) -> Data:
    facts = ke.load_knowedit(cfg.data, kind=cfg.kind, wrap_strings=cfg.wrap_strings)
    pairs = (ke.augmented_pairs(cfg.augmentation, facts.continual, align=cfg.aug_align) if cfg.augmentation
             else ke.training_pairs(facts.continual))
    new_docs, _ = ke.encode_pairs(pairs, tokenizer)
    tests = {"Original": ke.encode_test(facts.original, tokenizer),
             "Continual": ke.encode_test(facts.continual, tokenizer)}
    return Data(facts.kind, new_docs, ke.question_docs(facts.continual, tokenizer), tests,
                int(tokenizer.eos_token_id))


def build_corpora(cfg: KnowEditRun, data: Data, tokenizer) -> dict:
    """kind -> replay sequences, built from the base model (or reused from ``<out>/replay-<kind>``)."""
    kinds = sorted({cfg.resolved(m).replay for m in cfg.methods if cfg.resolved(m).mixes})
    if not kinds:
        return {}
    made_from = model_replay_made_from(cfg.model, tokenizer, data.questions)  # a reused corpus must record the same
    for kind in kinds:  # checked before the model is read or anything sampled
        check_replay_dir(pathlib.Path(cfg.out) / f"replay-{kind}", made_from, flag="--out")
    model = from_pretrained(cfg.model, dtype=DTYPES[cfg.dtype] or jnp.float32)
    out = {}
    for kind in kinds:
        rcfg = real_replay_config(kind, cfg.scale, seed=cfg.seed, minhash=cfg.minhash)
        corpus = build_replay(model, data.questions, tokenizer, rcfg, out_dir=pathlib.Path(cfg.out) / f"replay-{kind}",
                              made_from=made_from, flag="--out")
        print(f"[replay {kind}] {corpus.stats['num_prompts']} prompts, {corpus.stats['num_candidates']} candidates, "
              f"MinHash dropped {corpus.stats['minhash_dropped']}, {len(corpus.sequences)} sequences")
        out[kind] = corpus.sequences
    return out


def train_method(method: str, cfg: KnowEditRun, data: Data, replay: dict, layouts: dict, mesh=None) -> dict:
    """CPT of the base model on the new data (mixed with ``replay[method]`` unless naive); returns final.json."""
    p, folder = cfg.scale, RunFolder(pathlib.Path(cfg.out) / cfg.run_name(method))
    folder.start(cfg, p)
    docs, mixture, resolved = data.new_docs, {}, cfg.resolved(method)
    replayed = replay_documents(resolved, None, lambda kind: (replay[kind], {}))  # corpora built up front
    if replayed is not None:
        docs, mixture = mix_replay(data.new_docs, replayed[0], cfg.alpha, rule=MIXING_RULES[cfg.mixing],
                                   seed=cfg.seed)
    batcher = EpochBatcher(docs, seq_len=p.seq_len, eos_id=data.eos_id, batch_size=p.cpt.batch, seed=cfg.seed + 1)
    model = from_pretrained(cfg.model, dtype=DTYPES[cfg.dtype] or jnp.float32, remat=cfg.remat is not False)
    hooks = train_hooks(resolved, model, batcher, compute_dtype=DTYPES[cfg.dtype])  # from the base model
    model, trainable = updated_model(model, cfg.update, cfg.freeze_layers, cfg.lora_rank, cfg.seed)
    hooks = with_update(hooks, model, cfg.update)
    factory = lambda g, r: fluency_evaluator(g, r, layouts, batch_size=p.eval_batch,  # noqa: E731
                                             stride=cfg.eval_stride, compute_dtype=DTYPES[cfg.dtype])
    opt = dataclasses.replace(p.cpt.optim(), state_dtype=cfg.opt_state_dtype or "float32")
    run = train_lm(model, hooks.batch_at,
                   update=RunUpdate(opt=opt, trainable=trainable, optimizer=optimizer_core(resolved, opt)),
                   loop=cfg.loop(p.cpt), folder=folder,
                   objective=RunObjective(loss_fn=hooks.loss_fn, penalty=hooks.penalty, penalty_args=hooks.penalty_args,
                                          compute_dtype=DTYPES[cfg.dtype]),
                   memory=RunMemory(mesh=mesh, loss_chunk=resolve_loss_chunk(cfg.loss_chunk, hooks.loss_fn),
                                    final_checkpoint=cfg.final_checkpoint),
                   hooks=RunHooks(evaluate_factory=factory))
    extra = {"method": method, "alpha": cfg.alpha if resolved.mixes else None, "update": cfg.update,
             "train_docs": len(docs),
             "new_docs": len(data.new_docs), "epochs": p.cpt.steps / batcher.steps_per_epoch, "mixture": mixture}
    return finish_run(folder, factory(run.graphdef, run.rest), run, extra).final


def table(kind: str, results: dict) -> str:
    """Markdown: final Fluency × 100 per run beside the paper's Qwen2.5-0.5B numbers (– where it has none)."""
    lines = ["| run | Original | Continual | paper Original | paper Continual |", "|---|---|---|---|---|"]
    for name, final in results.items():
        paper = PAPER.get(kind, {}).get((final["method"], final["alpha"]))
        ours = [f"{100 * final[f'{s}/fluency']:.2f}" for s in SETS]
        theirs = [f"{v:.2f}" for v in paper] if paper else ["–", "–"]
        lines.append(f"| {name} | " + " | ".join(ours + theirs) + " |")
    return "\n".join(lines) + "\n"


def prepare(cfg: KnowEditRun):
    """``(tokenizer, data, layouts, mesh)``, every input resolved and every option checked against them before
    ``--out`` is touched: each method's run folder (another run's is refused), the model's shape against the update
    options, the mesh against this machine, the tokenizer and the KnowEdit file.

    Raises:
      ValueError / OSError: naming the option, file or folder.
    """
    p = cfg.scale
    for method in cfg.methods:
        RunFolder(pathlib.Path(cfg.out) / cfg.run_name(method)).check(cfg, p)
    check_model_update(cfg, model_config(cfg.model))  # config.json only: before any long read
    mesh = run_mesh(cfg.mesh)
    tokenizer = load_tokenizer(cfg.model)
    data = load_data(cfg, tokenizer)
    layouts = {name: fluency_layout(list(t.docs), t.idx, mode=cfg.fluency_mode, seq_len=p.seq_len,
                                    eos_id=data.eos_id) for name, t in data.tests.items()}
    return tokenizer, data, layouts, mesh


def run(cfg: KnowEditRun) -> dict:
    """Every method of ``cfg``; writes ``table.md``/``table.json`` and returns {run name: final metrics}; nothing is
    written before every input is resolved (:func:`prepare`, and the replay corpora's checks)."""
    tokenizer, data, layouts, mesh = prepare(cfg)
    replay = build_corpora(cfg, data, tokenizer)
    results = {cfg.run_name(m): train_method(m, cfg, data, replay, layouts, mesh) for m in cfg.methods}
    out = pathlib.Path(cfg.out)
    md = f"KnowEdit {data.kind}, {cfg.model}: average soft token accuracy × 100 (final step)\n\n" + table(
        data.kind, results)
    jsonio.write_text_atomic(out / "table.md", md)
    jsonio.write_json_atomic(out / "table.json", results, indent=1, newline=False)
    print(md)
    return results


FLAGS = Flags(
    KnowEditRun, prog="cfka knowedit", description=__doc__.split("\n\n")[0], inputs=("data", "model", "augmentation"),
    choices={"mixing": lambda: sorted(MIXING_RULES), "preset": lambda: sorted(KNOWEDIT), "kind": lambda: ke.KINDS,
             "aug_align": lambda: ke.ALIGNS, "fluency_mode": lambda: FLUENCY_MODES, "dtype": lambda: sorted(DTYPES),
             "update": lambda: UPDATES, "opt_state_dtype": lambda: sorted(STATE_DTYPES),
             "final_checkpoint": lambda: FINAL_CHECKPOINTS},
    metavars={"data": "FILE", "model": "HF_DIR", "out": "DIR", "methods": "METHOD,...", "augmentation": "FILE"},
    help={"accumulate": "micro-batches per optimiser step (gradient accumulation; divides the preset's batch)",
          "profile": "START:STOP: a jax.profiler trace of those steps into <out>/profile/",
          "keep_checkpoints": "how many of the newest checkpoints the run keeps (default: 2)",
          "data": "KnowEdit test.json (ZsRE, WikiBio or Wiki_recent)",
          "model": "local HF folder: config.json, safetensors, tokenizer",
          "out": "output folder (replay corpora, one run folder per method, table)",
          "methods": "comma-separated method names: " + ",".join(recipe_components("knowedit"))
                     + " or '+' compositions (runs/method.py)",
          "ewc_lambda": "ewc: strength λ (default: 1e3)", "ewc_batches": "ewc: Fisher batches (default: 8)",
          "rho_k": "rho1: kept fraction of target tokens (default: 0.6)",
          "alpha": "new-data fraction of the replay mixture",
          "mixing": "alpha: new-data fraction by tokens; code_5050: the reference's 50/50 bug",
          "preset": "scale (runs/presets.py KNOWEDIT)", "steps": "override the preset's step count (default: the "
          "preset's)", "kind": "dataset kind (default: detected)",
          "wrap_strings": "string answers wrapped as one item (off: iterate them by character, the reference)",
          "augmentation": "JSON of LLM rewrites per (fact, truth) query",
          "aug_align": "how the rewrites align with the queries", "fluency_mode": "how Fluency is measured",
          "eval_stride": "24: the reference's 1/24 chunk subsample",
          "minhash": "MinHash de-duplication of the replay candidates (off: keep every one, the reference)",
          "dtype": "parameter dtype", "seed": "PRNG seed", "progress": "progress bars",
          "update": "which weights train (spec §4.4, §4.6)",
          "freeze_layers": "--update freeze: blocks frozen after the embedding (default: half of the model's)",
          "lora_rank": "--update lora: adapter rank (alpha = 2 x rank)",
          "mesh": "shard the run over devices, e.g. data=2,fsdp=4 or auto",
          "remat": "False: keep every block's activations for the backward pass (more memory, no second forward); "
                   "unset or True: rematerialise each block (the default)",
          "opt_state_dtype": "storage dtype of the AdamW moments (bfloat16: 4 bytes per trained parameter, not 8; "
                             "default: float32)",
          "loss_chunk": "next-token NLL from the final hidden states, this many predicting rows at a time (no "
                        "batch x seq x vocab logits; the same loss up to float rounding); 0: full logits "
                        "(default: 256 rows for the plain NLL, full logits for another token objective)",
          "final_checkpoint": "what each finished run keeps: its resumable checkpoints, the final parameters alone "
                              "(params/; trained leaves only under LoRA/freeze), or nothing"})
"""The command line generated from :class:`KnowEditRun` (``cfka_jax/cli_gen.py``)."""


def main(argv: list[str] | None = None) -> int:
    return command(FLAGS.parse(argv))


def command(cfg: KnowEditRun) -> int:
    """Trains every method and writes the table: ``cfka knowedit``'s run function."""
    run(cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
