"""Provenance of artefacts a later command consumes (φ folders, replay corpora, ensembles, run folders).

An artefact records what it was made from as a flat ``{"what": fingerprint}`` dict (``"tokenizer"``: the content
hash of the tokenizer's vocabulary, ``"world"``: the hash of the world config, ``"parent_run"`` / ``"parent_step"``:
the identity of the run whose parameters it started from and their step). A consumer builds the same dict from what
it has and calls :func:`check_made_from`, which refuses any difference, and an artefact that records nothing, with
one line naming the flag and the folder. A fingerprint is a hash of canonical JSON, so it is the same on every
machine and for every path the artefact is moved to.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

KEY = "made_from"
"""The key under which an artefact's JSON record holds its provenance."""


def fingerprint(obj: Any) -> str:
    """``sha256:<16 hex>`` of the canonical JSON of ``obj`` (keys sorted, tuples as lists)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


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
