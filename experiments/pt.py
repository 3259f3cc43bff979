"""``cfka pt``: pre-training on the Biography PT population (resumable), a :class:`runs.specs.PTSpec` run.

    cfka pt --preset smoke|small|paper|... [--arch qwen|pythia|llama] [--dtype bfloat16] [--mesh auto] --out DIR

The command line is generated from :class:`Config` (``cfka_jax/cli_gen.py``); ``cfka cpt`` shares its options.
"""

from __future__ import annotations

import dataclasses
import json

from cfka_jax.cli_gen import Flags
from cfka_jax.data.tokenize import BPE_MIN_VOCAB
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import ARCHS, DTYPES, PTSpec
from cfka_jax.values import int_arg

RUN_HELP = {
    "preset": "scale: smoke (a plumbing check in seconds), small (shows the effect on 2 CPU cores), paper (the "
              "reference scale, for accelerators), w600/w2400/w10k (world sizes between small and paper, for "
              "accelerators); runs/presets.py BIOGRAPHY",
    "out": "run folder (config, metrics.jsonl, checkpoints, final.json)",
    "arch": "model family (models/family.py)",
    "seed": "PRNG seed of the model and the data order",
    "cache_dir": "where generated worlds and packs are cached",
    "progress": "progress bars",
    "dtype": "bfloat16: float32 master weights, bf16 forward/backward, float32 loss",
    "ckpt_every": "checkpoint interval in steps (default: the preset's; 0 = only at the end)",
    "bpe_vocab": "train a BPE tokenizer of N entries on the world (names split into shared pieces) instead of the "
                 "word-level one",
    "mesh": "shard the run over devices, e.g. data=2,fsdp=4 or auto (axes data, fsdp, tensor; docs/scale.md)",
    "distributed": "multi-host: call jax.distributed.initialize first (cluster auto-detection, or "
                   "CFKA_COORDINATOR / CFKA_NUM_PROCESSES / CFKA_PROCESS_ID)",
}
"""The help of the options ``cfka pt`` and ``cfka cpt`` share."""
RUN_CHOICES = {"preset": lambda: list(BIOGRAPHY), "arch": lambda: list(ARCHS), "dtype": lambda: list(DTYPES)}
RUN_PARSERS = {"bpe_vocab": int_arg(lo=BPE_MIN_VOCAB)}
RUN_METAVARS = {"out": "DIR", "bpe_vocab": "N", "cache_dir": "DIR"}


@dataclasses.dataclass(frozen=True)
class Config(PTSpec):
    """Pre-training on the Biography PT population (resumable)."""

    out: str = "runs/pt-smoke-qwen"
    distributed: bool = False

    def spec(self) -> PTSpec:
        return PTSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(PTSpec)})


FLAGS = Flags(Config, prog="cfka pt", choices=RUN_CHOICES, parsers=RUN_PARSERS, help=RUN_HELP,
              metavars=RUN_METAVARS)
"""The command line generated from :class:`Config`."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def start(cfg) -> None:
    """``--distributed``: join the multi-host job before anything touches a device."""
    if cfg.distributed:
        from cfka_jax.parallel.mesh import initialize_distributed

        initialize_distributed()


def print_final(result) -> int:
    print(json.dumps({k: v for k, v in result.final.items() if k.count("/") <= 1}, indent=1))
    return 0


def command(cfg: Config) -> int:
    """Pre-trains and prints the final metrics: ``cfka pt``'s run function."""
    from cfka_jax.runs.biography import pretrain

    start(cfg)
    return print_final(pretrain(cfg.spec()))
