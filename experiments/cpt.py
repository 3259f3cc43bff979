"""``cfka cpt``: continual pre-training on the Biography CPT population from a finished PT run (resumable), a
:class:`runs.specs.CPTSpec` run: naive, EWC, real or generative replay, RHO-1, ...; full, freeze or LoRA.

    cfka cpt --preset P --method M [--update full|freeze|lora] [--alpha A] [--pt-dir DIR] --out DIR

The command line is generated from :class:`Config` (``cfka_jax/cli_gen.py``); the options it shares with
``cfka pt`` keep their help (``experiments/pt.py``), the generative replay switches are ``cfka stoc-table``'s.
"""

from __future__ import annotations

import dataclasses

from cfka_jax.cli_gen import Flags
from cfka_jax.experiments.pt import RUN_CHOICES, RUN_HELP, RUN_METAVARS, RUN_PARSERS, print_final, start
from cfka_jax.experiments.stoc_table import REPLAY_FLAGS
from cfka_jax.geometry.energy import NORMALIZE
from cfka_jax.runs.specs import METHODS, UPDATES, CPTSpec


@dataclasses.dataclass(frozen=True)
class Config(CPTSpec):
    """Continual pre-training on the Biography CPT population from a finished PT run (resumable): naive, EWC, real
    or generative replay; full, freeze or LoRA."""

    distributed: bool = False

    def spec(self) -> CPTSpec:
        return CPTSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(CPTSpec)})


FLAGS = Flags(
    Config, prog="cfka cpt", parsers=RUN_PARSERS,
    choices={**RUN_CHOICES, "update": lambda: list(UPDATES), "ewc_fisher": lambda: ["code", "per_example"],
             "energy_normalize": lambda: list(NORMALIZE)},
    nested={"replay": REPLAY_FLAGS}, hidden=("ewc_batches", "rho_k"),
    metavars={**RUN_METAVARS, "token_weights": "PHI_DIR", "energy_tau": "TAU", "pt_dir": "DIR", "replay_dir": "DIR"},
    help={**RUN_HELP,
          "method": "a name of the one method registry (runs/method.py) or a combination such as 'stoc + ewc': "
                    + ", ".join(METHODS),
          "update": "which parameters CPT trains: all, all but the first --freeze-layers blocks, or LoRA adapters",
          "alpha": "new-data fraction for replay, in (0, 1)", "ewc_lambda": "EWC strength λ >= 0",
          "ewc_fisher": "EWC's Fisher: the reference code's or per-example squared gradients",
          "freeze_layers": "--update freeze: the number of bottom blocks kept fixed",
          "lora_rank": "--update lora: the adapters' rank",
          "pt_dir": "a finished PT run folder (default: <out>/../pt-<preset>-<arch>, trained first when absent)",
          "replay_dir": "generative replay corpus folder (default: <out>/../replay-<method>)",
          "eval_every": "FTA evaluation interval (default: the preset's)",
          "token_weights": "token objective (default: mean next-token NLL) TAALM: train on TWPPL with the token "
                           "weights of a Train-Attention model φ saved by `cfka taalm` (its vocabulary must be "
                           "this run's)",
          "energy_tau": "token objective: drop tokens whose update energy E = ||e_y - softmax(z)||^2 is >= TAU "
                        "(E in [0, 2])",
          "energy_normalize": "energy masking: divide by all supervised tokens (default) or by the kept ones"})
"""The command line generated from :class:`Config`."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def command(cfg: Config) -> int:
    """Runs CPT (training its PT run first when absent) and prints the final metrics: ``cfka cpt``'s run function."""
    from cfka_jax.runs.biography import continual

    start(cfg)
    return print_final(continual(cfg.spec()))
