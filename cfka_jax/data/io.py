"""On-disk formats of worlds, tokenised splits and packed chunks.

* World: a folder with ``config.json`` (the ``BiographyConfig``), ``people.jsonl`` (pid, fullname, values,
  is_original) and one ``<split>.jsonl`` per split (pid, number, text, order, templates). Readers check every
  line and name the file, line and key of the first problem.
* Tokenised split: one Parquet file (columns input_ids: list<int32>, pid, number, idx: list<int32>[5],
  idx2: list<int32>[5]), readable with ``datasets.load_dataset("parquet", data_files=...)`` as well.
* Packed chunks with their FTA targets: one compressed ``.npz``.

``config_hash`` keys caches: a hash of a config's fields plus the bytes of every file it points to. Readers of
cache files (``load_world``, ``load_tokenized``, ``load_packed``) raise ``ValueError`` naming the file for a
truncated or corrupt one; ``cached_world`` and ``cfka_jax.data.pipeline.build_data`` then rebuild that cache entry
with a :class:`CacheRebuildWarning` instead of failing.

JSON and JSONL are read with ``cfka_jax.jsonio``: invalid UTF-8, lone surrogate escapes and JSON nested too deeply
are named with file and line like any other malformed line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import typing
import warnings
import zipfile
import zlib

import numpy as np

from cfka_jax import jsonio

from cfka_jax.data.biography import Biography, BiographyConfig, Person, World
from cfka_jax.data.packing import FtaTargets, Packed
from cfka_jax.data.pools import PoolSizes
from cfka_jax.data.templates import ATTRIBUTES
from cfka_jax.data.tokenize import TokenizedSplit

FORMAT_VERSION = 1
_SPLITS = ("pt_train", "pt_test", "cpt_train", "cpt_test")
_PERSON_KEYS = {"pid": int, "fullname": str, "values": list, "is_original": bool}
_BIO_KEYS = {"pid": int, "number": int, "text": str, "order": list, "templates": list}
iter_jsonl = jsonio.iter_jsonl
"""``(where, record)`` per non-blank line of a JSONL file (see ``cfka_jax.jsonio.iter_jsonl``)."""


class CorruptCacheError(ValueError):
    """A cache file is truncated or unreadable; the caller may delete the entry and rebuild it."""


class CacheRebuildWarning(RuntimeWarning):
    """A corrupt cache entry was deleted and is being rebuilt."""


def _file_digest(path: str, h) -> None:
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            h.update(name.encode())
            _file_digest(os.path.join(path, name), h)
    elif os.path.isfile(path):
        with open(path, "rb") as f:
            h.update(f.read())
    else:
        raise ValueError(f"{path}: no such file or folder")


HASH_OPTIONAL = ("bpe_vocab", "bio.name_pool", "name_pool")
"""Config fields (dotted: nested) left out of :func:`config_hash` while they are None."""


def config_hash(config) -> str:
    """A short hex key of a (nested) dataclass config and the contents of the files its ``*_path`` fields name."""
    h = hashlib.sha256(f"v{FORMAT_VERSION}".encode())
    fields = dataclasses.asdict(config)
    for name in HASH_OPTIONAL:  # unset options added later leave the keys of existing caches unchanged
        *parents, leaf = name.split(".")
        node = fields
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(leaf, 0) is None:
            del node[leaf]
    h.update(json.dumps(fields, sort_keys=True).encode())

    def visit(cfg):
        for f in dataclasses.fields(cfg):
            v = getattr(cfg, f.name)
            if dataclasses.is_dataclass(v):
                visit(v)
            elif f.name.endswith("_path") and v:
                _file_digest(os.fspath(v), h)

    visit(config)
    return h.hexdigest()[:16]


def read_jsonl(path: str | os.PathLike, keys: dict[str, type]) -> list[dict]:
    """Read a JSONL file whose every line is an object holding ``keys`` with the given types.

    Raises:
      ValueError: invalid UTF-8 or JSON, a non-object line, or a missing / ill-typed key; names file, line and key.
    """
    rows = []
    for where, row in iter_jsonl(path):
        for key, typ in keys.items():
            if key not in row:
                raise ValueError(f"{where}: missing key {key!r}")
            if not isinstance(row[key], typ) or (typ is int and isinstance(row[key], bool)):
                raise ValueError(f"{where}: key {key!r} must be {typ.__name__}, got {row[key]!r}")
        rows.append(row)
    return rows


def save_world(world: World, folder: str | os.PathLike) -> None:
    """Write ``world`` into ``folder`` (created if needed)."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    jsonio.write_json_atomic(os.path.join(folder, "config.json"), dataclasses.asdict(world.config), newline=False,
                             indent=1, sort_keys=True)
    jsonio.write_jsonl_atomic(os.path.join(folder, "people.jsonl"), (dataclasses.asdict(p) for p in world.people),
                              ensure_ascii=False)
    for name, bios in world.splits.items():
        jsonio.write_jsonl_atomic(os.path.join(folder, f"{name}.jsonl"), (dataclasses.asdict(b) for b in bios),
                                  ensure_ascii=False)


def _config_from_dict(d: dict, path: str) -> BiographyConfig:
    d = dict(d)
    if "pool_sizes" not in d:
        raise ValueError(f"{path}: bad BiographyConfig: missing key 'pool_sizes'")
    sizes = d.pop("pool_sizes")
    if not isinstance(sizes, dict):
        raise ValueError(f"{path}: key 'pool_sizes' must be an object, got {sizes!r:.60}")
    problems = jsonio.field_problems(d, typing.get_type_hints(BiographyConfig))
    problems += [f"pool_sizes.{p}" for p in jsonio.field_problems(sizes, typing.get_type_hints(PoolSizes))]
    if problems:
        raise ValueError(f"{path}: bad BiographyConfig: " + "; ".join(problems))
    try:
        return BiographyConfig(**d, pool_sizes=PoolSizes(**sizes))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: bad BiographyConfig: {e}") from None


def _check_person(row: dict, path: str, lineno: int, pid: int) -> Person:
    if row["pid"] != pid:
        raise ValueError(f"{path}, line {lineno}: key 'pid' is {row['pid']}, expected {pid}")
    if len(row["values"]) != len(ATTRIBUTES) or not all(isinstance(v, str) for v in row["values"]):
        raise ValueError(f"{path}, line {lineno}: key 'values' must hold {len(ATTRIBUTES)} strings")
    return Person(pid, row["fullname"], tuple(row["values"]), row["is_original"])


def load_world(folder: str | os.PathLike) -> World:
    """Read a world written by ``save_world``.

    Raises:
      ValueError: a malformed file; the message names the file and the line/key.
    """
    folder = os.fspath(folder)
    cpath = os.path.join(folder, "config.json")
    config = _config_from_dict(jsonio.read_json_object(cpath, "a BiographyConfig object"), cpath)
    ppath = os.path.join(folder, "people.jsonl")
    people = tuple(_check_person(r, ppath, i + 1, i) for i, r in enumerate(read_jsonl(ppath, _PERSON_KEYS)))
    splits = {}
    for name in _SPLITS:
        spath = os.path.join(folder, f"{name}.jsonl")
        rows = read_jsonl(spath, _BIO_KEYS)
        for lineno, r in enumerate(rows, start=1):
            if not 0 <= r["pid"] < len(people):
                raise ValueError(f"{spath}, line {lineno}: key 'pid' {r['pid']} names no person")
        splits[name] = tuple(Biography(r["pid"], r["number"], r["text"], tuple(r["order"]), tuple(r["templates"]))
                             for r in rows)
    return World(config, people, **splits)


def cached_world(config: BiographyConfig, cache_dir: str | os.PathLike) -> World:
    """The world of ``config``, read from ``cache_dir/world-<hash>`` or generated and written there."""
    from cfka_jax.data.biography import generate_world

    folder = os.path.join(os.fspath(cache_dir), f"world-{config_hash(config)}")
    if os.path.exists(os.path.join(folder, "done")):
        try:
            return load_world(folder)
        except (ValueError, OSError) as err:
            warn_rebuild(folder, err)
    if os.path.exists(folder):
        shutil.rmtree(folder)  # a corrupt entry or an interrupted earlier write
    world = generate_world(config)
    save_world(world, folder)
    jsonio.write_text_atomic(os.path.join(folder, "done"), "")
    return world


def warn_rebuild(folder: str, err: Exception) -> None:
    """Warn that the cache entry ``folder`` is corrupt (``err`` names the file) and will be rebuilt."""
    warnings.warn(f"rebuilding the cache entry {folder}: {err}", CacheRebuildWarning, stacklevel=3)


def save_tokenized(split: TokenizedSplit, path: str | os.PathLike) -> None:
    """Write a tokenised split as Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def fixed(a: np.ndarray):
        return pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1).astype(np.int32)), a.shape[1])

    table = pa.table({
        "input_ids": pa.ListArray.from_arrays(pa.array(split.offsets.astype(np.int32)), pa.array(split.tokens)),
        "pid": pa.array(split.pid), "number": pa.array(split.number),
        "idx": fixed(split.idx), "idx2": fixed(split.idx2)})
    pq.write_table(table, os.fspath(path))


def load_tokenized(path: str | os.PathLike) -> TokenizedSplit:
    """Read a tokenised split written by ``save_tokenized``.

    Raises:
      CorruptCacheError: a truncated or unreadable Parquet file; names the file.
      ValueError: a missing column or inconsistent shapes; names the file.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.fspath(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        if not os.path.exists(path):
            raise
        raise CorruptCacheError(f"{path}: not a readable Parquet file ({e})") from None
    missing = {"input_ids", "pid", "number", "idx", "idx2"} - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}")
    ids = table.column("input_ids").combine_chunks()
    n = len(ids)
    mat = lambda c: np.asarray(table.column(c).combine_chunks().flatten(), np.int32).reshape(n, -1)  # noqa: E731
    try:
        return TokenizedSplit(np.asarray(ids.flatten(), np.int32), np.asarray(ids.offsets, np.int64),
                              np.asarray(table.column("pid"), np.int32), np.asarray(table.column("number"), np.int32),
                              mat("idx"), mat("idx2"))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def save_packed(packed: Packed, fta: FtaTargets | None, path: str | os.PathLike) -> None:
    """Write packed chunks (and optionally their FTA targets) as one ``.npz``."""
    arrays = {f"packed_{k}": np.asarray(v) for k, v in dataclasses.asdict(packed).items()}
    if fta is not None:
        arrays.update({f"fta_{k}": np.asarray(v) for k, v in dataclasses.asdict(fta).items()})
    jsonio.write_npz_atomic(path, arrays, compressed=True)


def load_packed(path: str | os.PathLike) -> tuple[Packed, FtaTargets | None]:
    """Read what ``save_packed`` wrote.

    Raises:
      CorruptCacheError: a truncated or corrupt ``.npz`` or one lacking an array; names the file (and array).
    """
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            packed = Packed(**{f.name: _scalar(z[f"packed_{f.name}"]) for f in dataclasses.fields(Packed)})
            has_fta = "fta_chunk" in z.files
            fta = FtaTargets(**{f.name: _scalar(z[f"fta_{f.name}"]) for f in dataclasses.fields(FtaTargets)}) \
                if has_fta else None
    except FileNotFoundError:
        raise
    except KeyError as e:
        raise CorruptCacheError(f"{path}: incomplete .npz ({e.args[0]})") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, TypeError) as e:
        raise CorruptCacheError(f"{path}: not a readable .npz file ({type(e).__name__}: {e})") from None
    return packed, fta


def _scalar(a: np.ndarray):
    return a.item() if a.ndim == 0 else a
