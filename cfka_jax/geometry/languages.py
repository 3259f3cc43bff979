"""Synthetic "languages" for cross-lingual retrieval (spec §4.3): the same facts rendered in disjoint vocabularies.

A fact is an item (entity, relation) with a value. The entity's name is ``name_len`` name pieces (drawn from
``name_pieces`` concepts, so names share pieces as words share subwords), the relation one of ``relations``
concepts and the value ``value_len`` of ``value_concepts``. Every language ℓ has its own block of token ids, one
per concept (markers Q and ANS included), with the concepts permuted inside the block: the same fact has
disjoint token sets in two languages and the same structure. One item in language ℓ:

    [BOS, Q_ℓ, name_ℓ …, rel_ℓ, ANS_ℓ, value_ℓ …, EOS]                          (right-padded with PAD)

The pretraining corpus (:func:`corpus`) holds every item in every language and ``parallel`` translation pairs
``[BOS, item in ℓ₁, SEP, item in ℓ₂, EOS]`` (items without their own BOS/EOS), as multilingual data has parallel
text. The retrieval benchmark (:func:`retrieval_split`, the shape of the release's medical-MMMLU set): queries
are ``queries`` items in language 0, candidates the same items in the other languages, so each query has exactly
``languages − 1`` same-source candidates.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cfka_jax.values import check_sizes

PAD, BOS, EOS, SEP = 0, 1, 2, 3
SPECIALS = 4


@dataclasses.dataclass(frozen=True)
class LanguageConfig:
    """Sizes of the fact world and its languages."""

    languages: int = 5
    """Languages, each with its own block of token ids (>= 2: a query language and a candidate language)."""
    entities: int = 40
    """Entities E, each with its own name (``name_len`` pieces)."""
    relations: int = 4
    """Relations per entity: item i is (entity ``i // relations``, relation ``i % relations``)."""
    name_pieces: int = 24
    """Concepts that entity names are drawn from (names share pieces as words share subwords)."""
    name_len: int = 2
    """Name pieces per entity name."""
    value_concepts: int = 24
    """Concepts that fact values are drawn from."""
    value_len: int = 2
    """Value concepts per fact value."""
    parallel: int = 2400
    """Translation pairs (an item in two different languages) in the pretraining corpus."""
    queries: int = 40
    """Retrieval queries: distinct items in language 0 (at most ``entities * relations``)."""
    seed: int = 0
    """Seed of the names, values and per-language permutations."""

    def __post_init__(self):
        check_sizes(self, ("entities", "relations", "name_pieces", "name_len", "value_concepts", "value_len",
                           "queries"))
        if self.languages < 2:
            raise ValueError(f"languages must be >= 2 (a query language and a candidate language), got "
                             f"{self.languages}")
        if self.parallel < 0:
            raise ValueError(f"parallel must be >= 0, got {self.parallel}")
        if self.queries > self.items:
            raise ValueError(f"queries ({self.queries}) must not exceed the items ({self.items})")

    @property
    def items(self) -> int:
        return self.entities * self.relations

    @property
    def concepts(self) -> int:
        """Concepts per language: the markers Q, ANS, then name pieces, relations, values."""
        return 2 + self.name_pieces + self.relations + self.value_concepts

    @property
    def vocab_size(self) -> int:
        return SPECIALS + self.languages * self.concepts

    @property
    def item_len(self) -> int:
        """Tokens of an item without BOS/EOS."""
        return 3 + self.name_len + self.value_len

    @property
    def seq_len(self) -> int:
        return 3 + 2 * self.item_len


@dataclasses.dataclass(frozen=True)
class Facts:
    """Concept ids of every item (``names [E, name_len]``, ``values [items, value_len]``) and the per-language
    concept → token table ``lexicon [languages, concepts]``; item i is (entity ``i // relations``, relation
    ``i % relations``)."""

    config: LanguageConfig
    names: np.ndarray
    values: np.ndarray
    lexicon: np.ndarray


def make_facts(cfg: LanguageConfig) -> Facts:
    """The facts and lexicon of ``cfg`` (deterministic in ``cfg.seed``)."""
    rng = np.random.default_rng(cfg.seed)
    names = rng.integers(0, cfg.name_pieces, size=(cfg.entities, cfg.name_len))
    values = rng.integers(0, cfg.value_concepts, size=(cfg.items, cfg.value_len))
    lexicon = np.stack([SPECIALS + ell * cfg.concepts + rng.permutation(cfg.concepts)
                        for ell in range(cfg.languages)])
    return Facts(cfg, names, values, lexicon)


def item_concepts(facts: Facts, item: int) -> np.ndarray:
    """The concept sequence ``[Q, name…, rel, ANS, value…]`` of one item."""
    c = facts.config
    e, r = divmod(item, c.relations)
    return np.concatenate([[0], 2 + facts.names[e], [2 + c.name_pieces + r, 1],
                           2 + c.name_pieces + c.relations + facts.values[item]])


def render(facts: Facts, item: int, language: int) -> np.ndarray:
    """The tokens of an item in a language, without BOS/EOS (``[item_len]``)."""
    return facts.lexicon[language, item_concepts(facts, item)].astype(np.int32)


def _pad(rows: list[np.ndarray], length: int) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.full((len(rows), length), PAD, np.int32)
    for i, r in enumerate(rows):
        tokens[i, :len(r)] = r
    return tokens, (tokens != PAD).astype(np.int32)


def sequence(facts: Facts, item: int, language: int) -> np.ndarray:
    return np.concatenate([[BOS], render(facts, item, language), [EOS]]).astype(np.int32)


def corpus(facts: Facts, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, attention_mask) ``[n, seq_len]``: every item in every language, then ``parallel`` random
    translation pairs of two different languages."""
    c = facts.config
    rng = np.random.default_rng(seed)
    rows = [sequence(facts, i, ell) for ell in range(c.languages) for i in range(c.items)]
    for _ in range(c.parallel):
        i = int(rng.integers(c.items))
        a, b = rng.choice(c.languages, size=2, replace=False)
        rows.append(np.concatenate([[BOS], render(facts, i, a), [SEP], render(facts, i, b), [EOS]]))
    return _pad(rows, c.seq_len)


def retrieval_split(facts: Facts, seed: int = 0) -> dict[str, np.ndarray]:
    """Queries (``queries`` random items in language 0) and candidates (those items in languages 1..ℓ−1, grouped
    by language), with ``query_item`` / ``cand_item`` (same source ⇔ equal item) and ``cand_language``."""
    c = facts.config
    items = np.random.default_rng(seed).choice(c.items, size=c.queries, replace=False)
    q_tokens, q_mask = _pad([sequence(facts, i, 0) for i in items], c.item_len + 2)
    langs = np.repeat(np.arange(1, c.languages), c.queries)
    cand_items = np.tile(items, c.languages - 1)
    k_tokens, k_mask = _pad([sequence(facts, i, ell) for i, ell in zip(cand_items, langs)], c.item_len + 2)
    return {"query_tokens": q_tokens, "query_mask": q_mask, "query_item": items, "cand_tokens": k_tokens,
            "cand_mask": k_mask, "cand_item": cand_items, "cand_language": langs}


def retrieval_metrics(scores: np.ndarray, query_item: np.ndarray, cand_item: np.ndarray, ks=(1, 4, 10)) -> dict:
    """Per query: ``Recall@k = |top-k ∩ same source| / min(k, #same)`` for each k (``Recall@4`` is the release's
    ``top4_item_accuracy`` with 4 same-source candidates), ``all_same@4`` (the top 4 are all same-source,
    ``top4_all_same_source_rate``) and ``top1`` accuracy; means over the queries."""
    same = query_item[:, None] == cand_item[None, :]
    order = np.argsort(-np.asarray(scores, float), axis=1, kind="stable")
    hit = np.take_along_axis(same, order, axis=1)
    n_same = same.sum(axis=1)
    out = {f"recall@{k}": float(np.mean(hit[:, :k].sum(1) / np.minimum(k, n_same))) for k in ks}
    out["all_same@4"] = float(np.mean(hit[:, :4].sum(1) == np.minimum(4, n_same)))
    out["top1"] = float(np.mean(hit[:, 0]))
    return out
