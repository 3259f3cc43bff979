"""The one validation path for numbers a user passes: command-line flags, config-file keys and data-file fields.

Every check names what it checks (``--eta``, ``key 'ks'[2]``, ``field 'position'``) and, when given, where it
came from (``where``: a file, a file and line, a config); nothing is converted beyond int → float:

    check_float(args.eta, "--eta", lo=0.0, lo_open=True)           # finite, > 0
    check_floats(cfg.ks, "ks", lo=0.0, where=path)                  # every entry finite, >= 0, no repeats
    check_int(rec["evidence_length"], "field 'evidence_length'", lo=0, where="f.jsonl, line 3")

For argparse, :func:`float_arg` / :func:`int_arg` / :func:`floats_arg` build ``type=`` callables that raise
``argparse.ArgumentTypeError`` (so the parser prints one line naming the flag and exits 2).

NaN and ±inf are never accepted; booleans are never numbers (JSON ``true`` is not 1); a float is never an int.
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Iterable, Sequence


def _prefix(where: str | None) -> str:
    return f"{where}: " if where else ""


def _interval(lo, hi, lo_open: bool, hi_open: bool) -> str:
    left = "(" if lo_open or lo is None else "["
    right = ")" if hi_open or hi is None else "]"
    return f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"


def _in_range(x, lo, hi, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (x < lo or (lo_open and x == lo)):
        return False
    return not (hi is not None and (x > hi or (hi_open and x == hi)))


def check_float(value, name: str, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
                hi_open: bool = False, where: str | None = None) -> float:
    """``value`` as a float after checking it is a finite number (not a bool) in the interval.

    Raises:
      ValueError: "<where>: <name> must be a finite number in [lo, hi], got <value>".
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not _in_range(value, lo, hi, lo_open, hi_open):
        raise ValueError(f"{_prefix(where)}{name} must be a finite number in {_interval(lo, hi, lo_open, hi_open)}, "
                         f"got {value!r}")
    return float(value)


def check_int(value, name: str, *, lo: int | None = None, hi: int | None = None, where: str | None = None) -> int:
    """``value`` after checking it is an integer (not a bool, not a float) in ``[lo, hi]``.

    Raises:
      ValueError: "<where>: <name> must be an integer in [lo, hi], got <value>".
    """
    if isinstance(value, bool) or not isinstance(value, int) or not _in_range(value, lo, hi, False, False):
        raise ValueError(f"{_prefix(where)}{name} must be an integer in {_interval(lo, hi, False, False)}, "
                         f"got {value!r}")
    return int(value)


def check_unique(values: Sequence, name: str, *, where: str | None = None) -> None:
    """Refuse repeated entries (a grid with a repeated point, a method list naming one twice).

    Raises:
      ValueError: naming the repeated entry and both positions.
    """
    seen: dict = {}
    for i, v in enumerate(values):
        if v in seen:
            raise ValueError(f"{_prefix(where)}{name}[{i}] = {v!r} repeats {name}[{seen[v]}]")
        seen[v] = i


def check_floats(values: Iterable, name: str, *, lo: float | None = None, hi: float | None = None,
                 lo_open: bool = False, hi_open: bool = False, unique: bool = True, nonempty: bool = True,
                 where: str | None = None) -> tuple[float, ...]:
    """Every entry through :func:`check_float` (named ``<name>[i]``), no repeats (``unique``), not empty.

    Raises:
      ValueError: the first bad entry, a repeat or an empty list, named.
    """
    values = tuple(values)
    if nonempty and not values:
        raise ValueError(f"{_prefix(where)}{name} must not be empty")
    out = tuple(check_float(v, f"{name}[{i}]", lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, where=where)
                for i, v in enumerate(values))
    if unique:
        check_unique(out, name, where=where)
    return out


def check_sizes(obj, names: Iterable[str], *, lo: int = 1) -> None:
    """Refuse a config whose fields ``names`` (its sizes and counts) are not whole numbers >= ``lo``; numpy
    integers count, booleans and floats do not.

    Raises:
      ValueError: "<name> must be an integer >= <lo>, got <value>" for the first field that fails.
    """
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def float_arg(*, lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False):
    """An argparse ``type=`` for a finite float in the interval (argparse names the flag; exit 2)."""

    def parse(text: str) -> float:
        try:
            return check_float(_parse_float(text), "value", lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = "number"
    return parse


def int_arg(*, lo: int | None = None, hi: int | None = None):
    """An argparse ``type=`` for an integer in ``[lo, hi]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        try:
            return check_int(value, "value", lo=lo, hi=hi)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = "integer"
    return parse


def floats_arg(*, lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
               unique: bool = True):
    """An argparse ``type=`` for a comma-separated list of finite floats (each in the interval, no repeats)."""

    def parse(text: str) -> tuple[float, ...]:
        try:
            values = [_parse_float(x) for x in text.split(",") if x.strip()]
            return check_floats(values, "list", lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, unique=unique)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = "list of numbers"
    return parse
