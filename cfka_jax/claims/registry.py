"""A registry of checks: named functions ``run(out_dir) -> list[Claim]``, ours and yours, run into one table.

A check is any function of an output folder (where it may write plots) that returns a non-empty list of
``Claim``. ``Registry.run`` calls each in registration order, stamps every row with its check name and an id
('<lemma>.<n>', counted per lemma across the run, unless the check set one) and rejects duplicate ids.

A file of your own checks (``cfka proofs --extra FILE.py``) is loaded with ``load_checks(path)``: every function
marked with ``@check`` is one check (named by the decorator, default the function name), otherwise the file's
module-level ``run(out_dir)`` is one check named after the file. The file is imported as a plain module, so it
may import ``cfka_jax`` and anything installed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import sys
import time
from typing import Callable

from cfka_jax.claims.record import Claim

CheckFn = Callable[[pathlib.Path], list[Claim]]
_MARK = "__cfka_check__"


def check(fn: CheckFn | None = None, *, name: str | None = None):
    """Marks ``fn`` as a check for ``load_checks``: ``@check`` or ``@check(name='my-lemma')``."""
    def mark(f: CheckFn) -> CheckFn:
        setattr(f, _MARK, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


@dataclasses.dataclass(frozen=True)
class Check:
    """A named check and where it came from (a module name or a file path)."""

    name: str
    run: CheckFn
    source: str


def load_checks(path: str | os.PathLike) -> list[Check]:
    """The checks of a Python file: its ``@check`` functions, else its ``run``. Errors name the file."""
    path = pathlib.Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"--extra {path}: not a Python file (expected an existing FILE.py)")
    mod_name = f"cfka_extra_{path.stem}_{abs(hash(str(path.resolve()))):x}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's file: its failure becomes a FAIL row, the rest still runs
        where = f"line {err.lineno}: {err.msg}" if isinstance(err, SyntaxError) else _exception(err)
        return [Check(path.stem, _failed(f"{path} could not be imported: {where}", path.stem), str(path))]
    marked = [v for v in vars(module).values() if callable(v) and hasattr(v, _MARK)]
    if marked:
        return [Check(getattr(f, _MARK), f, str(path)) for f in marked]
    run = getattr(module, "run", None)
    if not callable(run):
        raise ValueError(f"--extra {path}: defines neither a `run(out_dir)` function nor any `@check` function")
    return [Check(path.stem, run, str(path))]


class Registry:
    """Checks in registration order, by unique name."""

    def __init__(self, checks: list[Check] = ()):
        self._checks: dict[str, Check] = {}
        for c in checks:
            self.add(c)

    def add(self, item: Check) -> None:
        if item.name in self._checks:
            raise ValueError(f"check {item.name!r} from {item.source} clashes with the one from "
                             f"{self._checks[item.name].source}: rename the function or the file")
        self._checks[item.name] = item

    def names(self) -> list[str]:
        return list(self._checks)

    def __len__(self) -> int:
        return len(self._checks)

    def select(self, only: str | None) -> list[Check]:
        """The checks whose name contains ``only`` (all when None); an empty selection is an error."""
        chosen = [c for c in self._checks.values() if not only or only in c.name]
        if not chosen:
            raise ValueError(f"no proof check matches --only {only!r} (checks: {', '.join(self._checks)})")
        return chosen

    def run(self, out_dir: str | os.PathLike, only: str | None = None, log=print) -> list[Claim]:
        """Runs the selected checks with ``out_dir`` for their plots; returns every row, stamped."""
        out = pathlib.Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        claims: list[Claim] = []
        for item in self.select(only):
            start = time.perf_counter()
            try:
                rows = item.run(out)
            except Exception as err:  # noqa: BLE001 - one check's failure is its FAIL row; the others still run
                rows = _failed(f"check {item.name!r} ({item.source}) raised {_exception(err)}", item.name)(out)
            if not isinstance(rows, list) or not rows or not all(isinstance(r, Claim) for r in rows):
                rows = _failed(f"check {item.name!r} ({item.source}) must return a non-empty list of Claim, got "
                               f"{type(rows).__name__}", item.name)(out)
            log(f"{item.name}: {len(rows)} claims in {time.perf_counter() - start:.1f}s")
            claims.extend(dataclasses.replace(r, check=item.name) for r in rows)
        return assign_ids(claims)


def _exception(err: BaseException) -> str:
    """'ZeroDivisionError: division by zero (at file.py, line 12)': the exception and the innermost frame."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    at = f" (at {frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{at}"


def _failed(message: str, lemma: str) -> CheckFn:
    """A check that returns one FAIL row carrying ``message`` (a check that could not run did not pass)."""
    return lambda out_dir: [Claim(lemma, "the check runs and returns its claims", float("nan"), 0.0, "FAIL",
                                  message)]


def assign_ids(claims: list[Claim]) -> list[Claim]:
    """Gives every row without an id '<lemma>.<n>' (n counts that lemma's rows from 1); duplicates are errors."""
    per_lemma: dict[str, int] = {}
    out, seen = [], {}
    for c in claims:
        per_lemma[c.lemma] = per_lemma.get(c.lemma, 0) + 1
        c = c if c.id else dataclasses.replace(c, id=f"{c.lemma}.{per_lemma[c.lemma]}")
        if c.id in seen:
            raise ValueError(f"claim id {c.id!r} of check {c.check!r} is already used by check {seen[c.id]!r}")
        seen[c.id] = c.check
        out.append(c)
    return out
