"""The Biography world seen by the theory: examples (object occurrences), objects, slots of token types, facts.

Examples come from a split packed in file order (``DataBundle.eval[split]`` where it exists: packed like
training, no document masking, with FTA targets): every first value token at (chunk c, position p) is one
example, its query at p − 1 (the position whose logits predict the value), its context the document's tokens in
that chunk up to the query (a document that began in an earlier chunk is cut at the chunk start, as the model
sees it). The same examples
feed the co-occurrence counts (``cooccurrence.py``) and the attention measurement (``attention.py``), so the DI
and the attention of a token type describe the same (token, object) pairs.

Objects (switch ``objects``): ``value`` — the fact's object, one per (attribute, value string), the default — or
``first_token`` — the token the model predicts at the query. Object ids index a vocabulary built over every
person of the world (PT and CPT populations), so counts of two corpora share one object axis.

Slots of token types (the colours of the scatter plots): a token of the template vocabulary (the literal words and
punctuation of the sentence templates) is ``relation`` when only one attribute's templates use it and ``template``
otherwise; any other token is ``name`` or ``object`` by where most of its occurrences lie (inside a person's name
or inside a value span); EOS and unused tokens are ``other``.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from cfka_jax.data.biography import load_templates
from cfka_jax.data.packing import FtaTargets, Packed, fta_targets, pack
from cfka_jax.data.pipeline import DataBundle
from cfka_jax.data.templates import ATTRIBUTES

OBJECT_KINDS = ("value", "first_token")
SLOTS = ("name", "relation", "template", "object", "other")


@dataclasses.dataclass(frozen=True)
class Examples:
    """Object occurrences of one packed split (module docstring); int arrays of length E.

    Attributes:
      chunk, query, start: chunk, query position and context start of each example.
      objects: object id; doc: source document (row of the tokenised split); pid: person id; attr: attribute.
    """

    chunk: np.ndarray
    query: np.ndarray
    start: np.ndarray
    objects: np.ndarray
    doc: np.ndarray
    pid: np.ndarray
    attr: np.ndarray

    def contexts(self, tokens_BS: np.ndarray) -> list[np.ndarray]:
        """The context tokens of every example (chunk positions start … query)."""
        return [tokens_BS[c, s:q + 1] for c, s, q in zip(self.chunk, self.start, self.query)]

    def facts(self) -> np.ndarray:
        """(E, 2) fact key (person id, attribute) of each example."""
        return np.stack([self.pid, self.attr], axis=1)


def _value_ids(bundle: DataBundle, value: str) -> list[int]:
    return list(bundle.tokenizer(" " + value, add_special_tokens=False)["input_ids"])


def object_vocabulary(bundle: DataBundle, objects: str = "value") -> dict:
    """Object key → id over every person of the world (sorted keys): (attribute, value) or the first value token."""
    if objects not in OBJECT_KINDS:
        raise ValueError(f"objects must be one of {OBJECT_KINDS}, got {objects!r}")
    keys = {(a, v) for p in bundle.world.people for a, v in enumerate(p.values)}
    if objects == "first_token":
        keys = {_value_ids(bundle, v)[0] for _, v in keys}
    return {k: i for i, k in enumerate(sorted(keys))}


def packed_split(bundle: DataBundle, split: str) -> tuple[Packed, FtaTargets]:
    """``split`` packed in file order with its FTA targets: the bundle's evaluation pack, or packed here for a
    split that has none (``cpt_train``), with the same chunk length, EOS and document masking."""
    if split in bundle.eval:
        return bundle.eval[split]
    tok = bundle.splits[split]
    packed = pack(tok.docs(), bundle.config.seq_len, bundle.eos_id, doc_mask=bundle.config.doc_mask)
    return packed, fta_targets(packed, tok.idx)


def examples(bundle: DataBundle, split: str, vocab: dict, objects: str = "value") -> Examples:
    """Every value occurrence of ``split`` packed in file order (:func:`packed_split`) as an example."""
    packed, targets = packed_split(bundle, split)
    tok = bundle.splits[split]
    pid = tok.pid[targets.doc]
    if objects == "value":
        obj = [vocab[(int(a), bundle.world.people[int(p)].values[int(a)])] for p, a in zip(pid, targets.attr)]
    else:
        obj = [vocab[int(t)] for t in targets.token]
    start = np.maximum(packed.doc_starts[targets.doc] - targets.chunk.astype(np.int64) * packed.seq_len, 0)
    return Examples(targets.chunk.astype(np.int64), targets.pos.astype(np.int64) - 1, start.astype(np.int64),
                    np.asarray(obj, np.int64), targets.doc.astype(np.int64), pid.astype(np.int64),
                    targets.attr.astype(np.int64))


def template_vocabulary(bundle: DataBundle) -> dict[int, set[int]]:
    """Token id → the attributes whose templates contain it (literal template text, at and after a sentence
    start)."""
    out: dict[int, set[int]] = {}
    for a, temps in enumerate(load_templates(bundle.world.config).by_attribute):
        for template in temps:
            for piece in re.split(r"\[[^\[\]]*\]", template):
                if not piece.strip():
                    continue
                for text in (piece.strip(), " " + piece.strip(), piece.rstrip()):
                    for t in bundle.tokenizer(text, add_special_tokens=False)["input_ids"]:
                        out.setdefault(int(t), set()).add(a)
    return out


def _name_positions(doc: np.ndarray, name_variants: list[list[int]]) -> np.ndarray:
    hit = np.zeros(len(doc), bool)
    ids = doc.tolist()
    for sub in name_variants:
        m = len(sub)
        for i in range(len(ids) - m + 1):
            if ids[i:i + m] == sub:
                hit[i:i + m] = True
    return hit


def token_slots(bundle: DataBundle, split: str = "pt_train") -> np.ndarray:
    """Slot index (into ``SLOTS``) of every token id, from the documents of ``split`` (module docstring)."""
    tok, vocab_size = bundle.splits[split], len(bundle.tokenizer)
    votes = np.zeros((vocab_size, 2), np.int64)  # occurrences inside a name, inside a value
    for d in range(len(tok)):
        doc, person = tok.doc(d), bundle.world.people[int(tok.pid[d])]
        variants = [list(bundle.tokenizer(t, add_special_tokens=False)["input_ids"])
                    for t in (person.fullname, " " + person.fullname)]
        in_name = _name_positions(doc, variants)
        in_value = np.zeros(len(doc), bool)
        for a in range(len(ATTRIBUTES)):
            in_value[tok.idx[d, a]:tok.idx2[d, a]] = True
        np.add.at(votes, (doc[in_name & ~in_value], 0), 1)
        np.add.at(votes, (doc[in_value], 1), 1)
    slots = np.where(votes[:, 0] >= votes[:, 1], SLOTS.index("name"), SLOTS.index("object"))
    slots[votes.sum(axis=1) == 0] = SLOTS.index("other")
    for t, attrs in template_vocabulary(bundle).items():
        slots[t] = SLOTS.index("relation" if len(attrs) == 1 else "template")
    return slots


def sentence_start(idx_A: np.ndarray, idx2_A: np.ndarray, attr: int) -> int:
    """Document position where the sentence of attribute ``attr`` begins: one past the end-of-sentence token after
    the nearest earlier value (value spans ``idx … idx2`` exclusive; the token at ``idx2`` ends its sentence), or 0
    for the document's first sentence. Every Biography sentence holds one value, so the span sentence_start …
    idx[attr] − 1 is exactly that fact's subject + relation tokens (the name and the template words around it)."""
    ends = idx2_A[idx2_A < idx_A[attr]]
    return int(ends.max()) + 1 if ends.size else 0


def fact_starts(bundle: DataBundle, split: str, ex: Examples) -> np.ndarray:
    """Chunk position where each example's fact span begins (:func:`sentence_start`), cut at the chunk start like
    the context; int64 (E,). The span fact … query of example k is its sentence up to the value."""
    packed, _ = packed_split(bundle, split)
    tok = bundle.splits[split]
    sent = np.array([sentence_start(tok.idx[d], tok.idx2[d], a) for d, a in zip(ex.doc, ex.attr)], np.int64)
    in_chunk = packed.doc_starts[ex.doc] + sent - ex.chunk * packed.seq_len
    return np.maximum(in_chunk, ex.start).astype(np.int64)
