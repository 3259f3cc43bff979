"""Runs every proof check (``proofs_check/check_*.py``) and prints one table.

    JAX_ENABLE_X64=1 python -m proofs_check.run_all OUT_DIR      (or: cfka proofs --out OUT_DIR)

Exit status 0 iff no row is FAIL (REFUTED rows are the project's claims that a quoted formula does not hold).
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
import time

import proofs_check
from proofs_check.common import Claim, format_table, require_x64


def check_modules() -> list[str]:
    """Names of the check modules, in file-name order."""
    names = [m.name for m in pkgutil.iter_modules(proofs_check.__path__) if m.name.startswith("check_")]
    return sorted(names)


def run_all(out_dir: pathlib.Path, only: str | None = None, log=print) -> list[Claim]:
    """Runs the checks (those whose name contains ``only``, if given) writing plots under ``out_dir``."""
    require_x64()
    out_dir.mkdir(parents=True, exist_ok=True)
    claims: list[Claim] = []
    for name in check_modules():
        if only and only not in name:
            continue
        start = time.perf_counter()
        mod = importlib.import_module(f"proofs_check.{name}")
        rows = mod.run(out_dir)
        log(f"{name}: {len(rows)} claims in {time.perf_counter() - start:.1f}s")
        claims.extend(rows)
    return claims


def report(claims: list[Claim], out_dir: pathlib.Path) -> str:
    """The table plus the detail lines; also written to ``out_dir/proofs.txt``."""
    text = format_table(claims) + "\n\n" + "\n".join(f"[{c.lemma}] {c.detail}" for c in claims if c.detail)
    (out_dir / "proofs.txt").write_text(text + "\n")
    return text


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
