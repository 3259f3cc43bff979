"""KnowEdit (HF ``zjunlp/KnowEdit``) for real-data continual pre-training (spec cfka_stoc.md §4.7, §8, §11 rows 8,
25, 26).

A local ``test.json`` (a JSON list of records) of one of three datasets; the kind is given or detected from the
keys of record 0 (``text`` + ``labels`` → wiki_bio; top-level ``ground_truth`` or ``rephrase_prompt`` → zsre;
``prompt`` + ``target_new`` → wiki_recent). Every record is then checked against that kind's keys.

* zsre: continual = ``prompt`` and ``rephrase_prompt`` (if present) with answers ``ground_truth`` (not
  ``target_new``); original = ``locality.Relation_Specificity``.
* wiki_bio: continual = ``text`` with answers ``labels``; original = ``locality.Relation_Specificity``.
* wiki_recent: continual = ``prompt`` and ``rephrase`` (if present) with answers ``target_new``; original = every
  locality category, answers ``ground_truth[0]`` (a list of aliases, or one string).

Locality items are ``{"prompt": str, "ground_truth": answers}``. Answers are a non-empty list of non-empty
strings (``[]`` or ``""`` is an error naming the record: the fact would be silently dropped); a plain string is
wrapped in a one-element list (``wrap_strings=True``, decision #25). ``wrap_strings=False`` reproduces the
reference, which iterates the string: every *character* becomes an answer.

Tokenisation (reference ``Real/process_data.py``), with ``tok(x)`` = ``tokenizer(x, add_special_tokens=True)`` for
prompts and answers alike, as the reference does (Qwen and Pythia tokenizers add no special tokens):

    test sequence     = tok(prompt) + tok(" " + truth) + [EOS],   idx = len(tok(prompt))   (one per truth)
    training sequence = tok(text)   + tok(" " + truth) + [EOS]                              (one per truth)

``text`` is an LLM rewrite when an augmentation file is given (§8: Llama-3.1-8B-Instruct, 5 rewrites per query;
the rewrite usually already states the answer). **Without the augmentation the training texts are the prompts
themselves** (each prompt and its rephrase), so the training sequences equal the continual test sequences.

Augmentation file: a JSON list with one entry per generator query, queries in the order (continual fact,
truth); an entry is a list of rewrite strings or ``{"rewrites": [...]}`` (optional ``"prompt"``/``"truth"`` are
checked against the query they claim to answer). ``aug_align='per_truth'`` (default, decision #26) pairs entry
q(f, t) with truth t of fact f. ``aug_align='per_example'`` reproduces the reference: fact f takes entry number f
(misaligned as soon as a fact has two truths) and pairs each rewrite with every truth of f.

Mixing with replay (§4.7, decision #8) is ``data/mixing.mix_replay``: ``token_share`` (new-data fraction α by tokens)
or ``code_5050`` (the reference's ``CPTDataset`` bug, a 50/50 mix for any α).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from cfka_jax import jsonio

KINDS = ("zsre", "wiki_bio", "wiki_recent")
ALIGNS = ("per_truth", "per_example")
_CONTINUAL_KEYS = {"zsre": ("prompt", "ground_truth", "rephrase_prompt"), "wiki_bio": ("text", "labels", None),
                   "wiki_recent": ("prompt", "target_new", "rephrase")}  # prompt, answers, optional rephrase


@dataclasses.dataclass(frozen=True)
class KnowEditConfig:
    """Loader switches: dataset ``kind`` (None = detect), ``wrap_strings`` (#25), ``aug_align`` (#26)."""

    kind: str | None = None
    wrap_strings: bool = True
    aug_align: str = "per_truth"

    def __post_init__(self):
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS} or None, got {self.kind!r}")
        if self.aug_align not in ALIGNS:
            raise ValueError(f"aug_align must be one of {ALIGNS}, got {self.aug_align!r}")


@dataclasses.dataclass(frozen=True)
class Fact:
    """A prompt, its answers, and the index of the test.json record it came from."""

    prompt: str
    truths: tuple[str, ...]
    record: int


@dataclasses.dataclass(frozen=True)
class KnowEditFacts:
    """The facts of one file: ``continual`` (edit facts, learned by CPT) and ``original`` (locality facts, kept)."""

    kind: str
    continual: tuple[Fact, ...]
    original: tuple[Fact, ...]


@dataclasses.dataclass(frozen=True)
class TestSequences:
    """Tokenised test sequences (int32, each ending with EOS) and the answer start ``idx`` (int32, one per doc)."""

    docs: tuple[np.ndarray, ...]
    idx: np.ndarray


# ------------------------------------------------------------------------------------------------- reading JSON


def read_json(path: str | os.PathLike):
    """The parsed JSON of ``path``.

    Raises:
      ValueError: invalid UTF-8 or JSON, a lone surrogate escape or nesting too deep, naming the file and line.
    """
    return jsonio.read_json(path)


def _get(obj, key: str, types, where: str):
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise ValueError(f"{where}: missing key {key!r}")
    if not isinstance(obj[key], types):
        raise ValueError(f"{where}: key {key!r} has type {type(obj[key]).__name__}")
    return obj[key]


def _truths(value, wrap: bool, where: str) -> tuple[str, ...]:
    """Answers as a tuple of strings: a string is wrapped (or, code-faithfully, split into characters).

    Raises:
      ValueError: not a string or list of strings, an empty list or an empty answer (the fact would be dropped).
    """
    if isinstance(value, str):
        truths = (value,) if wrap else tuple(value)
    elif isinstance(value, list) and all(isinstance(t, str) for t in value):
        truths = tuple(value)
    else:
        raise ValueError(f"{where}: answers must be a string or a list of strings, got {value!r:.80}")
    if not truths:
        raise ValueError(f"{where}: no answers ({value!r}); the fact would be silently dropped")
    empty = [i for i, t in enumerate(truths) if not t]
    if empty:
        raise ValueError(f"{where}: answer {empty[0]} is empty")
    return truths


def detect_kind(record, where: str = "record 0") -> str:
    """The dataset kind from a record's keys (module docstring).

    Raises:
      ValueError: the keys match no kind.
    """
    keys = set(record) if isinstance(record, dict) else set()
    if {"text", "labels"} <= keys:
        return "wiki_bio"
    if "prompt" in keys and ({"ground_truth", "rephrase_prompt"} & keys):
        return "zsre"
    if {"prompt", "target_new"} <= keys:
        return "wiki_recent"
    raise ValueError(f"{where}: cannot tell the KnowEdit dataset from keys {sorted(keys)}; pass kind explicitly")


# ---------------------------------------------------------------------------------------------------- facts


def _continual(rec: dict, kind: str, i: int, where: str, wrap: bool) -> list[Fact]:
    prompt_key, answer_key, rephrase_key = _CONTINUAL_KEYS[kind]
    truths = _truths(_get(rec, answer_key, (str, list), where), wrap, f"{where} key {answer_key!r}")
    facts = [Fact(_get(rec, prompt_key, str, where), truths, i)]
    if rephrase_key is not None and rephrase_key in rec:
        facts.append(Fact(_get(rec, rephrase_key, str, where), truths, i))
    return facts


def _locality_fact(item, i: int, where: str, wrap: bool, first_answer: bool) -> Fact:
    answers = _get(item, "ground_truth", (str, list), where)
    if first_answer:  # wiki_recent: the reference reads ground_truth[0] (a list of aliases, or one string)
        if isinstance(answers, str) and wrap:
            answers = [answers]
        if not answers:
            raise ValueError(f"{where}: key 'ground_truth' is empty")
        answers = answers[0]
    return Fact(_get(item, "prompt", str, where), _truths(answers, wrap, f"{where} key 'ground_truth'"), i)


def _original(rec: dict, kind: str, i: int, where: str, wrap: bool) -> list[Fact]:
    locality = _get(rec, "locality", dict, where)
    cats = list(locality) if kind == "wiki_recent" else ["Relation_Specificity"]
    facts = []
    for cat in cats:
        items = _get(locality, cat, list, f"{where} key 'locality'")
        facts += [_locality_fact(item, i, f"{where} locality.{cat}[{j}]", wrap, kind == "wiki_recent")
                  for j, item in enumerate(items)]
    return facts


def load_knowedit(path: str | os.PathLike, *, kind: str | None = None, wrap_strings: bool = True) -> KnowEditFacts:
    """Continual and original facts of a KnowEdit ``test.json`` in file order (module docstring).

    Raises:
      ValueError: invalid JSON, an unknown kind, or a malformed record (the message names the file, the record
        index and the key).
    """
    data = read_json(path)
    name = os.fspath(path)
    if not isinstance(data, list) or not data:
        raise ValueError(f"{name}: expected a non-empty JSON list of records")
    kind = kind or detect_kind(data[0], f"{name} record 0")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    continual, original = [], []
    for i, rec in enumerate(data):
        where = f"{name} record {i}"
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        continual += _continual(rec, kind, i, where, wrap_strings)
        original += _original(rec, kind, i, where, wrap_strings)
    return KnowEditFacts(kind, tuple(continual), tuple(original))


# ------------------------------------------------------------------------------------------------ augmentation


def training_pairs(facts: tuple[Fact, ...]) -> list[tuple[str, str]]:
    """(text, truth) training pairs without augmentation: the prompts themselves."""
    return [(f.prompt, t) for f in facts for t in f.truths]


def _rewrites(entry, where: str) -> list[str]:
    rewrites = entry if isinstance(entry, list) else _get(entry, "rewrites", list, where)
    bad = next((i for i, r in enumerate(rewrites) if not isinstance(r, str)), None)
    if bad is not None:
        raise ValueError(f"{where}: rewrite {bad} must be a string, got {rewrites[bad]!r:.60}")
    if not rewrites:
        raise ValueError(f"{where}: no rewrites; the query's fact would never be trained")
    return rewrites


def _check_query(entry, fact: Fact, truth: str, where: str) -> None:
    if not isinstance(entry, dict):
        return
    for key, want in (("prompt", fact.prompt), ("truth", truth)):
        if key in entry and entry[key] != want:
            raise ValueError(f"{where}: {key} {entry[key]!r} does not match the query's {want!r}")


def augmented_pairs(path: str | os.PathLike, facts: tuple[Fact, ...], *,
                    align: str = "per_truth") -> list[tuple[str, str]]:
    """(rewrite, truth) training pairs from an augmentation file (module docstring).

    Raises:
      ValueError: invalid JSON, a malformed entry, an entry whose prompt/truth disagrees with its query
        (per_truth), or an entry count different from the number of (fact, truth) queries.
    """
    if align not in ALIGNS:
        raise ValueError(f"align must be one of {ALIGNS}, got {align!r}")
    entries, name = read_json(path), os.fspath(path)
    queries = [(f, t) for f in facts for t in f.truths]
    if not isinstance(entries, list) or len(entries) != len(queries):
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise ValueError(f"{name}: expected a list of {len(queries)} entries (one per fact and truth), got {got}")
    pairs = []
    if align == "per_truth":
        for q, (entry, (fact, truth)) in enumerate(zip(entries, queries)):
            _check_query(entry, fact, truth, f"{name} entry {q}")
            pairs += [(r, truth) for r in _rewrites(entry, f"{name} entry {q}")]
    else:  # the reference: results[i] for example i, every rewrite paired with every truth of example i
        if len(entries) < len(facts):
            raise ValueError(f"{name}: per_example alignment needs >= {len(facts)} entries, got {len(entries)}")
        for i, fact in enumerate(facts):
            pairs += [(r, t) for r in _rewrites(entries[i], f"{name} entry {i}") for t in fact.truths]
    return pairs


# ------------------------------------------------------------------------------------------------ tokenisation


def _encode(tokenizer, texts: list[str]) -> list[list[int]]:
    return list(tokenizer(texts, add_special_tokens=True)["input_ids"]) if texts else []


def encode_pairs(pairs: list[tuple[str, str]], tokenizer) -> tuple[list[np.ndarray], np.ndarray]:
    """tok(text) + tok(" " + truth) + [EOS] per pair, and idx = len(tok(text)) (int32)."""
    texts = _encode(tokenizer, [p for p, _ in pairs])
    answers = _encode(tokenizer, [" " + t for _, t in pairs])
    eos = tokenizer.eos_token_id
    docs = [np.asarray(p + a + [eos], np.int32) for p, a in zip(texts, answers)]
    return docs, np.asarray([len(p) for p in texts], np.int32)


def encode_test(facts: tuple[Fact, ...], tokenizer) -> TestSequences:
    """The test sequences of ``facts`` (one per truth, file order) and their answer starts."""
    docs, idx = encode_pairs(training_pairs(facts), tokenizer)
    return TestSequences(tuple(docs), idx)


def question_docs(facts: tuple[Fact, ...], tokenizer) -> list[np.ndarray]:
    """tok(prompt) + [EOS] per fact: the source documents of real STOC (§6.3: the question only, no answer)."""
    eos = tokenizer.eos_token_id
    return [np.asarray(ids + [eos], np.int32) for ids in _encode(tokenizer, [f.prompt for f in facts])]
