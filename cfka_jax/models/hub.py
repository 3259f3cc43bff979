"""Local HF checkpoint folders and the strict key-table engine used by every ``convert.py``.

A folder holds ``config.json`` and either ``model.safetensors`` or ``model.safetensors.index.json`` plus the
shards it names. Tensors are read and written as numpy arrays (``safetensors.numpy``); torch is never imported.

The engine maps HF keys to NNX parameter paths through a declarative table of :class:`Rule` s. Each rule names
a transform from the family's registry (a pair of numpy functions, HF -> NNX and NNX -> HF). Loading collects
*every* problem (unused HF keys, unfilled parameters, shape mismatches, integer or boolean tensors for float
parameters) and raises one :class:`ConversionError`. Export runs the same table backwards.

:func:`open_tensors` streams a folder: its mapping knows every key (from the index, or the file header) and
hands the tensors over one shard at a time, so :func:`load_into` converts a shard into device arrays and drops
it before the next is read (peak host memory: the model plus one shard, not the checkpoint twice).

Reading fails loudly as well: a missing folder, an unreadable ``config.json`` or index, an index without a valid
``weight_map`` or naming absent shards, and an empty, truncated or garbage ``.safetensors`` file each raise an
error naming the file (and key); tensors holding NaN or Inf load with a :class:`NonFiniteWeightsWarning` naming them.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import flax.nnx as nnx
import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load_file, save_file

from cfka_jax import jsonio
from cfka_jax.trees import flatten_mapping, nest

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

Path = tuple[str | int, ...]
Transform = tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]
IDENTITY: Transform = (lambda a: a, lambda a: a)
TRANSPOSE: Transform = (lambda a: a.T, lambda a: a.T)  # HF Linear [out, in] <-> nnx.Linear kernel [in, out]
# An accepted-but-unused HF key: check(array, all_tensors) -> None if acceptable, else the reason it is not.
Extra = tuple[str, Callable[[np.ndarray, Mapping[str, np.ndarray]], str | None]]


class ConversionError(ValueError):
    """A checkpoint does not match the model: lists every offending key and parameter."""


# ---------------------------------------------------------------------------------------------------- folder I/O


class NonFiniteWeightsWarning(RuntimeWarning):
    """A checkpoint file holds NaN or Inf values (the model would load and compute garbage)."""


def model_folder(path: str | os.PathLike) -> str:
    """``path`` as a string, checked to be an existing folder (so that nothing falls back to a Hub repo id).

    Raises:
      FileNotFoundError: ``path`` does not exist.
      NotADirectoryError: ``path`` is a file.
    """
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(f"{name}: no such model folder")
    if not os.path.isdir(name):
        raise NotADirectoryError(f"{name}: not a folder (a model folder holds {CONFIG_FILE} and {WEIGHTS_FILE})")
    return name


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``config.json`` of a checkpoint folder.

    Raises:
      FileNotFoundError / NotADirectoryError: no such folder, or no ``config.json`` in it.
      ValueError: invalid UTF-8 or JSON, or a top level that is not an object; names the file and line.
    """
    folder = model_folder(path)
    file = os.path.join(folder, CONFIG_FILE)
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{folder}: no {CONFIG_FILE} (not a Hugging Face model folder)")
    return jsonio.read_json_object(file, "a JSON object of model settings")


def _read_index(index_path: str) -> dict[str, str]:
    """The ``weight_map`` of a sharded index, checked: an object of tensor name -> shard file in the same folder."""
    index = jsonio.read_json_object(index_path, 'an object with a "weight_map"')
    if "weight_map" not in index:
        raise ValueError(f"{index_path}: missing key 'weight_map' (keys: {sorted(index)})")
    weight_map = index["weight_map"]
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index_path}: key 'weight_map' must be a non-empty object of tensor name -> shard file, "
                         f"got {weight_map!r:.80}")
    for key, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or os.path.basename(shard) != shard or shard in (".", ".."):
            raise ValueError(f"{index_path}: key 'weight_map.{key}' must name a shard file in the same folder, "
                             f"got {shard!r:.80}")
    folder = os.path.dirname(index_path)
    missing = sorted(s for s in set(weight_map.values()) if not os.path.isfile(os.path.join(folder, s)))
    if missing:
        raise FileNotFoundError(f"{index_path}: key 'weight_map' names missing shard file(s): {', '.join(missing)}")
    return weight_map


def read_safetensors(file: str) -> dict[str, np.ndarray]:
    """All tensors of one ``.safetensors`` file as numpy arrays; warns (:class:`NonFiniteWeightsWarning`) naming
    every tensor that holds NaN or Inf.

    Raises:
      ValueError: an empty, truncated or otherwise unreadable file, naming it.
    """
    try:
        tensors = load_file(file)
    except (SafetensorError, ValueError, TypeError) as e:
        raise ValueError(f"{file}: not a readable safetensors file ({e})") from None
    bad = []
    for key in sorted(tensors):
        arr = tensors[key]
        if jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.complexfloating):
            n = arr.size - int(np.count_nonzero(np.isfinite(arr)))
            if n:
                bad.append(f"{key} ({n} of {arr.size})")
    if bad:
        shown = ", ".join(bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
        warnings.warn(f"{file}: {len(bad)} tensor(s) hold NaN or Inf values: {shown}", NonFiniteWeightsWarning,
                      stacklevel=3)
    return tensors


def read_tensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All tensors of a folder as numpy arrays, from one file or from a sharded index (see :func:`read_safetensors`).

    Raises:
        FileNotFoundError: the folder, or both ``model.safetensors`` and an index, or a shard the index names.
        ValueError: an unreadable file or an index without a valid ``weight_map`` (names the file and key).
        ConversionError: a shard lacks keys its index assigns to it, or holds keys the index does not list.
    """
    folder = model_folder(path)
    index_path = os.path.join(folder, INDEX_FILE)
    if not os.path.exists(index_path):
        single = os.path.join(folder, WEIGHTS_FILE)
        if not os.path.exists(single):
            raise FileNotFoundError(f"{folder}: no {WEIGHTS_FILE} or {INDEX_FILE}")
        return read_safetensors(single)
    weight_map = _read_index(index_path)
    tensors: dict[str, np.ndarray] = {}
    problems = []
    for shard in sorted(set(weight_map.values())):
        part = read_safetensors(os.path.join(folder, shard))
        listed = {k for k, v in weight_map.items() if v == shard}
        problems += [f"{k}: listed for {shard} but absent" for k in sorted(listed - part.keys())]
        problems += [f"{k}: in {shard} but not in the index" for k in sorted(part.keys() - listed)]
        tensors.update(part)
    if problems:
        raise ConversionError(f"inconsistent sharded checkpoint {index_path}:\n  " + "\n  ".join(problems))
    return tensors


def _header_keys(file: str) -> set[str]:
    """The tensor names of one ``.safetensors`` file, read from its header only (no tensor data)."""
    try:
        with safe_open(file, framework="numpy") as f:
            return set(f.keys())
    except (SafetensorError, ValueError, TypeError, OSError) as e:
        raise ValueError(f"{file}: not a readable safetensors file ({e})") from None


class StreamedTensors(Mapping):
    """The tensors of a checkpoint folder, read one shard at a time (:func:`open_tensors`).

    ``keys()`` / ``in`` / ``len`` come from the index (or the single file's header) without reading data;
    :meth:`stream` yields ``(key, array)`` shard by shard, holding one shard; ``self[key]`` reads the key's shard
    (one cached), for the rare lookup of another key (a tied head's check).
    """

    def __init__(self, folder: str, weight_map: dict[str, str]):
        self.folder, self.weight_map, self._cached = folder, weight_map, (None, {})

    def _shard(self, shard: str) -> dict[str, np.ndarray]:
        if self._cached[0] != shard:
            self._cached = (None, {})  # drop the previous shard before reading the next
            self._cached = (shard, read_safetensors(os.path.join(self.folder, shard)))
        return self._cached[1]

    def __getitem__(self, key: str) -> np.ndarray:
        return self._shard(self.weight_map[key])[key]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.weight_map))

    def __len__(self) -> int:
        return len(self.weight_map)

    def __contains__(self, key: object) -> bool:
        return key in self.weight_map

    def stream(self) -> Iterator[tuple[str, np.ndarray]]:
        """Every ``(key, array)``, shard by shard (sorted within a shard); a shard is dropped once handed over."""
        for shard in sorted(set(self.weight_map.values())):
            tensors = self._shard(shard)
            self._cached = (None, {})
            for key in sorted(tensors):
                yield key, tensors.pop(key)
            del tensors


def open_tensors(path: str | os.PathLike) -> StreamedTensors:
    """A folder's tensors as a :class:`StreamedTensors` (one file or a sharded index), checked before any
    tensor data is read: every shard's header must list exactly the keys its index assigns to it.

    Raises:
        FileNotFoundError / ValueError / ConversionError: as :func:`read_tensors`.
    """
    folder = model_folder(path)
    index_path = os.path.join(folder, INDEX_FILE)
    if not os.path.exists(index_path):
        if not os.path.exists(os.path.join(folder, WEIGHTS_FILE)):
            raise FileNotFoundError(f"{folder}: no {WEIGHTS_FILE} or {INDEX_FILE}")
        keys = _header_keys(os.path.join(folder, WEIGHTS_FILE))
        return StreamedTensors(folder, {k: WEIGHTS_FILE for k in keys})
    weight_map = _read_index(index_path)
    problems = []
    for shard in sorted(set(weight_map.values())):
        present = _header_keys(os.path.join(folder, shard))
        listed = {k for k, v in weight_map.items() if v == shard}
        problems += [f"{k}: listed for {shard} but absent" for k in sorted(listed - present)]
        problems += [f"{k}: in {shard} but not in the index" for k in sorted(present - listed)]
    if problems:
        raise ConversionError(f"inconsistent sharded checkpoint {index_path}:\n  " + "\n  ".join(problems))
    return StreamedTensors(folder, weight_map)


def write_checkpoint(path: str | os.PathLike, config: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
    """Write ``config.json`` and a single ``model.safetensors`` (metadata format "pt", as transformers expects)."""
    os.makedirs(path, exist_ok=True)
    jsonio.write_json_atomic(os.path.join(path, CONFIG_FILE), dict(config), newline=False, indent=2, sort_keys=True)
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    save_file(arrays, os.path.join(path, WEIGHTS_FILE), metadata={"format": "pt"})


# ------------------------------------------------------------------------------------------------ the key table


@dataclasses.dataclass(frozen=True)
class Rule:
    """One table row: an HF key and the NNX parameter path it fills, both possibly containing ``{i}`` (layer).

    ``nnx`` is a dotted path such as ``layers.{i}.attention.dense.kernel``. With scanned layers the ``{i}``
    segment is dropped and the tensor fills slice i of the stacked parameter.
    """

    hf: str
    nnx: str
    transform: str = "identity"


@dataclasses.dataclass(frozen=True)
class _Slot:
    path: Path
    layer: int | None
    transform: str


def _plan(rules: list[Rule], num_layers: int, scan: bool) -> dict[str, _Slot]:
    plan = {}
    for rule in rules:
        for i in range(num_layers) if "{i}" in rule.hf else [None]:
            parts: list[str | int] = []
            for seg in rule.nnx.split("."):
                if seg == "{i}":
                    if not scan:
                        parts.append(i)
                else:
                    parts.append(int(seg) if seg.isdigit() else seg)
            hf_key = rule.hf if i is None else rule.hf.replace("{i}", str(i))
            plan[hf_key] = _Slot(tuple(parts), i if scan else None, rule.transform)
    return plan


def _dotted(path: Path) -> str:
    return ".".join(str(p) for p in path)


def _to_nnx(key: str, arr: np.ndarray, slot: _Slot, spec, transforms: Mapping[str, Transform]):
    """``(value, None)`` with the transformed, dtype-cast tensor, or ``(None, message)`` on a shape mismatch or a
    non-float tensor for a float parameter (integer and boolean weights are never cast silently)."""
    want = tuple(spec.shape if slot.layer is None else spec.shape[1:])
    if jnp.issubdtype(spec.dtype, jnp.floating) and not jnp.issubdtype(arr.dtype, jnp.floating):
        return None, f"{key}: dtype {arr.dtype}, expected a floating-point tensor for {_dotted(slot.path)}"
    try:
        value = np.asarray(transforms[slot.transform][0](arr))
    except (ValueError, IndexError) as e:
        return None, f"{key}: shape {arr.shape} does not fit {_dotted(slot.path)} {want} ({e})"
    if value.shape != want:
        return None, f"{key}: shape {arr.shape} -> {value.shape}, expected {want} for {_dotted(slot.path)}"
    return value.astype(spec.dtype), None


def load_into(
    abstract_model: nnx.Module,
    tensors: Mapping[str, np.ndarray],
    rules: list[Rule],
    transforms: Mapping[str, Transform],
    *,
    num_layers: int,
    scan: bool,
    extras: Sequence[Extra] = (),
) -> nnx.Module:
    """Fill every parameter of ``abstract_model`` (from ``nnx.eval_shape``) from HF ``tensors``.

    Args:
        extras: ``(regex, check)`` pairs for HF keys that fill no parameter but may legitimately be present (a
            tied head stored twice, constant buffers of old checkpoints). A matching key is accepted only if
            ``check(array, tensors)`` returns None; otherwise its message is reported with the unused keys.

    Raises:
        ConversionError: listing every unused HF key, unfilled parameter and shape or dtype mismatch at once.
    """
    graphdef, state = nnx.split(abstract_model)
    target = flatten_mapping(nnx.to_pure_dict(state))
    plan = _plan(rules, num_layers, scan)
    unused, mismatched, filled, stacks = [], [], {}, {}
    items = tensors.stream() if isinstance(tensors, StreamedTensors) else ((k, tensors[k]) for k in sorted(tensors))
    for key, arr in items:  # each tensor becomes a device array at once; the host copy is dropped
        slot = plan.get(key)
        if slot is None:
            check = next((c for pattern, c in extras if re.fullmatch(pattern, key)), None)
            problem = "" if check is None else check(arr, tensors)
            if problem is not None:
                unused.append(key + (f" ({problem})" if problem else ""))
            continue
        value, problem = _to_nnx(key, arr, slot, target[slot.path], transforms)
        del arr
        if problem:
            mismatched.append(problem)
        elif slot.layer is None:
            filled[slot.path] = jnp.asarray(value)
        else:  # scanned layers: fill slice i of one host buffer, moved to the device once complete
            buf, left = stacks.get(slot.path) or (np.empty(target[slot.path].shape, value.dtype), set(range(num_layers)))
            buf[slot.layer], stacks[slot.path] = value, (buf, left - {slot.layer})
            if not stacks[slot.path][1]:
                filled[slot.path] = jnp.asarray(stacks.pop(slot.path)[0])
    unfilled = [f"{k} -> {_dotted(s.path)}" for k, s in plan.items() if k not in tensors]
    unfilled += [f"{_dotted(p)} (no table rule)" for p in target if p not in {s.path for s in plan.values()}]
    if unused or unfilled or mismatched:
        raise ConversionError(_report(sorted(unused), unfilled, sorted(mismatched)))
    nnx.replace_by_pure_dict(state, nest(filled))
    return nnx.merge(graphdef, state)


def tied_to(source: str) -> Callable[[np.ndarray, Mapping[str, np.ndarray]], str | None]:
    """Accept a key only if it equals ``source`` exactly (a tied head saved alongside the embedding)."""

    def check(arr, tensors):
        same = source in tensors and np.array_equal(arr, tensors[source])
        return None if same else f"tied to {source} but not equal to it"

    return check


def equals(expected: np.ndarray) -> Callable[[np.ndarray, Mapping[str, np.ndarray]], str | None]:
    """Accept a constant buffer (e.g. RoPE ``inv_freq``) only if it matches the value the model recomputes,
    up to 4 ulp of the stored dtype (fp16 checkpoints store fp16 buffers)."""

    def check(arr, tensors):
        rtol = 4 * float(np.finfo(arr.dtype).eps) if np.issubdtype(arr.dtype, np.floating) else 0.0
        ok = arr.shape == expected.shape and np.allclose(arr.astype(np.float64), expected, rtol=rtol, atol=0.0)
        return None if ok else f"buffer differs from the recomputed value {np.array2string(expected, precision=4)}"

    return check


def _report(unused: list[str], unfilled: list[str], mismatched: list[str]) -> str:
    lines = ["checkpoint does not match the model:"]
    sections = (("unused HF keys", unused), ("unfilled parameters", unfilled),
                ("shape and dtype mismatches", mismatched))
    for title, items in sections:
        if items:
            lines.append(f"{title} ({len(items)}):")
            lines += [f"  {item}" for item in items]
    return "\n".join(lines)


def export_from(
    model: nnx.Module, rules: list[Rule], transforms: Mapping[str, Transform], *, num_layers: int, scan: bool
) -> dict[str, np.ndarray]:
    """Run the table backwards: every parameter of ``model`` as HF-named numpy arrays.

    Raises:
        ConversionError: a parameter is not covered by any rule (it would be silently dropped).
    """
    flat = flatten_mapping(nnx.to_pure_dict(nnx.state(model)))
    plan = _plan(rules, num_layers, scan)
    uncovered = sorted(_dotted(p) for p in flat if p not in {s.path for s in plan.values()})
    if uncovered:
        raise ConversionError(_report([], [f"{p} (no table rule)" for p in uncovered], []))
    out = {}
    for key, slot in plan.items():
        value = np.asarray(flat[slot.path])
        if slot.layer is not None:
            value = value[slot.layer]
        out[key] = np.ascontiguousarray(transforms[slot.transform][1](value))
    return out


def load_model(model_cls: type, cfg: Any, tensors: Mapping[str, np.ndarray], rules: list[Rule],
               transforms: Mapping[str, Transform], extras: Sequence[Extra] = ()) -> nnx.Module:
    """A ``model_cls(cfg)`` filled from HF ``tensors`` by :func:`load_into` (over ``cfg.num_hidden_layers`` blocks,
    stacked with ``cfg.scan_layers``); every family's ``convert.load``.

    Raises:
        ConversionError: one error listing every unused key, unfilled parameter and shape or dtype mismatch (an
            integer or boolean tensor for a float parameter is never cast).
    """
    abstract = nnx.eval_shape(lambda: model_cls(cfg, rngs=nnx.Rngs(0)))
    return load_into(abstract, tensors, rules, transforms, num_layers=cfg.num_hidden_layers, scan=cfg.scan_layers,
                     extras=extras)


def export_model(model: nnx.Module, rules: list[Rule], transforms: Mapping[str, Transform]) -> dict[str, np.ndarray]:
    """HF-named numpy tensors of ``model`` by :func:`export_from` (the inverse of :func:`load_model`)."""
    cfg = model.cfg
    return export_from(model, rules, transforms, num_layers=cfg.num_hidden_layers, scan=cfg.scan_layers)
