"""Bring-your-own corpus: local text files → tokenised documents for continual pre-training.

Accepted inputs (nothing is downloaded):

* ``.txt``: documents separated by one or more blank (whitespace-only) lines; each document is stripped.
* ``.jsonl``: one JSON object per non-blank line; the document is the string field ``text_field``.
* ``.parquet``: the string column ``text_field`` (read with pyarrow).
* a folder: every ``.txt``/``.jsonl``/``.parquet`` file below it, recursively, in sorted path order; other files
  (README.md, hidden files) are ignored, but a folder without any corpus file is an error.
* a list of any of these, read in the given order.

Documents whose text is empty after stripping are skipped. Every other problem raises ``ValueError`` naming the
file and the line (txt/jsonl, 1-based), row (parquet, 0-based) and key: invalid UTF-8 or a NUL character (a
binary file), invalid JSON, a lone UTF-16 surrogate escape, JSON nested too deeply to decode, a line that is not an
object, a missing field, a non-string text, an unknown extension, a missing path, an empty corpus.

Tokenisation: ``ids = tokenizer(text)["input_ids"] + [EOS]`` (the tokenizer's own special tokens included, EOS
not doubled when the tokenizer already ends with it). With ``max_length`` a document of more than ``max_length``
tokens (EOS counted) is either truncated to its first ``max_length − 1`` tokens + EOS (``overflow="truncate"``,
the reference's ``model_max_length`` behaviour) or cut into consecutive pieces of at most ``max_length − 1``
tokens, each + EOS (``overflow="split"``, so no text is lost). Documents are int32 numpy arrays, the input of
``cfka_jax.data.batching.EpochBatcher`` and of the replay builders.

Truncation cuts the *text* before encoding, so a 16 MB line costs as much as its head: a fast tokenizer encodes a
character prefix (8 characters per wanted token + 64 at first, four times longer on each retry), and the prefix
is used only if at least ``max_length + 1`` of its tokens lie before the pieces a cut can change (its last
pre-tokenized word: a split word, a lookahead on trailing whitespace; the pieces of an added token such as
``<|endoftext|>`` cut in half, and the word before them; plus one word of margin); otherwise the prefix grows, up
to the whole text. The result equals encoding the whole text and then cutting it (tested on normal text and on
cuts placed inside special tokens, whitespace runs and long words).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from collections.abc import Iterable, Sequence

import numpy as np

from cfka_jax import jsonio
from cfka_jax.jsonio import iter_jsonl

SUFFIXES = (".txt", ".jsonl", ".parquet")
PathLike = str | os.PathLike
_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*\n")
_CHARS_PER_TOKEN = 8
"""First guess of characters per token when cutting a text before encoding (English BPE averages about 4)."""
_CUT_MARGIN = 64
"""Characters added to that first guess, so that short limits still see a few words past the kept tokens."""


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    """How a corpus is read and tokenised.

    Attributes:
      text_field: the jsonl field / parquet column holding the document text.
      max_length: the most tokens per document, EOS included (None: no limit).
      overflow: "truncate" (keep the head of a long document) or "split" (cut it into pieces).
      block: documents per tokenizer call (memory stays near the size of the result).
    """

    text_field: str = "text"
    max_length: int | None = 256
    overflow: str = "truncate"
    block: int = 1024

    def __post_init__(self):
        if not self.text_field:
            raise ValueError("text_field must be a non-empty name")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length must be >= 2 (one token + EOS) or None, got {self.max_length}")
        if self.overflow not in ("truncate", "split"):
            raise ValueError(f"overflow must be 'truncate' or 'split', got {self.overflow!r}")
        if self.block < 1:
            raise ValueError(f"block must be >= 1, got {self.block}")


# ------------------------------------------------------------------------------------------------------ reading


def corpus_files(paths: PathLike | Sequence[PathLike]) -> list[pathlib.Path]:
    """The corpus files named by ``paths`` (files in order; folders expanded recursively and sorted).

    Raises:
      ValueError: a path does not exist, a named file has an unknown extension, or a folder holds no corpus file.
    """
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise ValueError("no corpus paths given")
    files = []
    for item in map(pathlib.Path, items):
        if item.is_dir():
            found = sorted(p for p in item.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                           and not any(part.startswith(".") for part in p.relative_to(item).parts))
            if not found:
                seen = sorted({p.suffix or p.name for p in item.rglob("*") if p.is_file()})
                raise ValueError(f"{item}: folder holds no {'/'.join(SUFFIXES)} file (found: {seen or 'nothing'})")
            files.extend(found)
        elif item.is_file():
            if item.suffix not in SUFFIXES:
                raise ValueError(f"{item}: unknown corpus file extension {item.suffix!r}; expected one of {SUFFIXES}")
            files.append(item)
        else:
            raise ValueError(f"{item}: no such file or folder")
    return files


def read_txt(path: PathLike) -> list[str]:
    """Documents of a text file: blocks separated by blank lines, stripped, empty blocks dropped.

    Line ends ``\r\n`` and ``\r`` read as ``\n`` (Python's universal newlines).

    Raises:
      ValueError: invalid UTF-8 or a NUL character (a binary file), naming the file and line.
    """
    text = jsonio.read_text(path).replace("\r\n", "\n").replace("\r", "\n")
    return [doc.strip() for doc in _BLANK_LINES.split(text) if doc.strip()]


def read_jsonl(path: PathLike, text_field: str = "text") -> list[str]:
    """The ``text_field`` string of every non-blank line of a JSON-lines file (empty texts dropped).

    Raises:
      ValueError: naming the file and 1-based line for invalid UTF-8 or JSON, a lone surrogate, nesting too deep,
        a non-object line, a missing field or a non-string value.
    """
    docs = []
    for where, record in iter_jsonl(path):
        if text_field not in record:
            raise ValueError(f"{where}: missing field {text_field!r} (keys: {sorted(record)})")
        text = record[text_field]
        if not isinstance(text, str):
            raise ValueError(f"{where}: field {text_field!r} must be a string, got {type(text).__name__}")
        if text.strip():
            docs.append(text.strip())
    return docs


def read_parquet(path: PathLike, text_field: str = "text") -> list[str]:
    """The ``text_field`` column of a Parquet file (empty texts dropped).

    Raises:
      ValueError: naming the file for a missing or non-string column, and the 0-based row of a null value or of
        invalid UTF-8.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as err:
        raise ValueError(f"{path}: not a readable Parquet file ({err})") from err
    if text_field not in schema.names:
        raise ValueError(f"{path}: missing column {text_field!r} (columns: {schema.names})")
    kind = schema.field(text_field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ValueError(f"{path}: column {text_field!r} must hold strings, got type {kind}")
    try:
        table = pq.read_table(path, columns=[text_field])
    except (pa.ArrowException, OSError) as err:
        raise ValueError(f"{path}: not a readable Parquet file ({err})") from err
    try:
        column = table.column(text_field).to_pylist()
    except UnicodeDecodeError:
        raw = table.column(text_field).cast(pa.binary()).to_pylist()
        row = next(i for i, b in enumerate(raw) if b is not None and not _is_utf8(b))
        raise ValueError(f"{path}, row {row}: column {text_field!r} holds invalid UTF-8") from None
    docs = []
    for row, text in enumerate(column):
        if text is None:
            raise ValueError(f"{path}, row {row}: column {text_field!r} is null")
        if text.strip():
            docs.append(text.strip())
    return docs


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_texts(paths: PathLike | Sequence[PathLike], *, text_field: str = "text") -> list[str]:
    """Every document text of the corpus ``paths`` (module docstring), in file order.

    Raises:
      ValueError: any reading problem (module docstring), or no document at all.
    """
    files = corpus_files(paths)
    docs = []
    for path in files:
        if path.suffix == ".txt":
            docs.extend(read_txt(path))
        elif path.suffix == ".jsonl":
            docs.extend(read_jsonl(path, text_field))
        else:
            docs.extend(read_parquet(path, text_field))
    if not docs:
        raise ValueError(f"empty corpus: no non-empty document in {[str(p) for p in files]}")
    return docs


# ------------------------------------------------------------------------------------------------- tokenisation


def _finish(ids: list[int], eos_id: int, max_length: int | None, overflow: str) -> list[np.ndarray]:
    """One document's ids → its EOS-terminated piece(s) of at most ``max_length`` tokens."""
    if ids and ids[-1] == eos_id:
        ids = ids[:-1]
    if max_length is None or len(ids) < max_length:
        return [np.asarray(ids + [eos_id], np.int32)]
    body = max_length - 1
    if overflow == "truncate":
        return [np.asarray(ids[:body] + [eos_id], np.int32)]
    return [np.asarray(ids[i:i + body] + [eos_id], np.int32) for i in range(0, len(ids), body)]


def _stable_tokens(word_ids: list[int | None], offsets: list[tuple[int, int]], safe_end: int) -> int:
    """How many leading tokens of an encoded prefix cannot change when the rest of the text follows.

    A cut can change the prefix's last pre-tokenized word (a split word, a lookahead on trailing whitespace) and,
    when it falls inside an added token such as ``<|endoftext|>``, every piece after ``safe_end`` (the cut minus
    the longest added token) and the word before them. One more word is held back as a margin. Special tokens
    (word id None) count where they sit.
    """
    words = [w for w in word_ids if w is not None]
    if not words:
        return 0
    first_late = next((w for w, (_, end) in zip(word_ids, offsets) if w is not None and end > safe_end), max(words))
    limit = first_late - 1
    return next((i for i, w in enumerate(word_ids) if w is not None and w >= limit), len(word_ids))


def _encode_heads(texts: list[str], tokenizer, max_length: int) -> list[list[int]]:
    """Ids of each text, cut before encoding (module docstring): either the whole text's ids, or its first
    ``max_length + 1`` ids when the text is longer; ``_finish(..., "truncate")`` gives the same either way."""
    if not getattr(tokenizer, "is_fast", False):  # no word ids to check a cut against: encode whole texts
        return [list(ids) for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]]
    longest_added = max((len(t.content) for t in tokenizer.added_tokens_decoder.values()), default=0)
    out: list[list[int] | None] = [None] * len(texts)
    pending, chars = list(range(len(texts))), _CHARS_PER_TOKEN * max_length + _CUT_MARGIN
    while pending:
        enc = tokenizer([texts[i][:chars] for i in pending], add_special_tokens=True, return_offsets_mapping=True)
        retry = []
        for row, i in enumerate(pending):
            ids = list(enc["input_ids"][row])
            if len(texts[i]) <= chars:
                out[i] = ids
            elif _stable_tokens(enc.word_ids(row), enc["offset_mapping"][row], chars - longest_added) > max_length:
                out[i] = ids[:max_length + 1]
            else:
                retry.append(i)
        pending, chars = retry, chars * 4
    return out


def tokenize_texts(texts: Iterable[str], tokenizer, cfg: CorpusConfig = CorpusConfig()) -> list[np.ndarray]:
    """Token ids (+ EOS) of each text as int32 arrays; long documents truncated or split (module docstring).

    Args:
      texts: document strings.
      tokenizer: any HF tokenizer with an ``eos_token_id``.
      cfg: max length and overflow rule (``text_field`` is not used here).

    Raises:
      ValueError: the tokenizer has no EOS token, or there are no texts.
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token; documents need an EOS separator")
    texts = list(texts)
    if not texts:
        raise ValueError("empty corpus: no text to tokenise")
    docs = []
    for lo in range(0, len(texts), cfg.block):
        block = texts[lo:lo + cfg.block]
        if cfg.overflow == "truncate" and cfg.max_length:
            enc = _encode_heads(block, tokenizer, cfg.max_length)
        else:
            enc = tokenizer(block, add_special_tokens=True)["input_ids"]
        for ids in enc:
            docs.extend(_finish(list(ids), eos, cfg.max_length, cfg.overflow))
    return docs


def load_corpus(paths: PathLike | Sequence[PathLike], tokenizer, cfg: CorpusConfig = CorpusConfig()
                ) -> list[np.ndarray]:
    """Read (``read_texts``) and tokenise (``tokenize_texts``) a local corpus."""
    return tokenize_texts(read_texts(paths, text_field=cfg.text_field), tokenizer, cfg)


def split_heldout(docs: Sequence, fraction: float, seed: int) -> tuple[list, list]:
    """(train, held-out) documents (texts or token arrays): a seeded random ``fraction`` of them (at least one)
    held out.

    Both parts keep the input order. Raises ValueError unless 0 < fraction < 1 and at least two documents.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"held-out fraction must be in (0, 1), got {fraction}")
    if len(docs) < 2:
        raise ValueError(f"need at least two documents to hold one out, got {len(docs)}")
    n_out = min(max(1, round(fraction * len(docs))), len(docs) - 1)
    held = np.zeros(len(docs), bool)
    held[np.random.default_rng(seed).choice(len(docs), size=n_out, replace=False)] = True
    return [d for d, h in zip(docs, held) if not h], [d for d, h in zip(docs, held) if h]
