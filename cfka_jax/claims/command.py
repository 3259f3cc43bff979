"""``cfka claims``: the verdict on every claim of the three papers, derived from the result records.

    cfka claims [--results DIR] [--paper P] [--json] [--out DIR]     print (or write) the verdict table
    cfka claims --check                                               re-derive everything; exit 1 on a mismatch
    cfka claims --write-docs                                          rewrite the generated blocks of README/docs

Reads records only (``results/``) and runs in seconds. ``--check`` fails (exit 1, naming the claim, file or line)
when a record is malformed or lacks provenance, a claim's record is missing or its rule fails on it, a verdict
rests on no record, or a generated block in README.md or docs/ differs from what the records give. CI runs it.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

from cfka_jax.cli_gen import Flags
from cfka_jax.claims.papers import PAPERS


@dataclasses.dataclass(frozen=True)
class Config:
    """The verdict table of the papers' claims, derived from the result records (reads records only)."""

    results: str = "results"
    """the folder of the result records"""
    paper: str | None = None
    """only this paper's claims (cfka, taalm, token-force)"""
    json: bool = False
    """print one JSON object per claim instead of the table"""
    out: str | None = None
    """also write claims.md, claims.json and claims.tex into this folder"""
    check: bool = False
    """re-derive every verdict and compare the generated blocks of README.md and docs/; exit 1 on any difference"""
    write_docs: bool = False
    """rewrite the generated blocks of README.md and docs/ from the records"""
    docs: str = "."
    """the checkout whose README.md and docs/ hold the generated blocks"""

    def __post_init__(self):
        if self.paper is not None and self.paper not in PAPERS:
            raise ValueError(f"--paper: expected one of {', '.join(PAPERS)}, got {self.paper!r}")
        if self.check and self.write_docs:
            raise ValueError("--check and --write-docs: choose one (check compares, write-docs rewrites)")


FLAGS = Flags(Config, prog="cfka claims", choices={"paper": lambda: PAPERS},
              metavars={"results": "DIR", "out": "DIR", "docs": "DIR"})


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def check(cfg: Config) -> list[str]:
    """Every problem ``--check`` reports ([] when the records, the verdicts and the docs agree)."""
    from cfka_jax.claims import table
    from cfka_jax.claims.results import load_records

    try:
        records = load_records(cfg.results)
    except ValueError as err:
        return [str(err)]
    problems, rows = [], []
    for claim in table.all_claims(records):
        try:
            rows.append(table.judge(claim, records))
        except table.ClaimsError as err:
            problems.append(str(err))
    if problems:
        return problems
    try:
        problems += table.check_docs(cfg.docs, rows, records)
    except table.ClaimsError as err:
        problems.append(str(err))
    return problems


def command(cfg: Config) -> int:
    from cfka_jax.claims import table
    from cfka_jax.claims.results import load_records
    from cfka_jax.jsonio import write_text_atomic

    if cfg.check:
        problems = check(cfg)
        for p in problems:
            print(f"cfka claims --check: {p}", file=sys.stderr)
        if not problems:
            print(f"cfka claims --check: every verdict re-derived from {cfg.results}/ and every generated block "
                  "agrees")
        return 1 if problems else 0
    records = load_records(cfg.results)
    rows = table.derive(records)
    if cfg.write_docs:
        for path in table.write_docs(cfg.docs, rows, records):
            print(f"rewrote {path}")
    shown = [r for r in rows if cfg.paper in (None, r.claim.paper)]
    if cfg.out is not None:
        out = pathlib.Path(cfg.out)
        for ext, text in (("md", table.to_markdown(shown)), ("json", table.to_json(shown)),
                          ("tex", table.to_latex(shown))):
            write_text_atomic(out / f"claims.{ext}", text + "\n")
    if cfg.json:
        print(table.to_json(shown))
    elif not cfg.write_docs:
        print(table.to_text(shown))
        n = table.counts(shown)
        print("\n" + ", ".join(f"{v} {k}" for k, v in n.items()) + f" ({len(shown)} claims)")
        extra = table.unread(records, rows)
        if extra:
            print(f"records no claim reads: {', '.join(extra)}")
    return 0
