"""The ``cfka`` command line: a thin shell over the library's runs, the proof checks and the experiment scripts.

    cfka proofs [--out DIR] [--only NAME] [--extra FILE.py ...]   every proof check (and yours), one table
    cfka pt  --preset smoke|small|paper --out DIR                    Biography pre-training
    cfka cpt --preset P --method M --update U [--alpha A] --out DIR  continual pre-training
    cfka sweep  [ARGS...]                     the continual-theory sweep (cfka_jax/experiments/theory_sweep.py)
    cfka stoc-table --preset P --out DIR     STOC / LAMOL / Random replay table (cfka_jax/experiments/stoc_table.py)
    cfka knowedit --data test.json --model HF_FOLDER --out DIR       KnowEdit CPT (cfka_jax/experiments/knowedit.py)
    cfka corpus-cpt --data FILES --model HF_FOLDER --out DIR         your corpus + STOC (cfka_jax/experiments/corpus_cpt.py)
    cfka stream --preset P --stages 3 --method M --out DIR           a task stream (cfka_jax/experiments/stream.py)
    cfka report RUN_DIR... [--out DIR]        compare run folders (cfka_jax/experiments/report.py)

This is the top floor: the only module of the package that imports ``cfka_jax.experiments`` or
``cfka_jax.proofs_check``. Each
subcommand is an entry point, so it may set JAX configuration (``proofs`` enables float64). A user error (a bad
value, a missing or malformed file, a run folder that holds another run) prints one message naming the option,
file or folder and exits with status 2; a training run stopped by a non-finite step exits with status 1. Set
``CFKA_TRACEBACK=1`` to get the full traceback instead.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

DESCRIPTION = "Continual knowledge learning in language models: proof checks, Biography PT/CPT and experiments."


def _proofs(args: argparse.Namespace) -> int:
    import jax

    from cfka_jax.claims import summary
    from cfka_jax.proofs_check.run_all import registry, report

    checks = registry(args.extra)  # a bad --extra file is an error before anything runs ...
    checks.select(args.only)  # ... and so is an --only that matches no check
    jax.config.update("jax_enable_x64", True)  # an entry point: float64 for the whole proofs run
    out = pathlib.Path(args.out)
    claims = checks.run(out, only=args.only)
    print(report(claims, out))
    failed = [c for c in claims if c.status == "FAIL"]
    print(f"\n{summary(claims)}. Table (txt, json, md, tex) and plots in {out}/")
    return 1 if failed else 0


PASSTHROUGH = {
    "sweep": ("cfka_jax.experiments.theory_sweep", "main", "continual-theory sweep over EWC strength × α × seeds"),
    "knowedit": ("cfka_jax.experiments.knowedit", "main", "KnowEdit CPT (Naive / LAMOL / STOC) from a local HF model"),
    "corpus-cpt": ("cfka_jax.experiments.corpus_cpt", "main",
                   "CPT on your own corpus with STOC replay and MMLU-format evaluation"),
    "taalm": ("cfka_jax.experiments.taalm", "main",
              "TAALM: meta-train the Train-Attention model, LAMA-CKL and TemporalWiki tables"),
    "geometry": ("cfka_jax.experiments.geometry", "main",
                 "token-force geometry: CH1/CH2 one-step, attribution, update energy, readout transmission"),
}
"""Subcommands whose experiment script still owns an argparse parser: name → (module, entry, help)."""

COMMANDS = {
    "di-attention": ("cfka_jax.experiments.di_attention",
                     "Diversity Index vs the attention of trained ports (softmax or linear), seed ensembles"),
    "stream": ("cfka_jax.experiments.stream",
               "a continual task stream (PT + T CPT stages): accuracy matrix, BWT/FWT/forgetting/FUAR, heat map"),
    "report": ("cfka_jax.experiments.report", "gather run folders into one markdown table and overlaid plots"),
    "invariants": ("cfka_jax.experiments.invariants", "conserved quantities of a port over a run's checkpoints"),
    "stoc-table": ("cfka_jax.experiments.stoc_table", "STOC / LAMOL / Random replay table on Biography"),
    "stoc-scale": ("cfka_jax.experiments.stoc_scale", "STOC / LAMOL / Random replay as the Biography world grows"),
}
"""Subcommands generated from a config dataclass: name → (module, help). The module's ``FLAGS``
(``cfka_jax/cli_gen.Flags``) turn the command line into its ``Config``, its ``command(cfg)`` runs it."""


def resolve(name: str):
    """The one dispatch step: a generated subcommand's (flags, run function)."""
    import importlib

    module = importlib.import_module(COMMANDS[name][0])
    return module.FLAGS, module.command


def _passthrough(command: str, rest: list[str]) -> int:
    import importlib

    module, entry, _ = PASSTHROUGH[command]
    return getattr(importlib.import_module(module), entry)(rest)


def _biography(args: argparse.Namespace) -> int:
    import json

    from cfka_jax.runs import biography as bio
    from cfka_jax.runs.specs import CPTSpec, PTSpec

    if args.distributed:
        from cfka_jax.parallel.mesh import initialize_distributed

        initialize_distributed()
    common = dict(preset=args.preset, out=args.out, arch=args.arch, seed=args.seed, cache_dir=args.cache_dir,
                  progress=not args.no_progress, dtype=args.dtype, ckpt_every=args.ckpt_every, mesh=args.mesh,
                  bpe_vocab=args.bpe_vocab)
    if args.command == "pt":
        result = bio.pretrain(PTSpec(**common))
    else:
        result = bio.continual(CPTSpec(**common, method=args.method, update=args.update, alpha=args.alpha,
                                       ewc_lambda=args.ewc_lambda, ewc_fisher=args.ewc_fisher,
                                       freeze_layers=args.freeze_layers, lora_rank=args.lora_rank,
                                       pt_dir=args.pt_dir, replay_dir=args.replay_dir,
                                       eval_every=args.eval_every, replay=_switches(args),
                                       token_weights=args.token_weights, energy_tau=args.energy_tau,
                                       energy_normalize=args.energy_normalize))
    print(json.dumps({k: v for k, v in result.final.items() if k.count("/") <= 1}, indent=1))
    return 0


def _switches(args: argparse.Namespace):
    from cfka_jax.runs.replay import ReplaySwitches

    return ReplaySwitches(score_norm=args.score_norm, snippet_rule=args.snippet_rule, minhash=not args.no_minhash,
                          lamol_sampler=args.lamol_sampler)


def _add_run_args(p: argparse.ArgumentParser, default_out: str) -> None:
    from cfka_jax.data.tokenize import BPE_MIN_VOCAB
    from cfka_jax.runs.presets import BIOGRAPHY
    from cfka_jax.runs.specs import ARCHS
    from cfka_jax.values import int_arg

    p.add_argument("--preset", default="smoke", choices=list(BIOGRAPHY),
                   help="scale: smoke (a plumbing check in seconds), small (shows the effect on 2 CPU cores), "
                        "paper (the reference scale, for accelerators), w600/w2400/w10k (world sizes between "
                        "small and paper, for accelerators)")
    p.add_argument("--out", default=default_out, help="run folder (config, metrics.jsonl, checkpoints, final.json)")
    p.add_argument("--arch", default="qwen", choices=ARCHS, help="model family (models/family.py)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default="runs/data-cache", help="where generated worlds and packs are cached")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="bfloat16: float32 master weights, bf16 forward/backward, float32 loss")
    p.add_argument("--ckpt-every", type=int, default=None,
                   help="checkpoint interval in steps (default: the preset's; 0 = only at the end)")
    p.add_argument("--bpe-vocab", type=int_arg(lo=BPE_MIN_VOCAB), default=None, metavar="N",
                   help="train a BPE tokenizer of N entries on the world (names split into shared pieces) instead "
                        "of the word-level one")
    p.add_argument("--mesh", default=None, help="shard the run over devices, e.g. data=2,fsdp=4 or auto "
                   "(axes data, fsdp, tensor; docs/scale.md)")
    p.add_argument("--distributed", action="store_true", help="multi-host: call jax.distributed.initialize first "
                   "(cluster auto-detection, or CFKA_COORDINATOR / CFKA_NUM_PROCESSES / CFKA_PROCESS_ID)")


def _add_cpt_args(c: argparse.ArgumentParser) -> None:
    from cfka_jax.runs.specs import METHODS

    c.add_argument("--method", default="naive",
                   help="a name of the one method registry (runs/method.py) or a combination such as 'stoc + ewc': "
                        + ", ".join(METHODS))
    c.add_argument("--update", default="full", choices=["full", "freeze", "lora"])
    c.add_argument("--alpha", type=float, default=0.5, help="new-data fraction for replay, in (0, 1)")
    c.add_argument("--ewc-lambda", type=float, default=1e3, help="EWC strength λ >= 0")
    c.add_argument("--ewc-fisher", default="code", choices=["code", "per_example"])
    c.add_argument("--freeze-layers", type=int, default=None)
    c.add_argument("--lora-rank", type=int, default=None)
    c.add_argument("--pt-dir", default=None, help="a finished PT run folder (default: <out>/../pt-<preset>-<arch>, "
                   "trained first when absent)")
    c.add_argument("--replay-dir", default=None, help="generative replay corpus folder "
                   "(default: <out>/../replay-<method>)")
    c.add_argument("--eval-every", type=int, default=None, help="FTA evaluation interval (default: the preset's)")
    c.add_argument("--score-norm", default="j_plus_1", choices=["j_plus_1", "n_queries"], help="STOC token score")
    c.add_argument("--snippet-rule", default="token_argmax", choices=["token_argmax", "window_sum"])
    c.add_argument("--no-minhash", action="store_true", help="generative replay without MinHash deduplication")
    c.add_argument("--lamol-sampler", default="stoc", choices=["stoc", "topk20"])
    obj = c.add_argument_group("token objective (default: mean next-token NLL)")
    obj.add_argument("--token-weights", default=None, metavar="PHI_DIR",
                     help="TAALM: train on TWPPL with the token weights of a Train-Attention model φ saved by "
                          "`cfka taalm` (its vocabulary must be this run's)")
    obj.add_argument("--energy-tau", type=float, default=None, metavar="TAU",
                     help="drop tokens whose update energy E = ||e_y - softmax(z)||^2 is >= TAU (E in [0, 2])")
    obj.add_argument("--energy-normalize", default=None, choices=["all", "kept"],
                     help="energy masking: divide by all supervised tokens (default) or by the kept ones")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cfka", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("proofs", help="run every proof check (float64) and print the claims table",
                       description="Every proof check in float64: one table (PASS / FAIL / REFUTED), one PNG per "
                                   "lemma. Exits 0 only when no claim fails.")
    p.add_argument("--out", default="runs/proofs", help="folder for proofs.txt and the PNG plots")
    p.add_argument("--only", default=None, help="run only checks whose name contains this")
    p.add_argument("--extra", nargs="+", action="extend", default=[], metavar="FILE.py",
                   help="also run your own checks: each file's @check functions, or its run(out_dir) (docs/proofs.md)")
    pt = sub.add_parser("pt", help="pre-train on the Biography PT population",
                        description="Pre-training on the Biography PT population (resumable).")
    _add_run_args(pt, "runs/pt-smoke-qwen")
    c = sub.add_parser("cpt", help="continual pre-training from the PT run of the preset",
                       description="Continual pre-training on the Biography CPT population from a finished PT run "
                                   "(resumable): naive, EWC, real or generative replay; full, freeze or LoRA.")
    _add_run_args(c, "runs/cpt-smoke")
    _add_cpt_args(c)
    for name, text in sorted([(n, t) for n, (_, t) in COMMANDS.items()] + [(n, t) for n, (_, _, t) in
                                                                            PASSTHROUGH.items()]):
        sub.add_parser(name, help=f"{text}; see `cfka {name} --help`", add_help=False)
    return parser


def _run(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        flags, run = resolve(argv[0])
        return run(flags.parse(argv[1:]))
    if argv and argv[0] in PASSTHROUGH:
        return _passthrough(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "proofs":
        return _proofs(args)
    return _biography(args)


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand; user errors become one message on stderr and exit status 2."""
    from cfka_jax.train.loop import NonFiniteError

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
