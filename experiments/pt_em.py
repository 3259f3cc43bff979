"""Generation EM of a finished Biography PT model on its training and its test biographies (memorised vs extracted).

    python -m cfka_jax.experiments.pt_em --preset names150_1aug --pt-dir runs/pt-names150_1aug-qwen

Allen-Zhu & Li's knowledge-extraction test, as the 1-Aug row of issue #23 asks for it: a model that saw each
person in ONE biography can recite that biography (EM on the ``pt_train`` prompts high) yet fail to answer from the
other phrasings of the same facts (EM on ``pt_test``, the three held-out biographies, low); with five training
biographies per person both are high. EM as in the PT run (``eval/em.py``: T = 0.2, 32 new tokens, the first
``em_docs`` biographies of each split, clean prompts), plus the per-split sFTA the PT run recorded. Writes
``<pt-dir>/em_train_test.json``.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.data.pipeline import build_data
from cfka_jax.eval.em import em_prompts, exact_match_rate
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY, lookup, override
from cfka_jax.runs.specs import ARCHS
from cfka_jax.train.step import master_params

SETS = {"Train": "pt_train", "Original": "pt_test"}


def train_test_em(preset: str, pt_dir: str, arch: str = "qwen", bpe_vocab: int | None = None,
                  cache_dir: str = "runs/data-cache", seed: int = 0) -> dict:
    """EM (and the recorded sFTA) of the PT model on ``pt_train`` and ``pt_test``; written next to the run."""
    p = override(lookup(BIOGRAPHY, preset, "Biography"), {"bpe_vocab": bpe_vocab} if bpe_vocab else {})
    folder = RunFolder(pt_dir)
    final = folder.final()
    if final is None:
        raise ValueError(f"--pt-dir {pt_dir} holds no finished PT run (no final.json)")
    bundle = build_data(p.data_config(), cache_dir)
    graphdef, params, rest = nnx.split(build_model(p, arch, len(bundle.tokenizer), seed=0), nnx.Param, ...)
    params, step = folder.load_params(master_params(params))
    model = nnx.merge(graphdef, params, rest)
    out = {"preset": preset, "pt_dir": str(pt_dir), "pt_step": int(step),
           "train_bios_per_person": p.data_config().bio.train_bios_per_person}
    for name, split in SETS.items():
        prompts, skipped = em_prompts(bundle.splits[split], bundle.world.people, bundle.tokenizer, max_docs=p.em_docs)
        res = exact_match_rate(model, prompts, bundle.tokenizer, key=jax.random.key(seed))
        out.update({f"{name}/{k}": v for k, v in res.items()} | {f"{name}/EM_skipped": skipped,
                                                               f"{name}/sFTA": final.get(f"{name}/sFTA")})
    jsonio.write_json_atomic(pathlib.Path(pt_dir) / "em_train_test.json", out, indent=1)
    return out


@dataclasses.dataclass(frozen=True)
class Config:
    """Generation EM of a finished Biography PT model on its training and its test biographies (memorised vs
    extracted)."""

    preset: str = ""
    """the PT run's Biography preset"""
    pt_dir: str = ""
    """a finished PT run folder"""
    arch: str = "qwen"
    """the PT run's model family"""
    bpe_vocab: int | None = None
    """the PT run's BPE vocabulary size (default: the preset's tokenizer)"""
    cache_dir: str = "runs/data-cache"
    """where generated worlds and packs are cached"""

    def __post_init__(self):
        if self.preset not in BIOGRAPHY:
            raise ValueError(f"--preset {self.preset!r}: choose from {', '.join(BIOGRAPHY)}")
        if not self.pt_dir:
            raise ValueError("--pt-dir: a finished PT run folder is required")
        if self.arch not in ARCHS:
            raise ValueError(f"--arch {self.arch!r}: choose from {', '.join(ARCHS)}")


FLAGS = Flags(Config, prog="python -m cfka_jax.experiments.pt_em", required=("preset", "pt_dir"),
              choices={"preset": lambda: list(BIOGRAPHY), "arch": lambda: list(ARCHS)},
              metavars={"pt_dir": "DIR", "cache_dir": "DIR", "bpe_vocab": "N"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def command(cfg: Config) -> int:
    """Writes ``<pt-dir>/em_train_test.json`` and prints its numbers."""
    out = train_test_em(cfg.preset, cfg.pt_dir, cfg.arch, cfg.bpe_vocab, cfg.cache_dir)
    print(" ".join(f"{k} {v:.3f}" for k, v in out.items() if isinstance(v, float)))
    return 0


def main(argv: list[str] | None = None) -> int:
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
