"""MinHash LSH deduplication of replay texts."""

import numpy as np
import pytest

from cfka_jax.continual.dedup import MinHashConfig, minhash_keep, shingles

WORDS = ("anna was born on march 3 1970 in boston she studied physics at mit and worked for acme in denver "
         "her major was physics and she lived in colorado for many years before moving to a small town").split()


def test_shingles_are_word_ngrams():
    assert shingles("a b c", 5) == {b"a b c"}
    assert shingles("a b c d e f", 5) == {b"a b c d e", b"b c d e f"}
    assert shingles("   ", 5) == set()


def test_exact_and_near_duplicates_dropped_first_kept():
    text = " ".join(WORDS)
    near = " ".join(WORDS[:-1] + ["city"])  # one shingle of 33 differs: Jaccard 32/34
    other = " ".join(reversed(WORDS))
    keep = minhash_keep([text, other, text, near, "short text"])
    np.testing.assert_array_equal(keep, [True, True, False, False, True])


def test_dissimilar_texts_all_kept():
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=30)) for _ in range(20)]
    assert minhash_keep(texts).all()


def test_config_validation():
    with pytest.raises(ValueError, match="threshold"):
        MinHashConfig(threshold=1.0)
    with pytest.raises(ValueError, match="ngram"):
        MinHashConfig(ngram=0)
