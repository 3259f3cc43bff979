"""Bring-your-own-corpus continual pre-training of a pretrained LM, with STOC / LAMOL / Random replay (spec
cfka_stoc.md §1 "IndustryCorpus2 legal" setting, §4.7 schedule, §6.3–§6.4 real-data replay).

The paper's domain experiment (CPT of Qwen3 on a legal corpus, MMLU accuracy split into "Original" = general
subjects and "Continual"/"Domain" = law subjects; [REPORTED] STOC beats LAMOL by 1–4 points) with any local
corpus, model and MMLU-format question files:

    cfka corpus-cpt --data corpus/ --model models/Qwen2.5-0.5B --out runs/law-stoc --method stoc --alpha 0.8 \\
        --mc data/mmlu/test --domain-subjects professional_law international_law jurisprudence

Pipeline: read and tokenise the corpus (``data/corpus.py``); hold out a seeded ``--heldout`` fraction of the documents
for perplexity (before tokenising, so no piece of a held-out document is trained on); cut long documents into
``--max-length`` pieces (default: the chunk length; ``--overflow truncate`` keeps only the head instead);
build the replay corpus from the base model with the real-data settings (``continual/replay.py``,
``ReplayConfig.real``: window-sum spans of 10, 3 samples per prompt, stop at EOS, ``--replay-new-tokens``, keep
all candidates, MinHash on) using the first ``--replay-sources`` training documents as STOC sources; mix so that
replay tokens / all tokens ≈ 1 − α (:func:`replay_mixture`); train (§4.7 defaults: chunks of 256, 8000 steps,
warm-up 500, 5e-5 → 1e-5 cosine, batch 48); evaluate at step 0, every ``--eval-every`` steps and at the end:
held-out perplexity (``Heldout/ppl``) and MC accuracy (``eval/multiple_choice.py``: ``Original/acc``,
``Domain/acc``, ``All/acc``, per subject ``<set>/acc/<subject>``).

Output in ``--out``: ``config.json``, ``replay/`` (the corpus, reused when the run is restarted), ``metrics.jsonl``,
``checkpoints/``, ``final.json`` and ``summary.md`` (step 0 vs final). ``--preset smoke`` runs in seconds (tests).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.eval import multiple_choice as mc
from cfka_jax.train.losses import masked_mean_nll
from cfka_jax.train.optim import OptimConfig
from cfka_jax.runs.engine import train_lm
from cfka_jax.continual.replay import ReplayConfig, build_replay
from cfka_jax.train.step import make_eval_logits
from cfka_jax.train.loop import LoopConfig
from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.corpus import CorpusConfig, read_texts, split_heldout, tokenize_texts
from cfka_jax.data.packing import Packed, pack
from cfka_jax.models import from_pretrained, load_tokenizer
from cfka_jax.runs.biography import DTYPES, finish_run, write_config

METHODS = ("naive", "stoc", "lamol", "random")
SUMMARY_KEYS = ("Heldout/ppl", "Original/acc", "Domain/acc", "All/acc")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Sizes and cadence a preset fixes (each can be overridden on the command line)."""

    steps: int = 8000
    warmup: int = 500
    lr: float = 5e-5
    min_lr: float = 1e-5
    batch: int = 48
    seq_len: int = 256
    eval_every: int = 500
    ckpt_every: int = 500
    eval_batch: int = 16
    replay_sources: int | None = 1000
    replay_new_tokens: int = 256
    replay_samples: int = 3
    replay_batch: int = 64
    mc_max_length: int = 2048

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


PRESETS = {
    "paper": Schedule(),
    "smoke": Schedule(steps=3, warmup=1, lr=1e-3, min_lr=1e-4, batch=2, seq_len=16, eval_every=0, ckpt_every=0,
                      eval_batch=4,
                      replay_sources=3, replay_new_tokens=4, replay_samples=1, replay_batch=4, mc_max_length=256),
}


@dataclasses.dataclass(frozen=True)
class CorpusCPTConfig:
    """One ``cfka corpus-cpt`` run. ``overrides`` replaces fields of the preset's :class:`Schedule`."""

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
    minhash: bool = True
    dtype: str = "float32"
    seed: int = 0
    progress: bool = True

    def __post_init__(self):
        if not self.data:
            raise ValueError("--data needs at least one corpus file or folder")
        if self.method not in METHODS or self.preset not in PRESETS or self.dtype not in DTYPES:
            raise ValueError(f"method in {METHODS}, preset in {sorted(PRESETS)}, dtype in {sorted(DTYPES)}; got "
                             f"{self.method!r}, {self.preset!r}, {self.dtype!r}")
        if self.method != "naive" and not 0.0 < self.alpha < 1.0:
            raise ValueError(f"replay needs a new-data fraction 0 < alpha < 1, got {self.alpha}")
        if self.mc and (self.mc_original or self.mc_domain):
            raise ValueError("give either --mc (split with --domain-subjects) or --mc-original/--mc-domain")
        if self.domain_subjects and not self.mc:
            raise ValueError("--domain-subjects splits the --mc questions; --mc is missing")
        if self.mc_shots < 0 or (self.mc_shots and not self.mc_dev):
            raise ValueError("--mc-shots needs >= 0 shots and a --mc-dev file for them")
        if self.mc_limit is not None and self.mc_limit < 1:
            raise ValueError(f"mc_limit must be >= 1, got {self.mc_limit}")
        if not 0.0 < self.heldout < 1.0 or self.heldout_max_docs < 1:
            raise ValueError(f"need 0 < heldout < 1 and heldout_max_docs >= 1, got {self.heldout}, "
                             f"{self.heldout_max_docs}")
        CorpusConfig(text_field=self.text_field, max_length=self.max_length or 2, overflow=self.overflow)
        self.schedule  # noqa: B018 (validates the overrides)

    @property
    def schedule(self) -> Schedule:
        p = dataclasses.replace(PRESETS[self.preset], **dict(self.overrides))
        if p.steps < 1 or p.batch < 1 or p.seq_len < 2 or p.eval_every < 0 or p.ckpt_every < 0:
            raise ValueError(f"invalid schedule {p}")
        return dataclasses.replace(p, warmup=min(p.warmup, p.steps))


# ------------------------------------------------------------------------------------------------- pure pieces


def replay_mixture(new_docs: list[np.ndarray], replay_docs: list[np.ndarray], alpha: float, *,
                   seed: int) -> tuple[list[np.ndarray], dict]:
    """The training documents: all new ones plus replay drawn so that replay tokens / all tokens ≈ 1 − α.

    With N new tokens the replay target is R* = N (1 − α) / α. Replay documents are taken in successive seeded
    permutations (each pass uses every replay document once, so documents repeat only when R* exceeds the replay
    corpus) and the prefix whose token count is nearest to R* is kept. The result is new + replay; the batcher
    shuffles it every epoch.

    Returns:
      (documents, stats) with stats ``alpha``, ``new_tokens``, ``replay_tokens``, ``replay_share`` (achieved
      1 − α), ``replay_docs`` (drawn, repeats counted), ``replay_unique`` and ``replay_passes``.

    Raises:
      ValueError: α outside (0, 1], no new documents, or α < 1 without replay tokens.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha (the new-data fraction) must be in (0, 1], got {alpha}")
    if not new_docs:
        raise ValueError("replay_mixture needs new documents")
    new_tokens = int(sum(len(d) for d in new_docs))
    target = new_tokens * (1.0 - alpha) / alpha
    lens = np.array([len(d) for d in replay_docs], np.int64)
    if target > 0 and lens.sum() == 0:
        raise ValueError(f"alpha = {alpha} < 1 needs replay documents with tokens, got {len(replay_docs)} documents")
    picks = np.zeros(0, np.int64)
    if target > 0:
        passes = math.ceil(target / lens.sum()) + 1
        rng = np.random.default_rng([seed, 3])
        order = np.concatenate([rng.permutation(len(replay_docs)) for _ in range(passes)])
        csum = np.concatenate([[0], np.cumsum(lens[order])])
        k = int(np.searchsorted(csum, target))  # first prefix reaching the target
        k = k - 1 if k > 0 and target - csum[k - 1] < csum[k] - target else k
        picks = order[:k]
    replay = [replay_docs[i] for i in picks]
    replay_tokens = int(lens[picks].sum())
    stats = {"alpha": alpha, "new_tokens": new_tokens, "replay_tokens": replay_tokens,
             "replay_share": replay_tokens / (new_tokens + replay_tokens), "replay_docs": len(picks),
             "replay_unique": len(set(picks.tolist())),
             "replay_passes": len(picks) / len(replay_docs) if len(replay_docs) else 0.0}
    return list(new_docs) + replay, stats


def perplexity_evaluator(logits_fn, packed: Packed, *, batch_size: int):
    """``ppl(params) -> {'nll', 'ppl', 'tokens'}`` on ``packed``.

    nll = Σ_targets −log p(token | chunk prefix) / #targets over the pack's ``loss_mask`` (every token but chunk
    starts and document starts), ppl = exp(nll). Rows are forwarded with their positions and no attention mask, as
    in training; the last batch is filled with rows of zero weight. One jitted function of (params, batch).
    """

    @jax.jit
    def nll_and_count(params, batch, mask_BS):
        return masked_mean_nll(logits_fn(params, batch), batch["tokens"], mask_BS)

    def ppl(params) -> dict:
        total, count = 0.0, 0.0
        for lo in range(0, packed.num_chunks, batch_size):
            rows = slice(lo, min(lo + batch_size, packed.num_chunks))
            pad = ((0, batch_size - (rows.stop - rows.start)), (0, 0))
            batch = {"tokens": jnp.asarray(np.pad(packed.tokens[rows], pad), jnp.int32),
                     "positions": jnp.asarray(np.pad(packed.positions[rows], pad), jnp.int32)}
            mean, n = nll_and_count(params, batch, jnp.asarray(np.pad(packed.loss_mask[rows], pad), jnp.float32))
            total, count = total + float(mean) * float(n), count + float(n)
        nll = total / max(count, 1.0)
        return {"nll": nll, "ppl": math.exp(nll), "tokens": int(count)}

    return ppl


# --------------------------------------------------------------------------------------------------- the run


def mc_sets(cfg: CorpusCPTConfig) -> tuple[dict, list]:
    """({set name: questions}, dev questions) from the MC flags (at most ``mc_limit`` seeded questions per set)."""
    if cfg.mc:
        qs = mc.read_mc(list(cfg.mc))
        sets = mc.split_by_subjects(qs, cfg.domain_subjects) if cfg.domain_subjects else {"MC": qs}
    else:
        sets = {name: mc.read_mc(list(files)) for name, files in (("Original", cfg.mc_original),
                                                                  ("Domain", cfg.mc_domain)) if files}
    sets = {k: v for k, v in sets.items() if v}  # e.g. no Original questions left after the subject split
    if cfg.mc_limit is not None:
        rng = np.random.default_rng([cfg.seed, 4])
        sets = {k: [v[i] for i in sorted(rng.choice(len(v), min(cfg.mc_limit, len(v)), replace=False))]
                for k, v in sets.items()}
    return sets, (mc.read_mc(list(cfg.mc_dev)) if cfg.mc_dev else [])


def evaluator_factory(cfg: CorpusCPTConfig, heldout: Packed, sets: dict, dev: list, tokenizer):
    """``(graphdef, rest) -> evaluate(params, step)``: held-out perplexity plus MC accuracy."""
    p, compute = cfg.schedule, DTYPES[cfg.dtype]

    def factory(graphdef, rest):
        ppl = perplexity_evaluator(make_eval_logits(graphdef, rest, compute), heldout, batch_size=p.eval_batch)
        mc_cfg = mc.MCConfig(shots=cfg.mc_shots, batch_size=p.eval_batch, max_length=p.mc_max_length)
        mc_eval = mc.mc_evaluator(graphdef, rest, sets, tokenizer, mc_cfg, dev=dev, compute_dtype=compute) \
            if sets else None

        def evaluate(params, step):
            out = {f"Heldout/{k}": v for k, v in ppl(params).items()}
            return out | (mc_eval(params, step) if mc_eval is not None else {})

        return evaluate

    return factory


def replay_config(cfg: CorpusCPTConfig) -> ReplayConfig:
    p = cfg.schedule
    return ReplayConfig.real(cfg.method, num_source_seqs=p.replay_sources, max_new_tokens=p.replay_new_tokens,
                             max_len=p.seq_len, num_samples=p.replay_samples, batch_size=p.replay_batch,
                             seed=cfg.seed, **({} if cfg.minhash else {"minhash": None}))


def summary_markdown(cfg: CorpusCPTConfig, start: dict, final: dict) -> str:
    """A short report: the run, the data and replay counts, step 0 vs final for the headline metrics."""
    lines = [f"# corpus-cpt: {cfg.method}" + (f", alpha = {cfg.alpha:g}" if cfg.method != "naive" else ""), "",
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
    corpus_cfg = CorpusConfig(text_field=cfg.text_field, max_length=cfg.max_length or cfg.schedule.seq_len,
                              overflow=cfg.overflow)
    texts = read_texts(list(cfg.data), text_field=cfg.text_field)
    train_texts, held_texts = split_heldout(texts, min(cfg.heldout, cfg.heldout_max_docs / len(texts)), cfg.seed)
    train, held = tokenize_texts(train_texts, tokenizer, corpus_cfg), tokenize_texts(held_texts, tokenizer, corpus_cfg)
    stats = {"texts": len(texts), "heldout_texts": len(held_texts), "train_docs": len(train),
             "heldout_docs": len(held), "tokens": int(sum(map(len, train + held)))}
    return train, held, stats


def run(cfg: CorpusCPTConfig) -> dict:
    """Runs (or resumes) the CPT and returns the final metrics (also in ``final.json`` and ``summary.md``)."""
    p, out = cfg.schedule, pathlib.Path(cfg.out)
    write_config(cfg, out, p)
    tokenizer = load_tokenizer(cfg.model)
    train_docs, held_docs, corpus_stats = corpus_docs(cfg, tokenizer)
    sets, dev = mc_sets(cfg)  # read before the (long) replay build, so a bad question file fails fast
    eos = int(tokenizer.eos_token_id)
    model = from_pretrained(cfg.model, dtype=DTYPES[cfg.dtype] or jnp.float32)
    replay_docs, replay_stats, alpha = [], {}, 1.0
    if cfg.method != "naive":
        corpus = build_replay(model, train_docs, tokenizer, replay_config(cfg), out_dir=out / "replay")
        replay_docs, replay_stats, alpha = corpus.sequences, corpus.stats, cfg.alpha
    mixture, mix_stats = replay_mixture(train_docs, replay_docs, alpha, seed=cfg.seed)
    batcher = EpochBatcher(mixture, seq_len=p.seq_len, eos_id=eos, batch_size=p.batch, seed=cfg.seed + 1)
    factory = evaluator_factory(cfg, pack(held_docs, p.seq_len, eos), sets, dev, tokenizer)
    opt = OptimConfig(peak_lr=p.lr, min_lr=p.min_lr, warmup_steps=p.warmup, total_steps=p.steps)
    loop = LoopConfig(steps=p.steps, log_every=max(1, min(10, p.steps)), eval_every=p.eval_every,
                      ckpt_every=p.ckpt_every, progress=cfg.progress)
    state, graphdef, rest = train_lm(model, batcher, opt=opt, loop=loop, out_dir=out, evaluate_factory=factory,
                                     compute_dtype=DTYPES[cfg.dtype])
    extra = {"method": cfg.method, "alpha": None if cfg.method == "naive" else cfg.alpha,
             "epochs": p.steps / batcher.steps_per_epoch, "mixture": mix_stats, "replay": replay_stats,
             "corpus": corpus_stats}
    final = finish_run(out, factory(graphdef, rest), state, extra)
    start = _eval_at(out / "metrics.jsonl", 0)
    (out / "summary.md").write_text(summary_markdown(cfg, start, final))
    return final


def _eval_at(metrics: pathlib.Path, step: int) -> dict:
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return next((r for r in records if r.get("kind") == "eval" and r["step"] == step), {})


# ------------------------------------------------------------------------------------------------ command line


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cfka corpus-cpt", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", required=True, help=".txt/.jsonl/.parquet files or folders of them")
    ap.add_argument("--model", required=True, help="local HF folder: config.json, safetensors, tokenizer")
    ap.add_argument("--out", required=True, help="run folder")
    ap.add_argument("--method", default="naive", choices=METHODS)
    ap.add_argument("--alpha", type=float, default=0.8, help="new-data fraction (replay share 1 - alpha)")
    ap.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    ap.add_argument("--mc", nargs="+", default=[], help="MMLU-format question files/folders (split them with "
                    "--domain-subjects)")
    ap.add_argument("--domain-subjects", nargs="+", default=[], help="subjects of --mc that form the Domain set")
    ap.add_argument("--mc-original", nargs="+", default=[], help="question files of the Original set")
    ap.add_argument("--mc-domain", nargs="+", default=[], help="question files of the Domain set")
    ap.add_argument("--mc-dev", nargs="+", default=[], help="dev questions for k-shot prompts")
    ap.add_argument("--mc-shots", type=int, default=0)
    ap.add_argument("--mc-limit", type=int, default=None, help="at most this many (seeded) questions per set")
    ap.add_argument("--text-field", default="text", help="jsonl field / parquet column of the text")
    ap.add_argument("--max-length", type=int, default=None, help="tokens per document piece (default: --seq-len)")
    ap.add_argument("--overflow", default="split", choices=["split", "truncate"], help="long documents")
    ap.add_argument("--heldout", type=float, default=0.02, help="fraction of documents held out for perplexity")
    ap.add_argument("--heldout-max-docs", type=int, default=500)
    ap.add_argument("--no-minhash", action="store_true", help="keep every replay candidate (reference)")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    for f in dataclasses.fields(Schedule):
        kind = float if f.type in ("float", float) else int
        ap.add_argument("--" + f.name.replace("_", "-"), type=kind, default=None, help=f"preset override of {f.name}")
    return ap


def config_from_args(argv: list[str] | None) -> CorpusCPTConfig:
    a = build_parser().parse_args(argv)
    overrides = tuple((f.name, getattr(a, f.name)) for f in dataclasses.fields(Schedule)
                      if getattr(a, f.name) is not None)
    return CorpusCPTConfig(
        data=tuple(a.data), model=a.model, out=a.out, method=a.method, alpha=a.alpha, preset=a.preset,
        overrides=overrides, mc=tuple(a.mc), mc_original=tuple(a.mc_original), mc_domain=tuple(a.mc_domain),
        domain_subjects=tuple(a.domain_subjects), mc_dev=tuple(a.mc_dev), mc_shots=a.mc_shots, mc_limit=a.mc_limit,
        text_field=a.text_field, max_length=a.max_length, overflow=a.overflow, heldout=a.heldout,
        heldout_max_docs=a.heldout_max_docs, minhash=not a.no_minhash, dtype=a.dtype, seed=a.seed,
        progress=not a.no_progress)


def main(argv: list[str] | None = None) -> int:
    final = run(config_from_args(argv))
    print(json.dumps({k: v for k, v in final.items() if k.count("/") <= 1 and not isinstance(v, dict)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
