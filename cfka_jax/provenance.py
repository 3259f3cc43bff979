"""Provenance of artefacts a later command consumes (φ folders, replay corpora, ensembles, run folders).

An artefact records what it was made from as a flat ``{"what": fingerprint}`` dict (``"tokenizer"``: the content
hash of the tokenizer, :func:`tokenizer_fingerprint`; ``"world"``: the hash of the world config, ``"parent_run"`` / ``"parent_step"``:
the identity of the run whose parameters it started from and their step). A consumer builds the same dict from what
it has and calls :func:`check_made_from`, which refuses any difference, and an artefact that records nothing, with
one line naming the flag and the folder. A fingerprint is a hash of canonical JSON, so it is the same on every
machine and for every path the artefact is moved to.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

KEY = "made_from"
"""The key under which an artefact's JSON record holds its provenance."""


def fingerprint(obj: Any) -> str:
    """``sha256:<16 hex>`` of the canonical JSON of ``obj`` (keys sorted, tuples as lists)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


TOKENIZER_PARTS = ("model", "normalizer", "pre_tokenizer", "post_processor")
"""The parts of a ``tokenizers`` definition (``tokenizer.json``) that decide a text's token ids: the model
(vocabulary, merges, unknown token), the normaliser, the pre-tokeniser and the post-processor (special tokens it
adds). Padding, truncation and the decoder change no id."""


def tokenizer_fingerprint(tokenizer) -> str:
    """The one content hash of a tokenizer (``sha256:<16 hex>``, :func:`fingerprint`): every part of its definition
    that decides token ids (:data:`TOKENIZER_PARTS`: vocabulary *and* merges, normaliser, pre-tokeniser,
    post-processor), its added tokens with their ids, and the ids of its special tokens (EOS, BOS, PAD, UNK).

    Two tokenizers of the same size over other tokens differ, and so do two with the same vocabulary but other
    merges or normalisation; the same tokenizer saved in another folder, or with other padding / truncation /
    ``model_max_length`` settings, has the same fingerprint. A tokenizer without a ``tokenizers`` backend (a slow
    ``transformers`` tokenizer) is hashed by its vocabulary, added tokens and special ids.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        content: dict[str, Any] = {k: spec.get(k) for k in TOKENIZER_PARTS}
    else:
        content = {"vocab": sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])}
    content["added"] = sorted(tokenizer.get_added_vocab().items(), key=lambda kv: kv[1])
    content["special_ids"] = {k: getattr(tokenizer, f"{k}_token_id", None) for k in ("eos", "bos", "pad", "unk")}
    return fingerprint(content)


MODEL_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json")
"""The files of a local HF model folder that decide its parameters (the tokenizer files are hashed by
:func:`tokenizer_fingerprint`)."""


def model_fingerprint(folder: str | os.PathLike) -> str:
    """The content hash of a local HF model folder (``sha256:<16 hex>``): the names and bytes of its
    :data:`MODEL_FILES`, so the same weights in another folder have the same fingerprint and fine-tuned weights
    of the same shapes another. Reads every weight file once (about 1 s per GB).

    Raises:
      ValueError: the folder holds no ``config.json`` or no safetensors file.
    """
    root = pathlib.Path(folder)
    files = sorted({p for pattern in MODEL_FILES for p in root.glob(pattern) if p.is_file()})
    if not any(p.name == "config.json" for p in files) or not any(p.suffix == ".safetensors" for p in files):
        raise ValueError(f"{root}: not a model folder (config.json and *.safetensors), so it has no fingerprint")
    h = hashlib.sha256()
    for path in files:
        h.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()[:16]


def docs_fingerprint(docs) -> str:
    """The content hash of a list of token-id documents (``sha256:<16 hex>``; each document's length and int64
    ids), e.g. the source documents a replay corpus was prompted from."""
    h = hashlib.sha256()
    for doc in docs:
        ids = np.asarray(doc, np.int64).reshape(-1)
        h.update(np.int64(ids.size).tobytes())
        h.update(ids.tobytes())
    return "sha256:" + h.hexdigest()[:16]


def check_made_from(record: Mapping | None, expected: Mapping[str, Any], *, flag: str,
                    folder: str | os.PathLike) -> None:
    """Refuse an artefact whose recorded provenance differs from ``expected`` in any key of ``expected``.

    Args:
      record: the artefact's ``made_from`` dict (None: it records none, e.g. made before provenance existed).
      expected: what this consumer has (the same keys, computed the same way).
      flag: the option that named the artefact (``--token-weights``), for the message.
      folder: the artefact's folder, for the message.

    Raises:
      ValueError: one line naming the flag, the folder and every differing key.
    """
    where = f"{flag} {os.fspath(folder)}"
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: records no provenance ({KEY}), so it cannot be checked against this run; "
                         f"make it again with this version")
    diffs = [f"{k} {record.get(k, '<absent>')} (this run: {v})" for k, v in expected.items() if record.get(k) != v]
    if diffs:
        raise ValueError(f"{where} was made from something else: " + "; ".join(diffs))
