"""`cfka geometry`: the token-force geometry studies (Ren, Deng, Hong, Lyle, Gal 2026; spec token_force.md).

Subcommands (each writes markdown + JSON tables and plots under ``--out``):

* ``onestep``      §3.4: CH1 / named CH2 variants / exact first-order term vs the actual one-step change.
* ``coldstart``    §8: sign agreement of the comparisons A, B, C over AdamW warm-up steps.
* ``attribution``  §4.2: identification benchmark on the synthetic multi-class task (AUC, Recall@K) for the
                   forward-only presets, the exact per-example gradient product and DataInf.
* ``energy``       §5: energy histogram and energy-threshold masking during SFT (τ ∈ {∞, 1.8, 1.5, 1.0}).
* ``erosion``      §5.3, §6: a two-task world (old multiple choice, then a long-form task in the same or other
                   markers): P(A..D), canonical rate, content accuracy, collision, energy masking, format
                   isolation, the pre-finetuning erosion prediction.
* ``crosslingual`` §4.3: retrieval of an item's translations in disjoint synthetic vocabularies, CH1 vs
                   CH1 + CH2 vs the native baseline vs random.
* ``select``       §4.5, §9: top-5 % selection by CH1 / CH1 + CH2 vs LESS, DataInf, HyperINF and random, then
                   fine-tuning on the selection and downstream accuracy.
* ``transmission`` §7: readout transmission R over Biography CPT, resets, plasticity, and the
                   transmission-drop vs reset-gain rank correlation.

Scales: ``smoke`` (seconds, for tests) and ``small`` (the numbers in docs/geometry.md)::

    cfka geometry onestep --scale small --arch pythia --out runs/geometry/onestep-pythia
    cfka geometry attribution --scale small --out runs/geometry/attribution
    python -m cfka_jax.experiments.geometry energy --scale small --out runs/geometry/energy
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from cfka_jax.values import check_floats, float_arg

_POSITIVE = float_arg(lo=0.0, lo_open=True)  # a finite number > 0 (step sizes, learning rates)


def _taus(text: str) -> tuple[float, ...]:
    """Energy thresholds: ``inf`` / ``∞`` (no masking) or finite numbers > 0, no repeats."""
    try:
        vals = [math.inf if t.strip() in ("inf", "∞") else float(t) for t in text.split(",") if t.strip()]
        check_floats([v for v in vals if v != math.inf], "threshold", lo=0.0, lo_open=True, nonempty=False)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if not vals or len(set(vals)) != len(vals):
        raise argparse.ArgumentTypeError(f"thresholds must be a non-empty list without repeats, got {text!r}")
    return tuple(vals)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cfka geometry", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--scale", choices=("smoke", "small"), default="smoke")
    common.add_argument("--out", help="output folder (default runs/geometry/<command>-<scale>)")
    for name, doc in (("onestep", "one-step influence vs the actual change"), ("coldstart", "cold-start sign"),
                      ("attribution", "identification benchmark"), ("energy", "energy histogram and masking")):
        s = sub.add_parser(name, parents=[common], help=doc)
        s.add_argument("--arch", choices=("qwen", "pythia"), default="qwen")
        if name in ("onestep", "coldstart"):
            s.add_argument("--eta", type=_POSITIVE, help="SGD step of the one-step validation (> 0)")
            s.add_argument("--pair-seed", dest="pair_seed", type=int, default=0)
        if name == "coldstart":
            s.add_argument("--lr", type=_POSITIVE, default=1e-4, help="AdamW learning rate of the warm-up")
            s.add_argument("--start", choices=("random", "base"), default="random",
                           help="warm up from the random initialisation (default) or the synthetic base model")
            s.add_argument("--steps", type=_ints, help="checkpoint steps, e.g. 0,25,50,100,200 (default the scale's)")
        if name == "attribution":
            s.add_argument("--vocab", choices=("full", "total_unique"), default="total_unique")
        if name == "energy":
            s.add_argument("--taus", type=_taus, default=(math.inf, 1.8, 1.5, 1.0), help="e.g. inf,1.8,1.5,1.0")
            s.add_argument("--normalize", choices=("all", "kept"), default="all")
            s.add_argument("--lr", type=_POSITIVE, default=1e-3)
    e = sub.add_parser("erosion", parents=[common], help="collision vs erosion, masking, format isolation")
    e.add_argument("--arch", choices=("qwen", "pythia"), default="qwen")
    e.add_argument("--taus", type=_taus, default=(1.8, 1.5, 1.0), help="masking thresholds, e.g. 1.8,1.5,1.0")
    e.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of the new task")
    e.add_argument("--seeds", type=_ints, help="world/model seeds, e.g. 0,1,2 (default the scale's)")
    c = sub.add_parser("crosslingual", parents=[common], help="cross-lingual retrieval, CH1 vs CH1 + CH2")
    c.add_argument("--arch", choices=("qwen", "pythia"), default="qwen")
    c.add_argument("--topk", type=int, default=16, help="prediction_topk of the topk_unique vocabulary")
    c.add_argument("--seeds", type=_ints, help="world/model seeds, e.g. 0,1,2 (default the scale's)")
    d = sub.add_parser("select", parents=[common], help="top-5 %% data selection vs LESS / DataInf / HyperINF")
    d.add_argument("--arch", choices=("qwen", "pythia"), default="qwen")
    d.add_argument("--fraction", type=float, default=0.05, help="fraction of the pool kept")
    d.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of the fine-tunes")
    d.add_argument("--seeds", type=_ints, help="selection/fine-tuning seeds, e.g. 0,1,2 (default the scale's)")
    t = sub.add_parser("transmission", parents=[common], help="readout transmission, resets, plasticity")
    t.add_argument("--arch", choices=("qwen", "pythia"), default="qwen")
    t.add_argument("--cache-dir", dest="cache_dir", default="runs/data-cache")
    t.add_argument("--resets", type=lambda s: tuple(r.strip() for r in s.split(",") if r.strip()),
                   help="resets swept, e.g. none,readout (default none,readout,readout_only,paper_last4)")
    t.add_argument("--world", choices=("biography", "ood"), default="biography",
                   help="biography: Biography PT/CPT; ood: long CPT on a fact domain, out-of-domain probe tasks")
    t.add_argument("--seeds", type=_ints, help="ood world: seeds, e.g. 0,1,2 (default the scale's)")
    return p


def configs(argv: list[str]):
    """The subcommand name and its frozen config."""
    args = vars(_parser().parse_args(argv))
    command = args.pop("command")
    args["out"] = args["out"] or f"runs/geometry/{command}-{args['scale']}"
    args = {k: v for k, v in args.items() if v is not None}
    if command == "onestep":
        from cfka_jax.experiments.geometry_onestep import OnestepConfig as cls
    elif command == "coldstart":
        from cfka_jax.experiments.geometry_onestep import ColdstartConfig as cls
    elif command == "attribution":
        from cfka_jax.experiments.geometry_attribution import AttributionConfig as cls
    elif command == "energy":
        from cfka_jax.experiments.geometry_energy import EnergyConfig as cls
    elif command == "erosion":
        from cfka_jax.experiments.geometry_erosion import ErosionConfig as cls
    elif command == "crosslingual":
        from cfka_jax.experiments.geometry_crosslingual import CrosslingualConfig as cls
    elif command == "select":
        from cfka_jax.experiments.geometry_select import SelectConfig as cls
    else:
        from cfka_jax.experiments.geometry_transmission import TransmissionConfig as cls
    known = {f.name for f in dataclasses.fields(cls)}
    return command, cls(**{k: v for k, v in args.items() if k in known})


def main(argv: list[str] | None = None) -> int:
    command, cfg = configs(sys.argv[1:] if argv is None else argv)
    if command in ("onestep", "coldstart"):
        from cfka_jax.experiments import geometry_onestep as mod
    elif command == "attribution":
        from cfka_jax.experiments import geometry_attribution as mod
    elif command == "energy":
        from cfka_jax.experiments import geometry_energy as mod
    elif command == "erosion":
        from cfka_jax.experiments import geometry_erosion as mod
    elif command == "crosslingual":
        from cfka_jax.experiments import geometry_crosslingual as mod
    elif command == "select":
        from cfka_jax.experiments import geometry_select as mod
    else:
        from cfka_jax.experiments import geometry_transmission as mod
    getattr(mod, f"run_{command}")(cfg)
    print(f"[cfka geometry {command}] results in {cfg.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
