"""``cfka taalm``'s command line: three studies behind one command, chosen by the option that names their data.

    cfka taalm --preset smoke|small|paper --out DIR [--methods "Finetune,Oracle,TAALM"] [--no-twiki]   (taalm.py)
    cfka taalm --biography PT_DIR --preset smoke|small --out DIR                     (taalm_biography.py)
    cfka taalm --lama-ckl DIR | --temporalwiki DIR --model HF_DIR --out DIR ...      (taalm_real.py)

Each study's options are generated from its frozen ``Config`` (``cfka_jax/cli_gen.py``): :class:`Config` here for
the synthetic benchmarks, ``taalm_biography.Config`` and ``taalm_real.Config``. ``--biography`` selects the
Biography study, ``--lama-ckl`` / ``--temporalwiki`` the real files (``cfka taalm --lama-ckl X --help`` lists their
options); without them it is the synthetic LAMA-CKL and TemporalWiki tables.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

from cfka_jax.cli_gen import Flags


@dataclasses.dataclass(frozen=True)
class Config:
    """TAALM on synthetic LAMA-CKL and TemporalWiki: meta-train the Train-Attention model φ, then every method on
    the same θ0 (``experiments/taalm.py``)."""

    preset: str = "small"
    """scale (taalm.PRESETS)"""
    out: str | None = None
    """run folder (default runs/taalm-<preset>)"""
    methods: tuple[str, ...] = ()
    """comma-separated LAMA-CKL methods (empty: all)"""
    twiki_methods: tuple[str, ...] = ()
    """comma-separated TemporalWiki methods (empty: all)"""
    twiki: bool = True
    """TemporalWiki"""
    progress: bool = True
    """progress bars"""
    biography: str | None = None
    """meta-train φ for the Biography world of this finished `cfka pt` run and measure it in `cfka cpt` with replay
    (experiments/taalm_biography.py; its own options, `cfka taalm --biography X --help`)"""
    lama_ckl: str | None = None
    """LAMA-CKL on the reference's files in this folder with a local HF model (experiments/taalm_real.py; its own
    options, `cfka taalm --lama-ckl X --help`)"""
    temporalwiki: str | None = None
    """TemporalWiki on the reference's files in this folder (experiments/taalm_real.py)"""

    def taalm(self):
        """The study's config: the preset with the chosen methods."""
        from cfka_jax.experiments.taalm import preset

        cfg = preset(self.preset, self.out)
        over = {"progress": self.progress}
        if self.methods:
            over["methods"] = self.methods
        if self.twiki_methods:
            over["twiki_methods"] = self.twiki_methods
        return dataclasses.replace(cfg, **over)


def _presets() -> list[str]:
    from cfka_jax.experiments.taalm import PRESETS

    return sorted(PRESETS)


SYNTHETIC = Flags(Config, prog="cfka taalm", choices={"preset": _presets},
                  metavars={"out": "DIR", "biography": "PT_DIR", "lama_ckl": "DIR", "temporalwiki": "DIR"})
"""The synthetic benchmarks' options (and the two options that choose another study)."""

SELECTORS = {"biography": ("--biography",), "real": ("--lama-ckl", "--temporalwiki")}
"""The options that choose a study; the first one in ``argv`` decides."""


class _Flags:
    """``cfka taalm``'s command line: the study chosen by :data:`SELECTORS`, then its generated flags."""

    prog = "cfka taalm"

    @functools.cached_property
    def modes(self) -> dict:
        """study → (an argv that selects it, its Flags)."""
        from cfka_jax.experiments import taalm_biography, taalm_real

        return {"synthetic": ((), SYNTHETIC), "biography": (("--biography", "X"), taalm_biography.FLAGS),
                "real": (("--lama-ckl", "X"), taalm_real.FLAGS)}

    def mode(self, argv: list[str]) -> str:
        for arg in argv:
            for mode, options in SELECTORS.items():
                if arg.split("=")[0] in options:
                    return mode
        return "synthetic"

    def parse(self, argv: list[str] | None = None):
        import sys

        argv = list(sys.argv[1:] if argv is None else argv)
        mode = self.mode(argv)
        return mode, self.modes[mode][1].parse(argv)


FLAGS = _Flags()
"""The command line generated from the three studies' configs."""


def command(parsed) -> int:
    """Runs the chosen study: ``cfka taalm``'s run function (``parsed``: the study and its config)."""
    mode, cfg = parsed
    if mode == "biography":
        from cfka_jax.experiments import taalm_biography

        return taalm_biography.command(cfg)
    if mode == "real":
        from cfka_jax.experiments import taalm_real

        return taalm_real.command(cfg)
    from cfka_jax.experiments.taalm import run

    study = cfg.taalm()
    run(study, twiki=cfg.twiki)
    print((pathlib.Path(study.out) / "table.md").read_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(FLAGS.parse(argv))
