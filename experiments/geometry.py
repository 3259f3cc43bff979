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
* ``lds``          the linear datamodeling score of CH1, CH1 + CH2, DataInf, LESS, HyperINF, the exact gradient
                   product and random scores against subsets retrained in one program, and their cost.
* ``transmission`` §7: readout transmission R over Biography CPT, resets, plasticity, and the
                   transmission-drop vs reset-gain rank correlation.
* ``loop``         §7, the paper's Sec. 6 account: rounds of CPT on a domain then SFT on a task vs CPT alone,
                   R before each SFT and each SFT's plasticity (``--world ood``).

Scales: ``smoke`` (seconds, for tests) and ``small`` (the numbers in docs/geometry.md)::

    cfka geometry onestep --scale small --arch pythia --out runs/geometry/onestep-pythia
    cfka geometry attribution --scale small --out runs/geometry/attribution
    python -m cfka_jax.experiments.geometry energy --scale small --out runs/geometry/energy
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys

from cfka_jax.cli_gen import Flags, Subcommands
from cfka_jax.values import check_floats, float_arg, int_arg

_POSITIVE = float_arg(lo=0.0, lo_open=True)  # a finite number > 0 (step sizes, learning rates)


def _taus(text: str) -> tuple[float, ...]:
    """Energy thresholds: ``inf`` / ``∞`` (no masking) or finite numbers > 0, no repeats.

    Raises:
      ValueError: a value that is not such a number, an empty list or a repeat (the parser names ``--taus``).
    """
    try:
        vals = [math.inf if t.strip() in ("inf", "∞") else float(t) for t in text.split(",") if t.strip()]
    except ValueError as err:
        raise ValueError(str(err)) from None
    check_floats([v for v in vals if v != math.inf], "threshold", lo=0.0, lo_open=True, nonempty=False)
    if not vals or len(set(vals)) != len(vals):
        raise ValueError(f"thresholds must be a non-empty list without repeats, got {text!r}")
    return tuple(vals)


SUBCOMMANDS = {  # name → (module, config class, help)
    "onestep": ("geometry_onestep", "OnestepConfig", "one-step influence vs the actual change"),
    "coldstart": ("geometry_onestep", "ColdstartConfig", "cold-start sign"),
    "attribution": ("geometry_attribution", "AttributionConfig", "identification benchmark"),
    "energy": ("geometry_energy", "EnergyConfig", "energy histogram and masking"),
    "erosion": ("geometry_erosion", "ErosionConfig", "collision vs erosion, masking, format isolation"),
    "crosslingual": ("geometry_crosslingual", "CrosslingualConfig", "cross-lingual retrieval, CH1 vs CH1 + CH2"),
    "select": ("geometry_select", "SelectConfig", "top-5 % data selection vs LESS / DataInf / HyperINF"),
    "transmission": ("geometry_transmission", "TransmissionConfig", "readout transmission, resets, plasticity"),
    "lds": ("geometry_lds", "LdsConfig", "linear datamodeling score of the attribution methods vs retrained subsets"),
    "loop": ("geometry_loop", "LoopStudyConfig", "the self-reinforcing loop: CPT → SFT rounds vs CPT alone, R and "
             "plasticity per round"),
}
def archs() -> tuple[str, ...]:
    """The families a synthetic geometry model can be built in: every registered one (``models/family.py``)."""
    from cfka_jax.models import family

    return family.names()
HELP = {  # the help of fields whose docstring is a class-level paragraph
    "scale": "smoke (seconds, for tests) or small (the numbers in docs/geometry.md)",
    "out": "output folder (default runs/geometry/<command>-<scale>)",
    "arch": "model family of the synthetic model", "pair_seed": "seed of the (train, test) pair",
    "eta": "SGD step of the one-step validation (> 0)", "start": "warm up from the random initialisation or the "
    "synthetic base model", "steps": "checkpoint steps, e.g. 0,25,50,100,200 (empty: the scale's)",
    "vocab": "the attribution vocabulary", "taus": "energy thresholds, e.g. inf,1.8,1.5,1.0",
    "normalize": "energy masking: divide by all supervised tokens or by the kept ones",
    "topk": "prediction_topk of the topk_unique vocabulary", "fraction": "fraction of the pool kept",
    "seeds": "seeds, e.g. 0,1,2 (empty: the scale's; seed 0 into --out where a scale has none)",
    "record": "write the produced record results/token-force/NAME.json as seeds finish (attribution, energy, "
    "coldstart, erosion, lds, transmission)", "results": "the folder of the result records (with --record)",
    "cache_dir": "where generated worlds and packs are cached",
    "resets": "resets swept, e.g. none,readout", "sft_lr": "AdamW learning rate of the plasticity fine-tunes",
    "world": "biography: Biography PT/CPT; ood: long CPT on a fact domain, out-of-domain probe tasks",
    "rounds": "CPT → SFT rounds (>= 2)", "block_steps": "domain steps per CPT block (0: the scale's)",
    "task": "the SFT task, one of the ood world's out-of-domain tasks",
    "ident_rule": "the ood world's identification tasks: permute (f_c = π_c∘σ_c; the recorded world, not learned by "
    "the small base model) or map (f_c = π_c, with --ident-classes 3: tasks the base model knows)",
    "ident_classes": "classes of the ood world's identification tasks (0: the scale's)",
}
LR_HELP = {"coldstart": "AdamW learning rate of the warm-up", "erosion": "AdamW learning rate of the new task",
           "select": "AdamW learning rate of the fine-tunes", "energy": "AdamW learning rate of the SFT",
           "crosslingual": "AdamW learning rate"}


def _config_class(name: str) -> type:
    import importlib

    module, cls, _ = SUBCOMMANDS[name]
    return getattr(importlib.import_module(f"cfka_jax.experiments.{module}"), cls)


def _cli_config(name: str) -> type:
    """The config with ``out`` defaulting to None (``runs/geometry/<command>-<scale>``, :func:`configs`)."""
    base = _config_class(name)
    return dataclasses.make_dataclass(base.__name__, [("out", "str | None", dataclasses.field(default=None))],
                                      bases=(base,), frozen=True, namespace={"__doc__": base.__doc__,
                                                                             "__module__": base.__module__})


def _flags(name: str) -> Flags:
    cls = _cli_config(name)
    fields = {f.name for f in dataclasses.fields(cls)}
    choices = {"scale": lambda: ("smoke", "small"), "arch": archs, "start": lambda: ("random", "base"),
               "vocab": lambda: ("full", "total_unique"), "normalize": lambda: ("all", "kept"),
               "world": _worlds, "mode": lambda: ("map", "vmap"), "ident_rule": _ident_rules,
               **(_LOOP_CHOICES if name == "loop" else {})}
    parsers = {"eta": _POSITIVE, "taus": _taus, **({"lr": _POSITIVE} if name in ("coldstart", "energy") else {}),
               **(_LDS_PARSERS if name == "lds" else {}), **(_LOOP_PARSERS if name == "loop" else {})}
    help_ = {**HELP, **({"lr": LR_HELP[name]} if name in LR_HELP else {})}
    pick = lambda d: {k: v for k, v in d.items() if k in fields}  # noqa: E731
    return Flags(cls, prog=f"cfka geometry {name}", description=SUBCOMMANDS[name][2], choices=pick(choices),
                 parsers=pick(parsers), help=pick(help_), metavars=pick({"out": "DIR", "record": "NAME", "results": "DIR"}))


_LDS_PARSERS = {"fraction": float_arg(lo=0.0, hi=1.0, lo_open=True, hi_open=True), "subsets": int_arg(lo=3),
                "lr": _POSITIVE}  # cfka geometry lds: a subset keeps some and leaves some; >= 3 subsets to rank


def _ood_tasks() -> tuple[str, ...]:
    from cfka_jax.geometry.ood import TASKS

    return TASKS


_LOOP_CHOICES = {"world": lambda: ("ood",), "task": _ood_tasks}  # cfka geometry loop: the ood world only
_LOOP_PARSERS = {"rounds": int_arg(lo=2), "block_steps": int_arg(lo=0), "sft_lr": _POSITIVE}


def _ident_rules() -> tuple[str, ...]:
    from cfka_jax.experiments.geometry_transmission_ood import IDENT_RULES

    return IDENT_RULES


def _worlds() -> tuple[str, ...]:
    from cfka_jax.experiments.geometry_transmission import WORLDS

    return WORLDS


class _Flags:
    """``cfka geometry``'s command line: the union of the studies' generated configs, built when first used."""

    prog = "cfka geometry"

    @functools.cached_property
    def commands(self) -> Subcommands:
        return Subcommands(self.prog, {name: _flags(name) for name in SUBCOMMANDS},
                           description=__doc__.split("\n\n")[0], help={n: h for n, (_, _, h) in SUBCOMMANDS.items()})

    def parse(self, argv: list[str] | None = None):
        return self.commands.parse(argv)


FLAGS = _Flags()
"""The command line generated from the studies' configs (``cfka_jax/cli_gen.Subcommands``)."""


def configs(argv: list[str]):
    """The subcommand name and its frozen config (``out`` filled in)."""
    return finish(*FLAGS.parse(argv))


def finish(name: str, cfg):
    """The study's own config from the parsed one: ``out`` defaults to ``runs/geometry/<command>-<scale>``."""
    base = _config_class(name)
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(base)}
    return name, base(**{**values, "out": cfg.out or f"runs/geometry/{name}-{cfg.scale}"})


def main(argv: list[str] | None = None) -> int:
    return command(FLAGS.parse(sys.argv[1:] if argv is None else argv))


def command(parsed) -> int:
    """Runs one study: ``cfka geometry``'s run function (``parsed``: the subcommand's name and config)."""
    import importlib

    name, cfg = finish(*parsed)
    mod = importlib.import_module(f"cfka_jax.experiments.{SUBCOMMANDS[name][0]}")
    getattr(mod, f"run_{name}")(cfg)
    print(f"[cfka geometry {name}] results in {cfg.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
