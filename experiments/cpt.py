"""``cfka cpt``: continual pre-training on the Biography CPT population from a finished PT run (resumable), a
:class:`runs.specs.CPTSpec` run: naive, EWC, real or generative replay, RHO-1, ...; full, freeze or LoRA.

    cfka cpt --preset P --method M [--update full|freeze|lora] [--alpha A] [--pt-dir DIR] --out DIR
    cfka cpt --preset P --method M --grid 'lr=1e-3,3e-4;alpha=0.5,0.8;seeds=0,1' --out DIR   # or --grid grid.toml

``--grid`` trains every member of a run grid in one jitted program (``runs/grid.py``): each member's run folder
``DIR/<member>`` as the lone ``cfka cpt`` run with those values writes it, and ``DIR/grid.json``, the summary.

The command line is generated from :class:`Config` (``cfka_jax/cli_gen.py``); the options it shares with
``cfka pt`` keep their help (``experiments/pt.py``), the generative replay switches are ``cfka stoc-table``'s.
"""

from __future__ import annotations

import dataclasses
import json

from cfka_jax.cli_gen import Flags
from cfka_jax.experiments.pt import RUN_CHOICES, RUN_HELP, RUN_METAVARS, RUN_PARSERS, print_final, start
from cfka_jax.experiments.stoc_table import REPLAY_FLAGS
from cfka_jax.geometry.energy import NORMALIZE
from cfka_jax.runs.grid_spec import grid_axes
from cfka_jax.runs.specs import METHODS, UPDATES, CPTSpec


def _grid_arg(text: str) -> str:
    """``--grid``'s value, its syntax (axes, values, a grid file) checked as it is parsed."""
    try:
        grid_axes(text)
    except ValueError as err:  # the parser names --grid already
        raise ValueError(str(err).removeprefix("--grid: ")) from None
    return text


@dataclasses.dataclass(frozen=True)
class Config(CPTSpec):
    """Continual pre-training on the Biography CPT population from a finished PT run (resumable): naive, EWC, real
    or generative replay; full, freeze or LoRA."""

    distributed: bool = False
    grid: str | None = None
    grid_mode: str = "auto"

    def __post_init__(self):
        super().__post_init__()
        if self.grid is None and self.grid_mode != "auto":
            raise ValueError(f"--grid-mode {self.grid_mode} applies to --grid only (add --grid or drop --grid-mode)")

    def spec(self) -> CPTSpec:
        return CPTSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(CPTSpec)})


FLAGS = Flags(
    Config, prog="cfka cpt", parsers={**RUN_PARSERS, "grid": _grid_arg},
    choices={**RUN_CHOICES, "update": lambda: list(UPDATES), "grid_mode": lambda: ["auto", "vmap", "map"], "ewc_fisher": lambda: ["code", "per_example"],
             "energy_normalize": lambda: list(NORMALIZE)},
    nested={"replay": REPLAY_FLAGS}, hidden=("ewc_batches", "rho_k"),
    metavars={**RUN_METAVARS, "grid": "'AXIS=V,V;AXIS=V' | FILE.toml | FILE.json", "token_weights": "PHI_DIR", "energy_tau": "TAU", "pt_dir": "DIR", "replay_dir": "DIR"},
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
          "energy_normalize": "energy masking: divide by all supervised tokens (default) or by the kept ones",
          "lr": "CPT peak learning rate (default: the preset's)",
          "min_lr": "CPT floor learning rate of the cosine decay (default: the preset's)",
          "warmup": "CPT warm-up steps (default: the preset's)",
          "grid": "train a grid of runs in one program: axes seed(s), lr, min_lr, warmup, alpha, ewc_lambda, "
                  "freeze_layers (with --update freeze), as "
                  "'lr=1e-3,3e-4;seeds=0,1' (quoted) or a TOML / JSON file {axis: [values]}; each member writes "
                  "<out>/<member> as the lone run would, <out>/grid.json sums them up",
          "grid_mode": "--grid: members as lax.map (auto on CPU) or vmap (auto on accelerators; split over devices)"})
"""The command line generated from :class:`Config`."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def command(cfg: Config) -> int:
    """Runs CPT (training its PT run first when absent) and prints the final metrics: ``cfka cpt``'s run function."""
    from cfka_jax.runs.biography import continual

    start(cfg)
    if cfg.grid is not None:
        return _run_grid(cfg)
    return print_final(continual(cfg.spec()))


def _run_grid(cfg: Config) -> int:
    """``--grid``: every member validated as a lone run, every folder checked, then one program trains them all;
    prints one line per member (its values and final metrics)."""
    from cfka_jax.runs.grid import run_grid
    from cfka_jax.runs.grid_spec import GridSpec

    grid = GridSpec(cfg.spec(), grid_axes(cfg.grid), cfg.grid_mode)
    results = run_grid(grid)
    for values, result in zip(grid.values, results):
        print(json.dumps({**values, **{k: v for k, v in result.final.items() if k.count("/") <= 1}}))
    return 0
