"""The ``cfka`` command line: a thin shell over the library's runs, the proof checks and the experiment scripts.

    cfka proofs [--out DIR] [--only NAME] [--extra FILE.py ...]   every proof check (and yours), one table
    cfka claims [--json] [--check] [--out DIR]  the verdict on every paper claim, from results/ (claims/command.py)
    cfka pt  --preset smoke|small|paper --out DIR                    Biography pre-training (experiments/pt.py)
    cfka cpt --preset P --method M --update U [--alpha A] --out DIR  continual pre-training (experiments/cpt.py)
    cfka sweep [--config grid.toml] [--ks ...]  the continual-theory sweep (experiments/theory_sweep.py)
    cfka stoc-table --preset P --out DIR     STOC / LAMOL / Random replay table (experiments/stoc_table.py)
    cfka bio-table --preset small --seeds 0,1,2 --pt-seeds 0,1   the Biography CPT table (experiments/biography_table.py)
    cfka knowedit --data test.json --model HF_FOLDER --out DIR       KnowEdit CPT (experiments/knowedit.py)
    cfka corpus-cpt --data FILES --model HF_FOLDER --out DIR         your corpus + STOC (experiments/corpus_cpt.py)
    cfka stream --preset P --stages 3 --method M --out DIR           a task stream (experiments/stream.py)
    cfka taalm [--biography PT_DIR | --lama-ckl DIR ...]             TAALM (experiments/taalm_command.py)
    cfka geometry onestep|coldstart|...|transmission|loop [--scale S]  token-force geometry (experiments/geometry.py)
    cfka report RUN_DIR... [--out DIR]        compare run folders (experiments/report.py)

One dispatch level: the first word names a :data:`COMMANDS` entry, whose module's ``FLAGS`` (generated from its
frozen ``Config`` by ``cfka_jax/cli_gen.py``) parse the rest and whose ``command(cfg)`` runs it. This is the top
floor: the only module of the package that imports ``cfka_jax.experiments`` or ``cfka_jax.proofs_check``. Each
subcommand is an entry point, so it may set JAX configuration (``proofs`` enables float64). A user error (a bad
value, a missing or malformed file, a run folder that holds another run) prints one message naming the option,
file or folder and exits with status 2; a training run stopped by a non-finite step exits with status 1. Set
``CFKA_TRACEBACK=1`` to get the full traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys

DESCRIPTION = "Continual knowledge learning in language models: proof checks, Biography PT/CPT and experiments."


COMMANDS = {
    "proofs": ("cfka_jax.proofs_check.command", "run every proof check (float64) and print the claims table"),
    "claims": ("cfka_jax.claims.command",
               "the verdict on every claim of the three papers, derived from the result records (results/)"),
    "pt": ("cfka_jax.experiments.pt", "pre-train on the Biography PT population"),
    "cpt": ("cfka_jax.experiments.cpt", "continual pre-training from the PT run of the preset"),
    "sweep": ("cfka_jax.experiments.theory_sweep", "continual-theory sweep over EWC strength × α × seeds"),
    "di-attention": ("cfka_jax.experiments.di_attention",
                     "Diversity Index vs the attention of trained ports (softmax or linear), seed ensembles"),
    "di-walk": ("cfka_jax.experiments.di_walk",
                "where the Diversity Index law breaks: the theory model, ports on its world, step by step to Biography"),
    "stream": ("cfka_jax.experiments.stream",
               "a continual task stream (PT + T CPT stages): accuracy matrix, BWT/FWT/forgetting/FUAR, heat map"),
    "report": ("cfka_jax.experiments.report", "gather run folders into one markdown table and overlaid plots"),
    "invariants": ("cfka_jax.experiments.invariants", "conserved quantities of a port over a run's checkpoints"),
    "stoc-table": ("cfka_jax.experiments.stoc_table", "STOC / LAMOL / Random replay table on Biography"),
    "stoc-scale": ("cfka_jax.experiments.stoc_scale", "STOC / LAMOL / Random replay as the Biography world grows"),
    "stoc-regime": ("cfka_jax.experiments.stoc_regime",
                    "STOC vs Random (vs LAMOL) replay at one Biography dose, over PT replicates and seeds"),
    "bio-table": ("cfka_jax.experiments.biography_table",
                  "the Biography CPT table (naive, EWC, replay, freeze, LoRA; more methods by --cells) over PT "
                  "replicates and seeds, with its result record"),
    "taalm": ("cfka_jax.experiments.taalm_command",
              "TAALM: meta-train the Train-Attention model, LAMA-CKL and TemporalWiki tables (synthetic, Biography "
              "or the reference's files)"),
    "corpus-cpt": ("cfka_jax.experiments.corpus_cpt",
                   "CPT on your own corpus with STOC replay and MMLU-format evaluation"),
    "knowedit": ("cfka_jax.experiments.knowedit", "KnowEdit CPT (Naive / LAMOL / STOC) from a local HF model"),
    "geometry": ("cfka_jax.experiments.geometry",
                 "token-force geometry: CH1/CH2 one-step, attribution, update energy, readout transmission, "
                 "the CPT → SFT loop"),
}
"""Subcommands generated from a config dataclass: name → (module, help). The module's ``FLAGS``
(``cfka_jax/cli_gen.Flags``) turn the command line into its ``Config``, its ``command(cfg)`` runs it."""


XLA_CPU_FLAGS = ("--xla_cpu_enable_concurrency_optimized_scheduler=false",)
"""XLA flags every ``cfka`` process starts with (appended to ``XLA_FLAGS`` unless it sets the same option). XLA:CPU's
concurrency-optimised scheduler orders independent work early so the thunk executor can overlap it; for a model it
hoists the float32 upcasts XLA:CPU makes of every bf16 matmul operand to the start of the program, so all of them
are alive at once. Without it (compiled buffer assignment, ``docs/models_bench.md``): the Qwen3-1.7B-shape
evaluation forward holds 1.74 GiB of temporaries instead of 6.19, its LoRA train step 10.57 GiB instead of
12.98; the 16.9 M benchmark step's speed did not move beyond run-to-run noise. XLA reads the option from the
process's flags only (``jax.jit(compiler_options=...)`` accepts it and ignores it), so it is set here, before the
backend starts; library users set ``XLA_FLAGS`` themselves."""


def xla_flags(current: str) -> str:
    """``current`` (an ``XLA_FLAGS`` value) with :data:`XLA_CPU_FLAGS` appended, the user's own settings kept."""
    given = {f.split("=", 1)[0] for f in current.split()}
    return " ".join([current.strip(), *[f for f in XLA_CPU_FLAGS if f.split("=", 1)[0] not in given]]).strip()


def resolve(name: str):
    """The one dispatch step: a generated subcommand's (flags, run function)."""
    import importlib

    module = importlib.import_module(COMMANDS[name][0])
    return module.FLAGS, module.command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cfka", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, text) in sorted(COMMANDS.items()):
        sub.add_parser(name, help=f"{text}; see `cfka {name} --help`", add_help=False)
    return parser


def _run(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        flags, run = resolve(argv[0])
        return run(flags.parse(argv[1:]))
    build_parser().parse_args(argv)  # --help, no command or an unknown one: argparse prints and exits
    return 2


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand; user errors become one message on stderr and exit status 2."""
    from cfka_jax.train.loop import NonFiniteError

    os.environ["XLA_FLAGS"] = xla_flags(os.environ.get("XLA_FLAGS", ""))  # read when the backend starts
    argv = sys.argv[1:] if argv is None else argv
    command = f"cfka {argv[0]}" if argv and not argv[0].startswith("-") else "cfka"
    try:
        return _run(argv)
    except NonFiniteError as err:
        if os.environ.get("CFKA_TRACEBACK"):
            raise
        print(f"{command}: stopped: {err}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as err:  # the project's errors name the option, file or folder
        if os.environ.get("CFKA_TRACEBACK"):
            raise
        print(f"{command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
