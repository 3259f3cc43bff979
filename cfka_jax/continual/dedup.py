"""Near-duplicate removal of generated replay texts with MinHash LSH (spec cfka_stoc.md §6.4, decision #21).

A text's shingles are its word n-grams (n = 5 by default; a text of fewer than n words is one shingle of all its
words, an empty text has none). Each text gets a MinHash signature of ``num_perm`` permutations (datasketch),
whose slot-wise agreement rate estimates the Jaccard similarity |A ∩ B| / |A ∪ B| of two shingle sets. Texts are
visited in order; a text is dropped when the LSH index (banding tuned by datasketch for ``threshold``) returns
an already kept text, otherwise it is kept and inserted. So the first of a near-duplicate group survives. LSH
is approximate: a pair just above the threshold may be missed and one just below may be caught.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class MinHashConfig:
    """Shingle size, permutations, LSH Jaccard threshold and the permutation seed."""

    ngram: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    seed: int = 1

    def __post_init__(self):
        if self.ngram < 1 or self.num_perm < 2:
            raise ValueError(f"ngram must be >= 1 and num_perm >= 2, got {self.ngram}, {self.num_perm}")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")


def shingles(text: str, ngram: int) -> set[bytes]:
    """The set of word ``ngram``-grams of ``text`` (whitespace words), UTF-8 encoded."""
    words = text.split()
    if not words:
        return set()
    if len(words) <= ngram:
        return {" ".join(words).encode()}
    return {" ".join(words[i:i + ngram]).encode() for i in range(len(words) - ngram + 1)}


def minhash_keep(texts: list[str], cfg: MinHashConfig = MinHashConfig()) -> np.ndarray:
    """Bool mask of the texts kept by in-order MinHash LSH deduplication (module docstring)."""
    from datasketch import MinHash, MinHashLSH

    sigs = MinHash.bulk([sorted(shingles(t, cfg.ngram)) for t in texts], num_perm=cfg.num_perm, seed=cfg.seed)
    lsh = MinHashLSH(threshold=cfg.threshold, num_perm=cfg.num_perm)
    keep = np.zeros(len(texts), bool)
    for i, sig in enumerate(sigs):
        if sig.is_empty() or lsh.query(sig):
            continue
        lsh.insert(str(i), sig)
        keep[i] = True
    return keep
