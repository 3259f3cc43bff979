"""Tokenisation with object masks and right-padded batches for the continual-knowledge-learning benchmarks
(spec taalm.md §1 "Tokenizer rules", §4.1, §5.5, §6).

* A BOS is prepended (the family's ``<|endoftext|>``, i.e. the tokenizer's EOS id) so that every content token is
  a target; ``bos=False`` turns it off. No EOS is appended.
* Object mask (token space: 1 on the tokens that spell the object). Default ``char_span``: the tokens whose
  character span (offset mapping) overlaps the **last** occurrence of the object string. ``reference``: the last
  exact token-subsequence match of the object tokenised with a leading space (the reference scans from the end).
  Objects are always tokenised without special tokens and no leading id is dropped. Empty masks are counted.
* Batches are right-padded with explicit masks: ``tokens``, ``attention_mask``, ``target_mask`` (the project's
  ``a[s−1]·a[s]`` or the reference's ``a[s−1]``, ``taalm.twppl.target_mask``) and ``object_mask``; positions are
  ``arange`` (right padding leaves the real tokens' positions unchanged).
"""

from __future__ import annotations

import dataclasses

import numpy as np

OBJECT_MODES = ("char_span", "reference")


@dataclasses.dataclass(frozen=True)
class Encoded:
    """Token ids and object masks of a list of texts.

    Attributes:
        ids: one int32 array per text (BOS included when requested).
        object_mask: one float32 array per text, 1 on the object's tokens (all zero when the object is absent).
        empty: how many texts got an empty object mask.
    """

    ids: tuple[np.ndarray, ...]
    object_mask: tuple[np.ndarray, ...]
    empty: int

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def max_len(self) -> int:
        return max((len(x) for x in self.ids), default=0)

    def select(self, rows) -> "Encoded":
        rows = [int(r) for r in rows]
        masks = tuple(self.object_mask[r] for r in rows)
        return Encoded(tuple(self.ids[r] for r in rows), masks, sum(1 for m in masks if not m.any()))


def _find_last(ids: list[int], sub: list[int]) -> int:
    for i in range(len(ids) - len(sub), -1, -1):
        if sub and ids[i:i + len(sub)] == sub:
            return i
    return -1


def _char_span_mask(offsets, text: str, obj: str) -> np.ndarray:
    mask = np.zeros(len(offsets), np.float32)
    start = text.rfind(obj) if obj else -1
    if start < 0:
        return mask
    end = start + len(obj)
    for i, (a, b) in enumerate(offsets):
        if a < end and b > start and b > a:
            mask[i] = 1.0
    return mask


def encode(tokenizer, texts, objects=None, *, bos: bool = True, max_length: int = 512,
           object_mode: str = "char_span") -> Encoded:
    """Tokenise ``texts`` (truncated to ``max_length`` tokens, BOS included) with the object mask of each.

    Args:
        objects: one object string per text, or None (all-zero masks, not counted as empty).
        object_mode: ``char_span`` (default) or ``reference`` (module docstring).

    Raises:
        ValueError: unknown mode, mismatched lengths, or ``max_length`` < 2.
    """
    texts = list(texts)
    if object_mode not in OBJECT_MODES:
        raise ValueError(f"object_mode must be one of {OBJECT_MODES}, got {object_mode!r}")
    if objects is not None and len(objects) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(objects)} objects")
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    prefix = [int(tokenizer.eos_token_id)] if bos else []
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    ids_out, masks, empty = [], [], 0
    for i, (ids, offsets) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
        ids = (prefix + list(ids))[:max_length]
        if objects is None:
            mask = np.zeros(len(ids), np.float32)
        elif object_mode == "char_span":
            mask = np.concatenate([np.zeros(len(prefix), np.float32), _char_span_mask(offsets, texts[i], objects[i])])
        else:
            mask = np.zeros(len(ids), np.float32)
            sub = list(tokenizer(" " + objects[i], add_special_tokens=False)["input_ids"])
            j = _find_last(ids, sub)
            if j >= 0:
                mask[j:j + len(sub)] = 1.0
        mask = mask[:len(ids)]
        if objects is not None and not mask.any():
            empty += 1
        ids_out.append(np.asarray(ids, np.int32))
        masks.append(mask)
    return Encoded(tuple(ids_out), tuple(masks), empty)


def pad_batch(enc: Encoded, rows, *, length: int | None = None, pad_id: int = 0,
              reference_mask: bool = False) -> dict[str, np.ndarray]:
    """Right-padded numpy batch of ``rows`` of ``enc`` (``length`` default: the longest row).

    Returns:
        ``tokens`` (int32), ``attention_mask`` (int32), ``positions`` (int32 arange), ``target_mask`` and
        ``object_mask`` (float32), all ``B S``. ``target_mask`` is the project's ``a[s−1]·a[s]`` or, with
        ``reference_mask``, the reference's ``a[s−1]``.
    """
    rows = [int(r) for r in rows]
    s = length if length is not None else max(len(enc.ids[r]) for r in rows)
    b = len(rows)
    tokens = np.full((b, s), pad_id, np.int32)
    att = np.zeros((b, s), np.int32)
    obj = np.zeros((b, s), np.float32)
    for i, r in enumerate(rows):
        n = len(enc.ids[r])
        if n > s:
            raise ValueError(f"row {r} has {n} tokens, more than the batch length {s}")
        tokens[i, :n], att[i, :n], obj[i, :n] = enc.ids[r], 1, enc.object_mask[r]
    prev = np.concatenate([np.zeros((b, 1), np.int32), att[:, :-1]], axis=1)
    target = prev if reference_mask else prev * att
    positions = np.broadcast_to(np.arange(s, dtype=np.int32), (b, s)).copy()
    return {"tokens": tokens, "attention_mask": att, "positions": positions,
            "target_mask": target.astype(np.float32), "object_mask": obj * att}
