"""``cfka proofs``: every proof check (and yours) in float64, one table (PASS / FAIL / REFUTED), one PNG per lemma.

    cfka proofs [--out DIR] [--only NAME] [--extra FILE.py ...]

Exits 0 only when no claim fails. The command line is generated from :class:`Config` (``cfka_jax/cli_gen.py``).
"""

from __future__ import annotations

import dataclasses
import pathlib

from cfka_jax.cli_gen import Flags


@dataclasses.dataclass(frozen=True)
class Config:
    """Every proof check in float64: one table (PASS / FAIL / REFUTED), one PNG per lemma. Exits 0 only when no
    claim fails."""

    out: str = "runs/proofs"
    """folder for proofs.txt and the PNG plots"""
    only: str | None = None
    """run only checks whose name contains this"""
    extra: tuple[str, ...] = ()
    """also run your own checks: each file's @check functions, or its run(out_dir) (docs/proofs.md)"""
    record: str | None = None
    """also write the table as the result record RESULTS/lemmas/proofs.json, the lemma rows of `cfka claims` (the
    whole table only: not with --only or --extra)"""


FLAGS = Flags(Config, prog="cfka proofs", extend=("extra",), metavars={"out": "DIR", "only": "NAME", "extra": "FILE.py",
                                                                             "record": "RESULTS"})
"""The command line generated from :class:`Config`."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def command(cfg: Config) -> int:
    """Runs the checks and prints the table: ``cfka proofs``'s run function (an entry point: float64 for the run)."""
    import jax

    from cfka_jax.claims import summary
    from cfka_jax.claims.results import Clock
    from cfka_jax.proofs_check.run_all import registry, report

    if cfg.record is not None and (cfg.only or cfg.extra):
        raise ValueError("--record writes the whole lemma table: it cannot be combined with --only or --extra")
    clock = Clock()
    checks = registry(list(cfg.extra))  # a bad --extra file is an error before anything runs ...
    checks.select(cfg.only)  # ... and so is an --only that matches no check
    jax.config.update("jax_enable_x64", True)
    out = pathlib.Path(cfg.out)
    claims = checks.run(out, only=cfg.only)
    print(report(claims, out))
    failed = [c for c in claims if c.status == "FAIL"]
    print(f"\n{summary(claims)}. Table (txt, json, md, tex) and plots in {out}/")
    if cfg.record is not None:
        print(f"record: {write_lemma_record(cfg.record, claims, cfg, clock)}")
    return 1 if failed else 0


def write_lemma_record(results: str, claims, cfg: Config, clock) -> pathlib.Path:
    """The whole table as the produced record ``RESULTS/lemmas/proofs.json`` (``claims/papers/lemmas.py`` reads it)."""
    from cfka_jax.claims.papers.lemmas import RECORD
    from cfka_jax.claims.results import provenance, write_record

    rows = [{"id": c.id, "check": c.check, "lemma": c.lemma, "statement": c.statement, "measured": c.measured,
             "tolerance": c.tolerance, "status": c.status, "quoted": c.quoted} for c in claims]
    return write_record(results, RECORD, rows=rows, regime={"model": "the single-layer theory model and tiny ports",
                                                             "dtype": "float64"},
                        provenance=provenance(config=dataclasses.asdict(cfg), seeds=[], clock=clock))
