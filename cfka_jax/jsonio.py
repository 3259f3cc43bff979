"""Strict reading of user-supplied text, JSON, JSONL, CSV and TOML files: every error is a ``ValueError`` naming the
file and the line (or key), never a bare ``UnicodeDecodeError``, ``JSONDecodeError``, ``csv.Error``,
``TOMLDecodeError``, ``RecursionError`` or ``zipfile.BadZipFile`` (:func:`read_npz` for ``.npz`` arrays,
:func:`require_keys` for the keys a record must hold); and atomic writing of result files
(:func:`write_text_atomic`, :func:`write_json_atomic`, :func:`write_jsonl_atomic`, :func:`write_npz_atomic`: a
temporary file in the same folder, flushed and renamed over the target, so a kill leaves the old file or the new
one, never a torn one; :func:`append_jsonl` adds one line to a log in one write). The one module that writes the
study outputs: every result, table, log and array file of the package and the experiments goes through it.

Checks beyond ``json.loads``: the bytes must be UTF-8 (the first bad byte is reported with its line and column),
strings must not hold lone UTF-16 surrogates (``"\\ud800"`` decodes in Python but cannot be encoded, tokenised
or written back), and nesting deeper than Python's recursion limit is reported instead of crashing the reader.
:func:`type_problem` checks a decoded value against a dataclass field annotation without converting it (an
``int`` field never accepts ``True`` or ``"3"``, a ``bool`` field never accepts ``"false"``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

_ESCAPED_SURROGATE = re.compile(r"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")
_LOW_SURROGATE_ESCAPE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def decode_utf8(data: bytes, where: str, first_line: int = 1) -> str:
    """``data`` decoded as strict UTF-8.

    Raises:
      ValueError: naming ``where``, the line (counted from ``first_line``) and byte column of the first bad byte.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data.count(b"\n", 0, e.start)
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(f"{where}, line {line}: invalid UTF-8 (byte 0x{data[e.start]:02x} at byte column {column}; "
                         "a binary file or another encoding?)") from None


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of ``path`` (``\\r\\n`` kept as is).

    Raises:
      ValueError: invalid UTF-8 or a NUL character (a binary file), naming the file and line.
      OSError: the file cannot be read.
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        data = f.read()
    text = decode_utf8(data, name)
    nul = text.find("\x00")
    if nul >= 0:
        raise ValueError(f"{name}, line {text.count(chr(10), 0, nul) + 1}: NUL character; is this a binary file?")
    return text


def _lone_surrogate(text: str) -> tuple[int, str] | None:
    """(offset, escape) of the first ``\\uD800``–``\\uDFFF`` escape in JSON ``text`` that is not half of a pair."""
    pair_end = -1
    for m in _ESCAPED_SURROGATE.finditer(text):
        if len(m.group(1)) % 2 == 0 or m.start(2) < pair_end:
            continue  # an escaped backslash followed by "u...", or the low half of a pair already matched
        code = int(m.group(2), 16)
        if code <= 0xDBFF and _LOW_SURROGATE_ESCAPE.match(text, m.end()):
            pair_end = m.end() + 6
            continue
        return m.end(1) - 1, "\\u" + m.group(2)
    return None


def parse_json(text: str, where: str, first_line: int = 1) -> Any:
    """``json.loads(text)`` with errors that name ``where`` and the line (counted from ``first_line``).

    Raises:
      ValueError: invalid JSON, nesting too deep for the decoder, or a lone surrogate escape.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}, line {first_line + e.lineno - 1}: invalid JSON: {e.msg} (column {e.colno})"
                         ) from None
    except RecursionError:
        raise ValueError(f"{where}, line {first_line}: JSON nested too deeply to decode") from None
    if "\\u" in text:
        lone = _lone_surrogate(text)
        if lone is not None:
            offset, escape = lone
            line = first_line + text.count("\n", 0, offset)
            column = offset - (text.rfind("\n", 0, offset) + 1) + 1
            raise ValueError(f"{where}, line {line}: lone UTF-16 surrogate {escape} at column {column} "
                             "(not a valid character)")
    return value


def read_json(path: str | os.PathLike) -> Any:
    """The parsed JSON document of ``path`` (see :func:`parse_json`).

    Raises:
      ValueError: invalid UTF-8 or JSON, too deep, or a lone surrogate; names the file and line.
      OSError: the file cannot be read.
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        return parse_json(decode_utf8(f.read(), name), name)


def read_json_object(path: str | os.PathLike, what: str = "a JSON object") -> dict:
    """:func:`read_json`, and the top level must be an object.

    Raises:
      ValueError: as :func:`read_json`, or a top level that is not an object (``what`` says what was expected).
    """
    value = read_json(path)
    if not isinstance(value, dict):
        raise ValueError(f"{os.fspath(path)}: expected {what}, got a JSON {_json_type(value)}")
    return value


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[str, dict]]:
    """Yield ``(where, record)`` for every non-blank line of a JSON-lines file; ``where`` = "<path>, line <n>".

    Raises:
      ValueError: invalid UTF-8 or JSON, a lone surrogate, nesting too deep, or a line that is not a JSON object,
        naming the file and the 1-based line.
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            line = decode_utf8(raw, name, lineno)
            if not line.strip():
                continue
            where = f"{name}, line {lineno}"
            record = parse_json(line.rstrip("\r\n"), name, lineno)
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {_json_type(record)}")
            yield where, record


def read_csv_rows(path: str | os.PathLike) -> Iterator[tuple[str, list[str]]]:
    """Yield ``(where, row)`` for every row of a CSV file; ``where`` = "<path>, line <n>" (the row's first line).

    Raises:
      ValueError: invalid UTF-8 or a NUL character (a binary file), or a CSV syntax error, naming file and line.
    """
    name = os.fspath(path)
    reader = csv.reader(io.StringIO(read_text(name), newline=""))
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise ValueError(f"{name}, line {reader.line_num}: invalid CSV: {err}") from None
        yield f"{name}, line {start}", row
        start = reader.line_num + 1


def require_keys(record: Mapping, keys, where: str) -> None:
    """Refuse a decoded record that lacks any of ``keys``.

    Raises:
      ValueError: ``"<where>: missing key(s) 'a', 'b'"`` (``where`` names the file).
    """
    missing = [k for k in keys if k not in record]
    if missing:
        raise ValueError(f"{where}: missing key(s) " + ", ".join(repr(k) for k in missing))


def read_npz(path: str | os.PathLike, keys=()) -> dict:
    """Every array of the ``.npz`` file ``path``, loaded into memory (no pickled objects).

    Args:
      keys: arrays that must be present.

    Raises:
      ValueError: a truncated, empty or non-zip file, a corrupt member, a pickled (object) array, or a missing
        array of ``keys``; names the file (and the arrays).
      OSError: the file cannot be opened (a missing file).
    """
    import zipfile
    import zlib

    import numpy as np

    name = os.fspath(path)
    with open(name, "rb"):  # a missing / unreadable file stays an OSError naming it
        pass
    try:
        with np.load(name, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as e:
        raise ValueError(f"{name}: not a readable .npz file ({type(e).__name__}: {e})") from None
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise ValueError(f"{name}: missing array(s) " + ", ".join(repr(k) for k in missing))
    return arrays


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def read_toml(path: str | os.PathLike) -> dict:
    """The TOML document of ``path`` as a dict.

    Raises:
      ValueError: invalid UTF-8 or TOML, naming the file and the line (and column) of the syntax error.
      OSError: the file cannot be read.
    """
    import tomllib

    name = os.fspath(path)
    try:
        return tomllib.loads(read_text(name))
    except tomllib.TOMLDecodeError as err:
        msg = str(err)
        m = _TOML_POSITION.search(msg)
        if m is None:
            raise ValueError(f"{name}: invalid TOML: {msg}") from None
        raise ValueError(f"{name}, line {m.group(1)}: invalid TOML: {msg[:m.start()]} (column {m.group(2)})"
                         ) from None


def _write_atomic(path: str | os.PathLike, write: Callable[[typing.BinaryIO], None]) -> None:
    """Call ``write`` on a temporary file in ``path``'s folder (created when absent), flush it to disk and rename
    it over ``path``: readers and a kill at any point see the previous file (or none) or the whole new one, never
    a torn one; an exception in ``write`` removes the temporary file and leaves ``path`` as it was. The file gets
    the mode ``open()`` would give it."""
    name = os.fspath(path)
    folder = os.path.dirname(name) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(name)}.", suffix=".tmp", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # the mode open() would give (mkstemp makes 0600)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8, exactly as given: no newline added) to ``path`` atomically: a temporary file in the
    same folder, flushed to disk, then renamed over ``path``. A kill at any point leaves the previous file (or
    none) or the whole new one."""
    data = text.encode("utf-8")
    _write_atomic(path, lambda f: f.write(data))


def portable_json(obj: Any) -> Any:
    """``obj`` as strict JSON holds it: numpy scalars as Python numbers, tuples as lists, keys as strings, NaN as
    ``null`` and ±inf as the strings ``"inf"`` / ``"-inf"`` (the result files of the geometry studies)."""
    if isinstance(obj, dict):
        return {str(k): portable_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [portable_json(v) for v in obj]
    if hasattr(obj, "item") and type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def _json_text(obj: Any, where: str, *, allow_nan: bool = True, **dump_kwargs) -> str:
    """``json.dumps(obj, allow_nan=allow_nan, **dump_kwargs)``; a non-finite number refused (``allow_nan=False``)
    is a ``ValueError`` naming ``where`` (the file it was for)."""
    try:
        return json.dumps(obj, allow_nan=allow_nan, **dump_kwargs)
    except ValueError as err:
        raise ValueError(f"{where}: refusing to write a non-finite number ({err})") from None


def write_json_atomic(path: str | os.PathLike, obj: Any, *, allow_nan: bool = True, newline: bool = True,
                      portable: bool = False, **dump_kwargs) -> None:
    """``json.dumps(obj, **dump_kwargs)`` (a trailing newline added unless ``newline=False``; ``portable=True``
    writes :func:`portable_json` of ``obj``) written with :func:`write_text_atomic`: a kill leaves the previous
    file or the whole new one. The text is made before the file is touched, so an object that cannot be written
    changes nothing.

    Raises:
      ValueError: ``allow_nan=False`` and ``obj`` holds NaN or an infinity (named with the file).
    """
    if portable:
        obj, allow_nan = portable_json(obj), False
    text = _json_text(obj, os.fspath(path), allow_nan=allow_nan, **dump_kwargs)
    write_text_atomic(path, text + "\n" if newline else text)


def write_jsonl_atomic(path: str | os.PathLike, records, **dump_kwargs) -> None:
    """Rewrite the JSON-lines file ``path`` with ``records`` (one ``json.dumps(record, **dump_kwargs)`` per line)
    atomically (:func:`write_text_atomic`): a kill leaves the previous file or the whole new one."""
    where = os.fspath(path)
    write_text_atomic(path, "".join(_json_text(r, where, **dump_kwargs) + "\n" for r in records))


def append_jsonl(path: str | os.PathLike, record: Any, **dump_kwargs) -> None:
    """Append ``json.dumps(record, **dump_kwargs)`` and a newline to ``path`` (created, with its folder, when
    absent): the whole line in one unbuffered ``os.write`` on an ``O_APPEND`` descriptor (repeated only for what
    the kernel did not take), no fsync (a log line per step).

    The lines already there are never touched; a kill mid-write leaves at most a torn LAST line (no newline),
    which the metrics log's reader ignores and its resume rewrites away (:func:`write_jsonl_atomic`). The line is
    made before the file is opened, so a record that cannot be written changes nothing."""
    data = (_json_text(record, os.fspath(path), **dump_kwargs) + "\n").encode("utf-8")
    name = os.fspath(path)
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked (a signal, a full pipe): finish the line
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write_npz_atomic(path: str | os.PathLike, arrays: Mapping[str, Any], *, compressed: bool = False) -> None:
    """``np.savez`` (``np.savez_compressed`` with ``compressed=True``) of ``arrays`` to exactly ``path`` (no
    ``.npz`` appended), atomically (a temporary file in the same folder, flushed, renamed over ``path``): a kill
    leaves the previous file or the whole new one, never a truncated zip."""
    import numpy as np

    save = np.savez_compressed if compressed else np.savez
    _write_atomic(path, lambda f: save(f, **arrays))


def _json_type(value) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__)


# -------------------------------------------------------------------------------------------- field types


def _matches(value, hint) -> bool:
    if hint is Any:
        return True
    if hint is type(None) or hint is None:
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and all(_matches(v, args[0] if args else Any) for v in value)
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    raise TypeError(f"unsupported field annotation {hint!r}")


def describe(hint) -> str:
    """A reader's name for the JSON values a field annotation accepts ("an integer", "a list of numbers", ...)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(h) for h in args)
    if origin in (list, tuple):
        inner = describe(args[0]) if args else "anything"
        return "a list of " + {"an integer": "integers", "a finite number": "finite numbers",
                               "a boolean (true/false)": "booleans", "a string": "strings"}.get(inner, inner)
    names = {bool: "a boolean (true/false)", int: "an integer", float: "a finite number", str: "a string",
             dict: "an object", type(None): "null", None: "null", Any: "anything"}
    return names.get(hint, str(hint))


def type_problem(value, hint) -> str | None:
    """Why ``value`` (decoded JSON/TOML) does not fit the field annotation ``hint``, or None when it does.

    Nothing is converted: ``int`` rejects booleans and floats, ``float`` accepts integers but rejects booleans,
    NaN and infinities, ``bool`` accepts only true/false, lists must hold elements of the element type.
    """
    if _matches(value, hint):
        return None
    return f"must be {describe(hint)}, got {_json_type(value)} {value!r:.60}"


def field_problems(values: Mapping[str, Any], hints: Mapping[str, Any]) -> list[str]:
    """``"<key> must be ..., got ..."`` for every key of ``values`` whose value does not fit ``hints[key]`` (keys
    without a hint are not checked)."""
    problems = []
    for key, value in values.items():
        if key in hints:
            problem = type_problem(value, hints[key])
            if problem:
                problems.append(f"{key} {problem}")
    return problems
