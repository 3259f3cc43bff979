"""The ``cfka`` command line: a thin shell over the proof checks and experiment scripts.

    cfka proofs [--out DIR] [--only NAME]     every proof check, one table, one PNG per lemma
    cfka sweep  [ARGS...]                     the continual-theory sweep (experiments/continual_sweep.py)

Each subcommand is an entry point, so it may set JAX configuration (``proofs`` enables float64).
"""

from __future__ import annotations

import argparse
import pathlib
import sys


def _proofs(args: argparse.Namespace) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    from proofs_check.run_all import report, run_all

    out = pathlib.Path(args.out)
    claims = run_all(out, only=args.only)
    if not claims:
        print(f"no proof check matches --only {args.only!r}", file=sys.stderr)
        return 2
    print(report(claims, out))
    failed = [c for c in claims if c.status == "FAIL"]
    print(f"\n{len(claims)} claims: {sum(c.status == 'PASS' for c in claims)} PASS, "
          f"{sum(c.status == 'REFUTED' for c in claims)} REFUTED (quoted forms that do not hold), "
          f"{len(failed)} FAIL. Table and plots in {out}/")
    return 1 if failed else 0


def _sweep(rest: list[str]) -> int:
    from experiments.continual_sweep import main as sweep_main

    return sweep_main(rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cfka", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("proofs", help="run every proof check (float64) and print the claims table")
    p.add_argument("--out", default="runs/proofs", help="folder for proofs.txt and the PNG plots")
    p.add_argument("--only", default=None, help="run only checks whose module name contains this")
    sub.add_parser("sweep", help="continual-theory sweep; see `cfka sweep --help`", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "sweep":
        return _sweep(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "proofs":
        return _proofs(args)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    raise SystemExit(main())
