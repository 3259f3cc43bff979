"""Tokenisation and value location (spec cfka_stoc.md §3.5; decisions §11 row 5).

Two tokenizer sources, both used through the ``transformers`` fast-tokenizer call:

* ``train_word_tokenizer``: a word-level tokenizer trained with the ``tokenizers`` library on the generated
  corpus. The pre-tokenizer splits text into words and single punctuation marks, each keeping its leading
  space (GPT-2 style: "born in New York, NY." → "born", " in", " New", " York", ",", " NY", "."), so
  tokenising " " + value gives exactly the tokens the value has inside a sentence, and decoding (``Fuse``) is
  lossless. Special tokens: ``<|endoftext|>`` (EOS, id 0, also the pad token) and ``<|unk|>`` (id 1). Saved
  with ``save_pretrained`` (``tokenizer.json`` + config) and loadable as ``PreTrainedTokenizerFast``.
* ``load_tokenizer``: any local HF tokenizer folder (``AutoTokenizer``, ``local_files_only=True``), e.g. Pythia's.

Biography ids = tokenizer(bio, add_special_tokens=True, truncation=True, max_length=512) + [EOS]. Value location:
tokenise " " + value without special tokens and take the **first** exact subsequence match in the biography ids
(an identical earlier token run wins, as in the reference); store the start ``idx`` and exclusive end ``idx2`` per
attribute. A missing match raises, naming the person and attribute.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from cfka_jax import jsonio
from cfka_jax.data.biography import Biography, Person
from cfka_jax.data.templates import ATTRIBUTES

EOS_TOKEN = "<|endoftext|>"
UNK_TOKEN = "<|unk|>"
PLAIN_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
"""``tokenizer_class`` values of a folder that holds nothing but a ``tokenizer.json`` and its special tokens."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model")
"""A tokenizer folder must hold at least one of these vocabulary files."""
PROBE_TEXT = "The cat sat on the mat."
"""Must encode to at least one token: catches empty or mismatched vocabularies that encode every text to []."""
WORD_PATTERN = r" ?\w+| ?[^\w\s]|\s+"
"""Pre-tokenizer pieces: a word or one punctuation mark, each with its optional leading space; other whitespace."""


BPE_MIN_VOCAB = 256
"""The smallest BPE vocabulary accepted: the corpus's characters (with and without a leading space) plus merges."""


def train_word_tokenizer(texts, folder: str | os.PathLike, *, bpe_vocab: int | None = None):
    """Train, save and reload the project's tokenizer on ``texts``: word-level, or BPE with ``bpe_vocab`` entries.

    Both share the pre-tokenizer (words and single punctuation marks with their leading space), so a value
    tokenised as ``" " + value`` has exactly the tokens it has inside a sentence, and decoding is lossless. The
    word-level tokenizer gives every word of the corpus its own token; BPE splits rare words (most names) into
    pieces shared between names, as a real LM tokenizer does.

    Args:
      texts: an iterable of strings (the whole corpus: every word, or every character for BPE, enters the
        vocabulary).
      folder: where ``tokenizer.json`` and the HF config files are written.
      bpe_vocab: None for word-level, else the BPE vocabulary size (>= ``BPE_MIN_VOCAB``, and no more than the
        corpus can make: a smaller tokenizer than the one asked for is an error, never recorded as the asked size).

    Returns:
      The saved tokenizer reloaded from ``folder`` (``PreTrainedTokenizerFast``); EOS id 0, pad = EOS.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [EOS_TOKEN, UNK_TOKEN]
    if bpe_vocab is None:
        tok = Tokenizer(models.WordLevel(unk_token=UNK_TOKEN))
        trainer = trainers.WordLevelTrainer(vocab_size=1 << 24, min_frequency=0, show_progress=False,
                                            special_tokens=specials)
    else:
        if not isinstance(bpe_vocab, int) or bpe_vocab < BPE_MIN_VOCAB:
            raise ValueError(f"bpe_vocab must be an integer >= {BPE_MIN_VOCAB}, got {bpe_vocab!r}")
        tok = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
        trainer = trainers.BpeTrainer(vocab_size=bpe_vocab, min_frequency=2, show_progress=False,
                                      special_tokens=specials)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.train_from_iterator(texts, trainer)
    if bpe_vocab is not None and tok.get_vocab_size() < bpe_vocab:  # before anything is written
        raise ValueError(f"bpe_vocab (--bpe-vocab) {bpe_vocab}: this corpus makes at most {tok.get_vocab_size()} "
                         f"BPE entries (characters + merges of pairs seen at least twice); ask for at most that")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
                                   unk_token=UNK_TOKEN, clean_up_tokenization_spaces=False)
    fast.save_pretrained(os.fspath(folder))
    return load_tokenizer(folder)


def load_tokenizer(folder: str | os.PathLike):
    """A local HF tokenizer folder via ``AutoTokenizer`` (no network); a folder saved as a plain
    ``PreTrainedTokenizerFast`` (the project's word-level tokenizer) is loaded as exactly that class.

    Raises:
      FileNotFoundError: no such folder (never a Hub lookup), or a folder without any of ``TOKENIZER_FILES``
        (``transformers`` would build an empty tokenizer that encodes every text to []).
      ValueError: an unreadable ``tokenizer_config.json`` or ``tokenizer.json`` (names the file and line), a
        tokenizer that encodes a plain English probe to no tokens, or one without an EOS token.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = _tokenizer_folder(folder)
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    tok_cfg = jsonio.read_json_object(cfg_path) if os.path.exists(cfg_path) else {}
    tok_path = os.path.join(folder, "tokenizer.json")
    if tok_cfg.get("tokenizer_class") in PLAIN_TOKENIZER_CLASSES:
        # A plain tokenizer.json: built directly, because from_pretrained consults config.json and, for some model
        # types (qwen2 in transformers 5), rebuilds that family's tokenizer from the vocabulary instead.
        specials = {k: tok_cfg[k] for k in ("eos_token", "pad_token", "unk_token", "bos_token") if tok_cfg.get(k)}
        tok = PreTrainedTokenizerFast(tokenizer_object=_read_tokenizer_json(tok_path),
                                      clean_up_tokenization_spaces=False, **specials)
        tok.name_or_path = folder
    else:
        try:
            tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as err:  # transformers raises anything from JSONDecodeError to OSError; name the file
            if os.path.exists(tok_path):
                _read_tokenizer_json(tok_path)
            raise ValueError(f"{folder}: cannot load the tokenizer ({type(err).__name__}: {err})") from err
    if not tok(PROBE_TEXT, add_special_tokens=False)["input_ids"]:
        raise ValueError(f"{folder}: the tokenizer encodes {PROBE_TEXT!r} to no tokens (an empty vocabulary, or "
                         f"files that do not match tokenizer_class {tok_cfg.get('tokenizer_class')!r})")
    if tok.eos_token_id is None:
        raise ValueError(f"{folder}: tokenizer has no eos_token")
    return tok


def _tokenizer_folder(folder: str | os.PathLike) -> str:
    folder = os.fspath(folder)
    if not os.path.exists(folder):
        raise FileNotFoundError(f"{folder}: no such tokenizer folder")
    if not os.path.isdir(folder):
        raise NotADirectoryError(f"{folder}: not a folder (a tokenizer folder holds tokenizer.json)")
    if not any(os.path.isfile(os.path.join(folder, name)) for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"{folder}: no tokenizer files (looked for {', '.join(TOKENIZER_FILES)})")
    return folder


def _read_tokenizer_json(path: str):
    """``tokenizers.Tokenizer.from_file`` with errors naming the file (and the line of a JSON syntax error)."""
    from tokenizers import Tokenizer

    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file (tokenizer_config.json names a plain tokenizer.json)")
    try:
        return Tokenizer.from_file(path)
    except Exception as err:  # tokenizers raises a bare Exception
        jsonio.read_json(path)  # a syntax, encoding or nesting error, named with its line
        raise ValueError(f"{path}: not a valid tokenizer.json ({err})") from None


@dataclasses.dataclass(frozen=True)
class TokenizedSplit:
    """Tokenised biographies of one split, stored flat (CSR): document i is ``tokens[offsets[i]:offsets[i+1]]``.

    Attributes:
      tokens: all ids concatenated, int32; every document ends with EOS.
      offsets: int64 document boundaries, length n+1.
      pid: int32 person id per document.
      number: int32 biography ``Number`` per document.
      idx: int32 (n, 5) start of " " + value per attribute (``ATTRIBUTES`` order), document-relative.
      idx2: int32 (n, 5) exclusive end.
    """

    tokens: np.ndarray
    offsets: np.ndarray
    pid: np.ndarray
    number: np.ndarray
    idx: np.ndarray
    idx2: np.ndarray

    def __post_init__(self):
        n = len(self.pid)
        if self.offsets.shape != (n + 1,) or self.offsets[-1] != len(self.tokens):
            raise ValueError(f"offsets must have {n + 1} entries ending at {len(self.tokens)}")
        for name in ("number", "idx", "idx2"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} rows, expected {n}")
        if self.idx.shape != (n, len(ATTRIBUTES)) or self.idx2.shape != self.idx.shape:
            raise ValueError(f"idx/idx2 must have shape ({n}, {len(ATTRIBUTES)})")

    def __len__(self) -> int:
        return len(self.pid)

    def doc(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def docs(self) -> list[np.ndarray]:
        return np.split(self.tokens, self.offsets[1:-1])

    def select(self, rows) -> "TokenizedSplit":
        """The documents ``rows`` (indices), in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        docs = [self.doc(int(i)) for i in rows]
        lens = np.array([len(d) for d in docs], dtype=np.int64)
        return TokenizedSplit(np.concatenate(docs).astype(np.int32) if docs else np.zeros(0, np.int32),
                              np.concatenate([[0], np.cumsum(lens)]), self.pid[rows], self.number[rows],
                              self.idx[rows], self.idx2[rows])


def find_first(ids: list[int], sub: list[int]) -> int:
    """Start of the first exact occurrence of ``sub`` in ``ids``, or −1."""
    if not sub:
        return -1
    first, n, m = sub[0], len(ids), len(sub)
    start = 0
    while True:
        try:
            i = ids.index(first, start, n - m + 1)
        except ValueError:
            return -1
        if ids[i:i + m] == sub:
            return i
        start = i + 1


def locate_values(ids: list[int], value_ids: list[list[int]], *, who: str) -> tuple[list[int], list[int]]:
    """(idx, idx2) of each attribute's value tokens in ``ids`` by first match.

    Raises:
      ValueError: a value has no match; the message names ``who`` and the attribute.
    """
    idx, idx2 = [], []
    for attr, sub in zip(ATTRIBUTES, value_ids):
        i = find_first(ids, sub)
        if i < 0:
            raise ValueError(f"value of attribute {attr!r} (tokens {sub}) not found in the biography of {who}")
        idx.append(i)
        idx2.append(i + len(sub))
    return idx, idx2


def tokenize_split(bios: tuple[Biography, ...], people: tuple[Person, ...], tokenizer, *,
                   max_length: int = 512, block: int = 8192) -> TokenizedSplit:
    """Tokenise biographies (+ EOS) and locate their five values (module docstring).

    Biographies are encoded ``block`` at a time and turned into numpy at once, so memory stays near the size of
    the int32 result even for the reference sizes.

    Raises:
      ValueError: a value is not found (e.g. cut off by ``max_length``) or the tokenizer produced unknown tokens.
    """
    value_cache: dict[str, list[int]] = {}

    def value_ids(v: str) -> list[int]:
        if v not in value_cache:
            value_cache[v] = list(tokenizer(" " + v, add_special_tokens=False)["input_ids"])
        return value_cache[v]

    n_attr = len(ATTRIBUTES)
    idx, idx2 = np.zeros((len(bios), n_attr), np.int32), np.zeros((len(bios), n_attr), np.int32)
    tokens, lens = [], []
    for lo in range(0, len(bios), block):
        part = bios[lo:lo + block]
        enc = tokenizer([b.text for b in part], add_special_tokens=True, truncation=True,
                        max_length=max_length)["input_ids"]
        for r, (b, ids) in enumerate(zip(part, enc)):
            ids.append(tokenizer.eos_token_id)
            person = people[b.pid]
            who = f"{person.fullname!r} (pid {b.pid}, Number {b.number})"
            idx[lo + r], idx2[lo + r] = locate_values(ids, [value_ids(v) for v in person.values], who=who)
        _check_no_unk(enc, tokenizer, lo)
        lens.extend(len(ids) for ids in enc)
        tokens.append(np.fromiter((t for ids in enc for t in ids), dtype=np.int32, count=sum(map(len, enc))))
    offsets = np.concatenate([[0], np.cumsum(np.array(lens, dtype=np.int64))]).astype(np.int64)
    return TokenizedSplit(np.concatenate(tokens) if tokens else np.zeros(0, np.int32), offsets,
                          np.array([b.pid for b in bios], np.int32), np.array([b.number for b in bios], np.int32),
                          idx, idx2)


def _check_no_unk(enc, tokenizer, first_row: int = 0) -> None:
    unk = tokenizer.unk_token_id
    if unk is None or tokenizer.unk_token != UNK_TOKEN:
        return  # a foreign tokenizer (byte-level BPE) has no unknown words
    for r, ids in enumerate(enc):
        if unk in ids:
            raise ValueError(f"biography row {first_row + r} holds words missing from the tokenizer vocabulary")
