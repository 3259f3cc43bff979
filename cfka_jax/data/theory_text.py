"""The theory's enumerated fact world written as token sequences, for training the ports on it (spec cfka_stoc.md
§2.1, §2.8; ``cfka di-walk``).

A fact of the world (``theory/world.py``) is one context X = (x_1 … x_J) — subject-name tokens, relation token,
template token, the query x_J last — and its object o, drawn from Pr(X, o). Written as a sentence, in the world's
own token ids (``[slot tokens | objects]``, M = X + O ids):

    plain:      x_1 … x_J o
    templated:  x_1 … x_{J−2} w_1 … w_T x_{J−1} x_J o .

where w_1 … w_T are the words of one of ``templates`` variants of the fact's relation (drawn once per rendering from
``filler_vocab`` template words shared by every relation, ids M … M+F−1), and ``.`` (id M+F) ends the sentence, as a
Biography sentence ends. A document is ``facts_per_doc`` sentences followed by EOS (the last id). ``repeats``
renders each drawn fact that many times (each with its own template draw), in different documents: the corpus
holds ``facts`` renderings of ``facts // repeats`` distinct facts.

An *example* is one rendering (:class:`Examples`): its query position (the x_J whose next-token prediction is o),
the start of its document (the context the Biography measures use, ``lm_theory/biography.py``) and the start of
its own sentence (the theory's context: one fact). The first example of every plain one-fact document is the
theory's sample (X, o) exactly, so its co-occurrence counts estimate the world's Pr(s | o) and Pr(o).
Everything is a deterministic function of the world and the :class:`Rendering` (numpy, seeded).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cfka_jax.data.packing import Packed, pack
from cfka_jax.theory.world import FactWorld


@dataclasses.dataclass(frozen=True)
class Rendering:
    """How the world's facts become documents (module docstring)."""

    facts: int = 4096
    """fact renderings in the corpus (every one an example)"""
    repeats: int = 1
    """renderings of each distinct fact (the Biography's several biographies of one person)"""
    facts_per_doc: int = 1
    """sentences per document (several facts per context)"""
    templates: int = 0
    """template variants per relation; 0: the world's own tokens only"""
    template_words: int = 3
    """words per template"""
    filler_vocab: int = 8
    """template word types, shared by every relation"""
    seed: int = 0
    """seed of the fact draws, template draws and document order"""

    def __post_init__(self):
        for name in ("facts", "repeats", "facts_per_doc", "template_words", "filler_vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"rendering {name} must be an integer >= 1, got {value!r}")
        for name in ("templates", "seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"rendering {name} must be an integer >= 0, got {value!r}")
        if self.facts < self.repeats or self.facts % self.repeats:
            raise ValueError(f"facts ({self.facts}) must be a positive multiple of repeats ({self.repeats})")
        if self.facts < self.facts_per_doc:
            raise ValueError(f"facts ({self.facts}) cannot fill one document of {self.facts_per_doc}")


@dataclasses.dataclass(frozen=True)
class Examples:
    """One row per fact rendering, int64 (E,): document, position of the query and starts of its document and
    sentence (offsets in the document), its object (0 … O−1) and its distinct fact."""

    doc: np.ndarray
    query: np.ndarray
    sentence: np.ndarray
    objects: np.ndarray
    fact: np.ndarray


@dataclasses.dataclass(frozen=True)
class TextCorpus:
    """The rendered world: documents (int32 token ids, EOS last) and their examples.

    Attributes:
      docs: one int32 array per document.
      examples: every fact rendering (:class:`Examples`).
      vocab_size: M + F + 2 (world tokens, template words, '.', EOS).
      eos_id: the last id.
      object_ids: token ids of the objects (O,).
      kinds: the kind of every token id: the world's ('name', 'relation', 'template', 'query', 'object'),
        'word' (template words), 'end' ('.'), 'eos'.
    """

    docs: list[np.ndarray]
    examples: Examples
    vocab_size: int
    eos_id: int
    object_ids: np.ndarray
    kinds: tuple[str, ...]


def draw_facts(world: FactWorld, num: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``num`` (context index, object index) pairs drawn from Pr(X, o)."""
    joint = np.asarray(world.joint, np.float64).reshape(-1)
    flat = rng.choice(joint.size, size=num, p=joint / joint.sum())
    return flat // world.joint.shape[1], flat % world.joint.shape[1]


def _templates(world: FactWorld, r: Rendering, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Relation token id (or -1 for a world without relations) → (templates, template_words) word ids."""
    first = world.vocab_size
    relations = [t for t, k in enumerate(world.token_kinds) if k == "relation"] or [-1]
    return {t: first + rng.integers(r.filler_vocab, size=(r.templates, r.template_words)) for t in relations}


def _sentence(x: np.ndarray, obj: int, world: FactWorld, r: Rendering, templates: dict, rng) -> tuple[list, int]:
    """One rendering: (token ids, offset of the query)."""
    if not r.templates:
        return [*x.tolist(), obj], len(x) - 1
    rel = [int(t) for t in x if world.token_kinds[int(t)] == "relation"]
    words = templates[rel[0] if rel else -1][rng.integers(r.templates)].tolist()
    toks = [*x[:-2].tolist(), *words, *x[-2:].tolist(), obj, world.vocab_size + r.filler_vocab]
    return toks, len(toks) - 3


def render(world: FactWorld, r: Rendering) -> TextCorpus:
    """The corpus of ``r.facts`` renderings of facts drawn from ``world`` (module docstring).

    Raises:
      ValueError: templates asked of a world whose contexts are shorter than 3 tokens.
    """
    if r.templates and world.context_length < 3:
        raise ValueError(f"templated rendering needs contexts of >= 3 tokens, the world has {world.context_length}")
    rng = np.random.default_rng(r.seed)
    ctx_i, obj_i = draw_facts(world, r.facts // r.repeats, rng)
    fact = rng.permutation(np.repeat(np.arange(len(ctx_i)), r.repeats))
    templates = _templates(world, r, rng) if r.templates else {}
    contexts, objects = np.asarray(world.contexts), np.asarray(world.objects)
    eos = world.vocab_size + r.filler_vocab + 1
    docs, rows = [], []
    for d0 in range(0, len(fact) - r.facts_per_doc + 1, r.facts_per_doc):
        toks: list[int] = []
        for f in fact[d0:d0 + r.facts_per_doc]:
            sent, q = _sentence(contexts[ctx_i[f]], int(objects[obj_i[f]]), world, r, templates, rng)
            rows.append((len(docs), len(toks) + q, len(toks), int(obj_i[f]), int(f)))
            toks += sent
        docs.append(np.asarray(toks + [eos], np.int32))
    ex = Examples(*(np.asarray(c, np.int64) for c in zip(*rows)))
    kinds = world.token_kinds + ("word",) * r.filler_vocab + ("end", "eos")
    return TextCorpus(docs, ex, eos + 1, eos, objects.astype(np.int64), kinds)


@dataclasses.dataclass(frozen=True)
class Located:
    """The examples inside a packed corpus (file order), int64 (E',): chunk, query position, the start of the
    context (document start, cut at the chunk start), the start of the sentence (likewise), object. Examples
    whose object falls in the next chunk are left out (their query cannot predict it)."""

    chunk: np.ndarray
    query: np.ndarray
    start: np.ndarray
    sentence: np.ndarray
    objects: np.ndarray

    def contexts(self, tokens_BS: np.ndarray, *, span: str = "document") -> list[np.ndarray]:
        """The context tokens of every example: from the document start (``document``) or from its own sentence
        start (``fact``) up to the query."""
        starts = self.start if span == "document" else self.sentence
        return [tokens_BS[c, s:q + 1] for c, s, q in zip(self.chunk, starts, self.query)]


def packed(corpus: TextCorpus, seq_len: int) -> tuple[Packed, Located]:
    """The corpus packed in file order into chunks of ``seq_len`` and its examples located in them."""
    p = pack(corpus.docs, seq_len, corpus.eos_id)
    ex = corpus.examples
    doc0 = p.doc_starts[ex.doc]
    pos = doc0 + ex.query
    chunk, q = pos // seq_len, pos % seq_len
    keep = q < seq_len - 1
    base = chunk * seq_len
    start = np.maximum(doc0 - base, 0)
    sentence = np.maximum(doc0 + ex.sentence - base, 0)
    return p, Located(chunk[keep], q[keep], start[keep], sentence[keep], ex.objects[keep])
