"""Generative replay for Biography CPT: build (or reuse) a STOC / Random / LAMOL corpus from the PT model.

The synthetic reference (spec cfka_stoc.md §6.2, §6.4, §7): sources are the first ``num_source_seqs`` documents of
``cpt_train``, candidates are cut to the chunk length S of the preset (512 in the reference, the preset's
``seq_len`` here) with S new tokens sampled through EOS, and the budget is k = tokens(cpt_train) // S sequences
drawn with replacement, i.e. about one copy of the new data, mixed at new-data fraction α by ``mix_replay``.
"""

from __future__ import annotations

import dataclasses
import pathlib

from cfka_jax.continual.dedup import MinHashConfig
from cfka_jax.continual.replay import ReplayConfig, ReplayCorpus, build_replay

GENERATIVE = ("stoc", "random", "lamol")


@dataclasses.dataclass(frozen=True)
class ReplaySwitches:
    """The decision-table switches a CPT run exposes (#16, #17, #21, #23)."""

    score_norm: str = "j_plus_1"
    snippet_rule: str = "token_argmax"
    minhash: bool = True
    lamol_sampler: str = "stoc"
    num_source_seqs: int = 10_000
    batch_size: int = 256

    def __post_init__(self):
        if self.lamol_sampler not in ("stoc", "topk20"):
            raise ValueError(f"lamol_sampler must be 'stoc' or 'topk20', got {self.lamol_sampler!r}")

    @property
    def tag(self) -> str:
        """A folder suffix naming the non-default switches ('' for the defaults)."""
        diff = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                if f.name != "batch_size" and getattr(self, f.name) != f.default]
        return ("-" + "-".join(diff)) if diff else ""


def replay_config(kind: str, seq_len: int, switches: ReplaySwitches, seed: int) -> ReplayConfig:
    """The synthetic replay config of a preset with chunk length ``seq_len``."""
    return ReplayConfig.synthetic(
        kind, score_norm=switches.score_norm, snippet_rule=switches.snippet_rule,
        span_len=3 if switches.snippet_rule == "token_argmax" else 10, num_source_seqs=switches.num_source_seqs,
        sampler_top_k=20 if kind == "lamol" and switches.lamol_sampler == "topk20" else 0,
        max_new_tokens=seq_len, max_len=seq_len, minhash=MinHashConfig() if switches.minhash else None, seed=seed,
        batch_size=switches.batch_size)


def ensure_replay(folder: pathlib.Path, model, bundle, cfg: ReplayConfig) -> ReplayCorpus:
    """The corpus in ``folder`` (built from the PT ``model`` on ``cpt_train`` when absent)."""
    new = bundle.splits["cpt_train"]
    corpus = build_replay(model, new.docs(), bundle.tokenizer, cfg, budget_tokens=len(new.tokens),
                          out_dir=folder)
    s = corpus.stats
    print(f"[replay {cfg.kind}] {s['num_prompts']} prompts ({s['num_unique_prompts']} distinct), "
          f"{s['num_candidates']} candidates, MinHash dropped {s['minhash_dropped']}, {s['num_sequences']} drawn "
          f"({s['replay_tokens']} tokens), built in {s['total_s']:.1f} s -> {folder}")
    return corpus


def voiced_facts(texts: list[str], people) -> tuple[set, set, int, int]:
    """(people named, facts voiced, name mentions, true values found) of ``texts`` (see ``fact_coverage``)."""
    import re

    by_name = {p.fullname: p for p in people}
    pattern = re.compile("|".join(re.escape(n) for n in sorted(by_name, key=len, reverse=True)))
    named, voiced, mentions, hits = set(), set(), 0, 0
    for text in texts:
        found = list(pattern.finditer(text))
        for m, nxt in zip(found, found[1:] + [None]):
            person = by_name[m.group()]
            segment = text[m.end():nxt.start() if nxt else len(text)]
            named.add(person.pid)
            mentions += 1
            for a, value in enumerate(person.values):
                if value in segment:
                    voiced.add((person.pid, a))
                    hits += 1
    return named, voiced, mentions, hits


def fact_coverage(texts: list[str], people) -> dict:
    """What a replay corpus says about the Biography world (a diagnostic, not a training signal).

    Every occurrence of a person's full name opens a segment that runs to the next full name; a fact (person,
    attribute) is *voiced* when the person's true value of that attribute appears in one of the person's
    segments. Returns the number of original (PT) and new (CPT) people named, the share of all original facts
    voiced at least once (``pt_fact_coverage``), and the true values found per name mention
    (``true_values_per_mention``; a real biography sentence names its person and states one value: 1.0 for
    real replay; a generated sentence stating a wrong value counts 0).
    """
    named, voiced, mentions, hits = voiced_facts(texts, people)
    original = {p.pid for p in people if p.is_original}
    num_attr = len(people[0].values) if people else 0
    return {"pt_people_named": len(named & original), "cpt_people_named": len(named - original),
            "pt_fact_coverage": len({f for f in voiced if f[0] in original}) / max(1, len(original) * num_attr),
            "true_values_per_mention": hits / max(1, mentions)}
