"""Runs every proof check (``proofs_check/check_*.py``), and any of yours, into one table.

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.run_all OUT_DIR      (or: cfka proofs --out OUT_DIR [--extra FILE.py])

Writes OUT_DIR/proofs.txt, .json, .md, .tex and the plots. Exit status 0 iff no row is FAIL (REFUTED rows are the
project's claims that a quoted formula does not hold).
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil

import cfka_jax.proofs_check as proofs_check
from cfka_jax.claims import Check, Claim, Registry, format_report, load_checks, require_x64, write_tables


def check_modules() -> list[str]:
    """Names of the check modules, in file-name order."""
    names = [m.name for m in pkgutil.iter_modules(proofs_check.__path__) if m.name.startswith("check_")]
    return sorted(names)


def _lazy(name: str):
    """The module's ``run``, imported only when the check runs (so --only skips the others' imports)."""
    return lambda out_dir: importlib.import_module(f"cfka_jax.proofs_check.{name}").run(out_dir)


def registry(extra: list[str] = ()) -> Registry:
    """Our checks (by module name) followed by the checks of the ``extra`` files."""
    reg = Registry([Check(name, _lazy(name), f"proofs_check/{name}.py") for name in check_modules()])
    for path in extra:
        for item in load_checks(path):
            reg.add(item)
    return reg


def run_all(out_dir: pathlib.Path, only: str | None = None, log=print, extra: list[str] = ()) -> list[Claim]:
    """Runs the checks (those whose name contains ``only``, if given) writing plots under ``out_dir``."""
    require_x64()
    reg = registry(extra)
    reg.select(only)  # an unknown --only is an error before anything runs
    return reg.run(out_dir, only=only, log=log)


def report(claims: list[Claim], out_dir: pathlib.Path) -> str:
    """The table plus the detail lines; also written to ``out_dir/proofs.{txt,json,md,tex}``."""
    write_tables(claims, out_dir)
    return format_report(claims)


def main(argv: list[str] | None = None) -> int:
    import sys

    import jax

    jax.config.update("jax_enable_x64", True)
    args = sys.argv[1:] if argv is None else argv
    out = pathlib.Path(args[0] if args else "runs/proofs")
    claims = run_all(out)
    print(report(claims, out))
    return 1 if any(c.status == "FAIL" for c in claims) else 0


if __name__ == "__main__":
    raise SystemExit(main())
