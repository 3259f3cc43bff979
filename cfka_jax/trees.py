"""Nested dicts keyed by paths: the one flatten/nest pair used by the HF converter and the checkpoint module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Path = tuple
"""A key path: the dict keys from the root to a leaf."""


def flatten_mapping(tree: Mapping, prefix: Path = ()) -> dict[Path, Any]:
    """``{path: leaf}`` of a nested mapping (a leaf is any value that is not a mapping)."""
    flat: dict[Path, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            flat.update(flatten_mapping(v, prefix + (k,)))
        else:
            flat[prefix + (k,)] = v
    return flat


def nest(flat: Mapping[Path, Any]) -> dict:
    """The nested dict of ``{path: leaf}`` (inverse of :func:`flatten_mapping`)."""
    tree: dict = {}
    for path, v in flat.items():
        node = tree
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = v
    return tree
