"""Generative replay corpora: STOC, Random and LAMOL (spec cfka_stoc.md §6, §7; decisions #16–#24).

All three kinds share one pipeline; only the prompts differ:

1. prompts: ``stoc`` — snippets of the first ``num_source_seqs`` new-data documents chosen by the pre-CPT model's
   attention (``continual/stoc.py``: token score s_j, ``token_argmax`` or ``window_sum`` rule, ``top_k`` spans);
   ``random`` — the same number of spans of the same length at uniformly random positions; ``lamol`` — the EOS
   token alone (unconditional samples, the analogue of LAMOL's [GEN] token), ``top_k`` prompts per source
   document so the candidate count matches STOC's. Controls that separate attention from position (issue #23),
   same count and length: ``first_k`` — the first ``top_k`` spans of each source ([0, span), [span, 2·span), …:
   what ÷ (j + 1) picks when attention plays no part); ``random_no_eos`` — ``random`` without spans holding EOS;
   ``random_vocab`` — spans of token ids drawn uniformly from the vocabulary without special tokens.
2. sampling: ``num_samples`` continuations per prompt from the pre-CPT model (KV-cached, ``models/generate.py``):
   temperature 1.0 over the full vocabulary (``sampler_top_k = 20`` gives original LAMOL's top-k sampler),
   repetition penalty 1.05 in vLLM semantics, ``max_new_tokens``; the synthetic reference samples through EOS
   (``ignore_eos``), the real one stops at it. A candidate is prompt + continuation, cut to ``max_len`` tokens.
   Row r of the sampling uses the key ``fold_in(key(seed), r)``, so candidates do not depend on the batch size.
3. MinHash LSH deduplication of the decoded candidates (``continual/dedup.py``; ``minhash = None`` turns it off,
   as the released code has none); the number dropped is recorded.
4. budget: ``tokens`` (synthetic reference) draws k = min(budget_tokens // max_len, #kept) candidates **with
   replacement**, budget_tokens being the token count of one copy of the new data; ``all`` keeps every kept
   candidate (real reference).

The corpus is saved (``save_replay``) as ``prompts.jsonl`` (source document, span, ids, text of every prompt),
``candidates/`` and ``replay/`` (``datasets`` Arrow: every candidate with its text, prompt and MinHash verdict;
the drawn replay sequences), ``stats.json`` (counts, wall times, throughput) and ``config.json`` (written last,
atomically: the build config and, under ``made_from``, what the corpus was sampled from — ``cfka_jax.provenance``:
the tokenizer's content hash, the world config's hash, the PT run's identity and step).
``build_replay(..., out_dir=...)`` reuses a complete corpus of the same config found there; given ``made_from``, only
one made from the same things (else one line naming ``flag`` and the folder, before anything is sampled or written).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax import jsonio, provenance
from cfka_jax.continual.dedup import MinHashConfig, minhash_keep
from cfka_jax.continual.stoc import (
    SCORE_NORMS,
    SNIPPET_RULES,
    attention_scores,
    first_spans,
    random_spans,
    select_spans,
    vocab_spans,
)
from cfka_jax.eval.batches import right_pad, row_blocks
from cfka_jax.models.generate import SamplerConfig, generate

KINDS = ("stoc", "random", "lamol", "first_k", "random_no_eos", "random_vocab")
BUDGETS = ("tokens", "all")


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """One replay build; the defaults are the synthetic reference (§6.2, §6.4); ``real()`` gives §6.3's.

    Attributes:
      kind: ``stoc`` | ``random`` | ``lamol``.
      score_norm: ``j_plus_1`` (reference) | ``n_queries`` (decision #16).
      snippet_rule, span_len, top_k, include_last_window: the span rule (decisions #17, #18).
      num_source_seqs: first documents of the new data used as sources (None: all; decision #19).
      num_samples: continuations per prompt (n).
      temperature, repetition_penalty, sampler_top_k: the sampler (``sampler_top_k = 20``: LAMOL's, decision #23).
      max_new_tokens: tokens sampled per candidate; max_len: candidate length cap (prompt + continuation).
      ignore_eos: sample through EOS (synthetic) or stop at it (real) (decision #20).
      minhash: deduplication settings, or None for none (decision #21).
      budget: ``tokens`` | ``all`` (decision #22).
      seed: PRNG seed of sampling, random spans and the budget draw.
      batch_size: rows per sampling call (does not change the result).
    """

    kind: str = "stoc"
    score_norm: str = "j_plus_1"
    snippet_rule: str = "token_argmax"
    span_len: int = 3
    top_k: int = 3
    include_last_window: bool = False
    num_source_seqs: int | None = 10_000
    num_samples: int = 3
    temperature: float = 1.0
    repetition_penalty: float = 1.05
    sampler_top_k: int = 0
    max_new_tokens: int = 512
    max_len: int = 512
    ignore_eos: bool = True
    minhash: MinHashConfig | None = MinHashConfig()
    budget: str = "tokens"
    seed: int = 0
    batch_size: int = 64

    def __post_init__(self):
        checks = {"kind": (self.kind, KINDS), "score_norm": (self.score_norm, SCORE_NORMS),
                  "snippet_rule": (self.snippet_rule, SNIPPET_RULES), "budget": (self.budget, BUDGETS)}
        for name, (value, allowed) in checks.items():
            if value not in allowed:
                raise ValueError(f"ReplayConfig.{name} must be one of {allowed}, got {value!r}")
        sizes = {"span_len": self.span_len, "top_k": self.top_k, "num_samples": self.num_samples,
                 "max_new_tokens": self.max_new_tokens, "max_len": self.max_len, "batch_size": self.batch_size}
        for name, value in sizes.items():
            if value < 1:
                raise ValueError(f"ReplayConfig.{name} must be >= 1, got {value}")
        if self.num_source_seqs is not None and self.num_source_seqs < 1:
            raise ValueError(f"ReplayConfig.num_source_seqs must be >= 1 or None, got {self.num_source_seqs}")
        if isinstance(self.minhash, dict):
            object.__setattr__(self, "minhash", MinHashConfig(**self.minhash))

    @classmethod
    def synthetic(cls, kind: str, **overrides) -> ReplayConfig:
        """§6.2 / §6.4 synthetic defaults: token_argmax spans of 3, through EOS, token budget."""
        return cls(kind=kind, **overrides)

    @classmethod
    def real(cls, kind: str, **overrides) -> ReplayConfig:
        """§6.3 / §6.4 real-data defaults: window_sum spans of 10, stop at EOS, 256 tokens, keep all."""
        base = dict(snippet_rule="window_sum", span_len=10, num_source_seqs=None, max_new_tokens=256, max_len=256,
                    ignore_eos=False, budget="all")
        return cls(kind=kind, **(base | overrides))

    def sampler(self, eos_id: int) -> SamplerConfig:
        return SamplerConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_k=self.sampler_top_k,
                             repetition_penalty=self.repetition_penalty, eos_token_id=eos_id, pad_token_id=eos_id,
                             ignore_eos=self.ignore_eos)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A sampling prompt: ``ids`` = source document ``source`` [start, end) (source −1: LAMOL's EOS prompt)."""

    source: int
    start: int
    end: int
    ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ReplayCorpus:
    """A built replay corpus.

    Attributes:
      config: the build config.
      prompts: every prompt.
      candidates: every sampled candidate (int32 ids), ``num_samples`` consecutive ones per prompt.
      candidate_prompt: int (C,) prompt index of each candidate.
      kept: bool (C,) MinHash verdict (all True without deduplication).
      chosen: int (k,) candidate indices drawn by the budget (repeats possible), in draw order.
      stats: counts, wall times and throughput of the build.
      made_from: what it was sampled from (``cfka_jax.provenance``), None when not recorded.
    """

    config: ReplayConfig
    prompts: list[Prompt]
    candidates: list[np.ndarray]
    candidate_prompt: np.ndarray
    kept: np.ndarray
    chosen: np.ndarray
    stats: dict
    made_from: dict | None = None

    @property
    def sequences(self) -> list[np.ndarray]:
        """The replay documents to mix with the new data."""
        return [self.candidates[i] for i in self.chosen]


def make_prompts(model, docs: list[np.ndarray], cfg: ReplayConfig, eos_id: int,
                 vocab_ids: np.ndarray | None = None) -> list[Prompt]:
    """The prompts of ``cfg.kind`` for the source documents ``docs`` (already cut to ``num_source_seqs``);
    ``vocab_ids``: the token ids ``random_vocab`` draws from (required for it; source −1, span [0, span_len)).

    Raises:
      ValueError: ``random_vocab`` without ``vocab_ids``.
    """
    if cfg.kind == "lamol":
        return [Prompt(-1, 0, 1, (int(eos_id),))] * (len(docs) * cfg.top_k)
    rng = np.random.default_rng([cfg.seed, 1])
    if cfg.kind == "random_vocab":
        if vocab_ids is None:
            raise ValueError("replay kind 'random_vocab' needs vocab_ids (the tokenizer's non-special ids)")
        return [Prompt(-1, 0, cfg.span_len, ids) for _ in docs
                for ids in vocab_spans(rng, np.asarray(vocab_ids), span_len=cfg.span_len, top_k=cfg.top_k)]
    if cfg.kind in ("random", "random_no_eos"):
        avoid = int(eos_id) if cfg.kind == "random_no_eos" else None
        spans = [random_spans(rng, len(d), span_len=cfg.span_len, top_k=cfg.top_k, doc=d, avoid=avoid)
                 for d in docs]
    elif cfg.kind == "first_k":
        spans = [first_spans(len(d), span_len=cfg.span_len, top_k=cfg.top_k) for d in docs]
    else:
        scores = attention_scores(model, docs, norm=cfg.score_norm)
        spans = [select_spans(s, rule=cfg.snippet_rule, span_len=cfg.span_len, top_k=cfg.top_k,
                              include_last_window=cfg.include_last_window) for s in scores]
    return [Prompt(i, a, b, tuple(int(t) for t in docs[i][a:b])) for i, sp in enumerate(spans) for a, b in sp]


def _vocab_ids(tokenizer) -> np.ndarray:
    """The tokenizer's ids without its special tokens (what ``random_vocab`` prompts are drawn from)."""
    special = set(int(i) for i in tokenizer.all_special_ids)
    return np.asarray([i for i in range(len(tokenizer)) if i not in special], np.int64)


def sample_candidates(model, prompts: list[Prompt], cfg: ReplayConfig, eos_id: int) -> tuple[list[np.ndarray], int]:
    """(candidates, generated token count): ``num_samples`` continuations per prompt, prompt + continuation cut to
    ``max_len``. Fixed-size blocks of one width (``eval/batches.py``), so sampling compiles once; row r samples
    with the key ``fold_in(key(seed), r)`` whatever the batch size."""
    rows = [p.ids for p in prompts for _ in range(cfg.num_samples)]
    width = max(len(p.ids) for p in prompts)
    sampler, base = cfg.sampler(eos_id), jax.random.key(cfg.seed)
    out, generated = [], 0
    for block in row_blocks(len(rows), cfg.batch_size):
        tokens, lengths = right_pad(rows, block.rows, width=width, pad_id=eos_id)
        lo = int(block.rows[0])
        keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(lo, lo + cfg.batch_size))
        res = generate(model, tokens, lengths, keys, sampler)
        gen, num = np.asarray(res.tokens), np.asarray(res.num_tokens)
        for r in np.flatnonzero(block.valid):
            ids = np.asarray(rows[block.rows[r]], np.int32)
            out.append(np.concatenate([ids, gen[r, :num[r]]])[:cfg.max_len])
            generated += int(num[r])
    return out, generated


def budget_draw(num_kept: int, budget_tokens: int | None, cfg: ReplayConfig) -> np.ndarray:
    """Indices into the kept candidates: k = min(budget_tokens // max_len, num_kept) drawn with replacement
    (``tokens``), or all of them in order (``all``)."""
    if cfg.budget == "all":
        return np.arange(num_kept)
    if budget_tokens is None or budget_tokens < 0:
        raise ValueError("budget 'tokens' needs budget_tokens >= 0 (the token count of the new data)")
    k = min(budget_tokens // cfg.max_len, num_kept)
    return np.random.default_rng([cfg.seed, 2]).choice(num_kept, size=k, replace=True) if k else np.zeros(0, int)


def build_replay(model, source_docs: list[np.ndarray], tokenizer, cfg: ReplayConfig, *,
                 budget_tokens: int | None = None, out_dir: str | os.PathLike | None = None,
                 made_from: dict | None = None, flag: str = "--replay-dir") -> ReplayCorpus:
    """Build (or reuse from ``out_dir``) a replay corpus from the pre-CPT ``model`` (module docstring).

    Args:
      model: the pre-CPT model (a model port; it is not modified).
      source_docs: the new data's documents (int32 ids, EOS included); the first ``num_source_seqs`` are used.
      tokenizer: decodes prompts and candidates (MinHash shingles, saved texts); gives the EOS id.
      cfg: the build config.
      budget_tokens: token count of one copy of the new data (``budget = 'tokens'``).
      out_dir: where the corpus is saved, or None.
      made_from: what the corpus is sampled from (recorded; a corpus found in ``out_dir`` must record the same).
      flag: the option that named ``out_dir``, for the messages.

    Raises:
      ValueError: no source documents, or ``out_dir`` holds a corpus of another config or made from something else.
    """
    if out_dir is not None and (pathlib.Path(out_dir) / "config.json").exists():
        return _reuse(pathlib.Path(out_dir), cfg, made_from, flag)
    docs = list(source_docs[:cfg.num_source_seqs] if cfg.num_source_seqs is not None else source_docs)
    if not docs:
        raise ValueError("build_replay needs at least one source document")
    eos_id = int(tokenizer.eos_token_id)
    t0 = time.perf_counter()
    prompts = make_prompts(model, docs, cfg, eos_id, vocab_ids=_vocab_ids(tokenizer))
    t1 = time.perf_counter()
    candidates, generated = sample_candidates(model, prompts, cfg, eos_id)
    t2 = time.perf_counter()
    texts = tokenizer.batch_decode([c.tolist() for c in candidates])
    kept = minhash_keep(texts, cfg.minhash) if cfg.minhash is not None else np.ones(len(candidates), bool)
    t3 = time.perf_counter()
    kept_idx = np.flatnonzero(kept)
    chosen = kept_idx[budget_draw(len(kept_idx), budget_tokens, cfg)]
    cand_prompt = np.repeat(np.arange(len(prompts)), cfg.num_samples)
    stats = _stats(docs, prompts, candidates, kept, chosen, generated, budget_tokens, (t0, t1, t2, t3))
    corpus = ReplayCorpus(cfg, prompts, candidates, cand_prompt, kept, chosen, stats, made_from)
    if out_dir is not None:
        save_replay(corpus, out_dir, tokenizer, texts)
    return corpus


def _stats(docs, prompts, candidates, kept, chosen, generated, budget_tokens, times) -> dict:
    t0, t1, t2, t3 = times
    return {
        "num_sources": len(docs), "num_prompts": len(prompts),
        "num_unique_prompts": len({p.ids for p in prompts}), "num_candidates": len(candidates),
        "minhash_dropped": int((~kept).sum()), "num_kept": int(kept.sum()), "num_sequences": len(chosen),
        "num_unique_sequences": len(set(chosen.tolist())), "budget_tokens": budget_tokens,
        "generated_tokens": generated, "replay_tokens": int(sum(len(candidates[i]) for i in chosen)),
        "prompt_s": t1 - t0, "sample_s": t2 - t1, "minhash_s": t3 - t2, "total_s": t3 - t0,
        "prompts_per_s": len(prompts) / max(t1 - t0, 1e-9), "gen_tokens_per_s": generated / max(t2 - t1, 1e-9),
        "minhash_docs_per_s": len(candidates) / max(t3 - t2, 1e-9),
    }


def save_replay(corpus: ReplayCorpus, out_dir: str | os.PathLike, tokenizer, texts: list[str] | None = None) -> None:
    """Write the corpus files (module docstring); ``config.json`` last, so its presence marks a complete corpus."""
    from datasets import Dataset

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = texts if texts is not None else tokenizer.batch_decode([c.tolist() for c in corpus.candidates])
    jsonio.write_jsonl_atomic(out / "prompts.jsonl", (
        {"prompt": i, "source": p.source, "start": p.start, "end": p.end, "ids": list(p.ids),
         "text": tokenizer.decode(list(p.ids))} for i, p in enumerate(corpus.prompts)))
    Dataset.from_dict({"candidate": list(range(len(texts))), "prompt": corpus.candidate_prompt.tolist(),
                       "kept": corpus.kept.tolist(), "input_ids": [c.tolist() for c in corpus.candidates],
                       "text": texts}).save_to_disk(str(out / "candidates"))
    Dataset.from_dict({"candidate": corpus.chosen.tolist(),
                       "input_ids": [corpus.candidates[i].tolist() for i in corpus.chosen]}).save_to_disk(
        str(out / "replay"))
    jsonio.write_json_atomic(out / "stats.json", corpus.stats, indent=1)
    config = corpus.config.to_json()
    if corpus.made_from is not None:
        config[provenance.KEY] = corpus.made_from
    jsonio.write_json_atomic(out / "config.json", config, indent=1)  # last: its presence marks a whole corpus


def load_replay(folder: str | os.PathLike) -> ReplayCorpus:
    """Read a corpus written by ``save_replay``.

    Raises:
      ValueError: a missing or malformed file, named in the message.
    """
    from datasets import load_from_disk

    folder = pathlib.Path(folder)
    for name in ("config.json", "stats.json", "prompts.jsonl", "candidates", "replay"):
        if not (folder / name).exists():
            raise ValueError(f"{folder}: not a complete replay corpus ({name} missing)")
    cfg, made_from = read_replay_config(folder)
    stats = jsonio.read_json_object(folder / "stats.json", "replay statistics (JSON object)")
    prompts = [_prompt(where, d) for where, d in jsonio.iter_jsonl(folder / "prompts.jsonl")]
    try:
        cand = load_from_disk(str(folder / "candidates"))
        chosen = np.asarray(load_from_disk(str(folder / "replay"))["candidate"], np.int64)
        candidates = [np.asarray(ids, np.int32) for ids in cand["input_ids"]]
        cand_prompt, kept = np.asarray(cand["prompt"], np.int64), np.asarray(cand["kept"], bool)
    except (TypeError, KeyError, ValueError, OSError) as e:
        raise ValueError(f"{folder}: malformed replay corpus (candidates/ or replay/): {e!r}") from None
    return ReplayCorpus(cfg, prompts, candidates, cand_prompt, kept, chosen, stats, made_from)


def read_replay_config(folder: str | os.PathLike) -> tuple[ReplayConfig, dict | None]:
    """(build config, ``made_from`` or None) of the corpus in ``folder`` (its ``config.json``).

    Raises:
      ValueError: an unreadable ``config.json`` or one that is not a replay config, naming the file.
    """
    path = pathlib.Path(folder) / "config.json"
    record = jsonio.read_json_object(path, "a replay config (JSON object)")
    made_from = record.pop(provenance.KEY, None)
    try:
        return ReplayConfig(**record), made_from
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a replay config ({e})") from None


def _prompt(where: str, d: dict) -> Prompt:
    try:
        return Prompt(int(d["source"]), int(d["start"]), int(d["end"]), tuple(int(t) for t in d["ids"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: not a replay prompt ({e!r})") from None


def check_replay_dir(folder: str | os.PathLike, made_from: dict, *, flag: str = "--replay-dir") -> None:
    """Refuse a corpus in ``folder`` (if any) that records other provenance than ``made_from``, or none: one line
    naming ``flag`` and the folder (``provenance.check_made_from``). Reads only ``config.json``; writes nothing."""
    if (pathlib.Path(folder) / "config.json").exists():
        _, recorded = read_replay_config(folder)
        provenance.check_made_from(recorded, made_from, flag=flag, folder=folder)


def _reuse(folder: pathlib.Path, cfg: ReplayConfig, made_from: dict | None, flag: str) -> ReplayCorpus:
    if made_from is not None:  # before the corpus is read
        check_replay_dir(folder, made_from, flag=flag)
    corpus = load_replay(folder)
    if corpus.config != cfg:
        raise ValueError(f"{flag} {folder} holds a replay corpus built with another config "
                         f"({corpus.config.to_json()} != {cfg.to_json()}); remove it or choose another folder")
    return corpus
