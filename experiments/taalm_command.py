"""``cfka taalm``'s command line: three studies behind one command, chosen by the option that names their data.

    cfka taalm --preset smoke|small|paper --out DIR [--methods "Finetune,Oracle,TAALM"] [--no-twiki]   (taalm.py)
    cfka taalm --preset small --record small --record-seeds 0,1,2 --phi-record-only  (φ's weights, read)
        [--lr LR] [--method-lr "K-Adapter=3e-2"] [--epochs N] [--method-epochs "K-Adapter=60"]
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

from cfka_jax.cli_gen import Flags, number
from cfka_jax.experiments import taalm


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
    lr: float | None = None
    """LAMA-CKL and TemporalWiki learning rate of every method (default: the preset's; recorded in config.json and
    each result file)"""
    method_lr: tuple[str, ...] = ()
    """comma-separated METHOD=LR: a method's own learning rate (LAMA-CKL and TemporalWiki), over --lr"""
    epochs: int | None = None
    """LAMA-CKL epochs of every method (default: the preset's)"""
    method_epochs: tuple[str, ...] = ()
    """comma-separated METHOD=EPOCHS: a method's own LAMA-CKL budget (e.g. "K-Adapter=60"), over --epochs"""
    seed: int = 0
    """study seed N: every seed of the study (θ0 pre-training and LoRA, epoch order and dropout, φ's init and
    meta-training, pair split and order) moves by 1000·N from the preset's (taalm.with_seed); 0: the preset's
    defaults"""
    record: str | None = None
    """after each stage, write the produced records results/taalm/lama_ckl_<RECORD>.json and twiki_<RECORD>.json
    over the finished folders of --record-seeds (experiments/taalm_record.py)"""
    record_seeds: tuple[int, ...] = ()
    """comma-separated seeds whose folders (--record-dirs) the records merge (default: --seed only)"""
    record_dirs: str = "runs/taalm-{preset}-s{seed}"
    """the run folder of each record seed ({preset}, {seed}); --out must be the one of --seed"""
    phi_record_only: bool = False
    """write only the φ record results/taalm/phi_weights_<RECORD>.json from the finished φ of the folders of
    --record-seeds and stop: nothing runs and nothing in the folders is written (the LAMA-CKL and TemporalWiki
    records keep the commit of the runs that wrote them)"""
    results: str = "results"
    """the folder of result records"""
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
        cfg = taalm.preset(self.preset, self.out)
        over = {"progress": self.progress}
        if self.methods:
            over["methods"] = self.methods
        if self.twiki_methods:
            over["twiki_methods"] = self.twiki_methods
        if self.lr is not None:
            over["ckl"] = dataclasses.replace(cfg.ckl, lr=self.lr)
            over["twiki"] = dataclasses.replace(cfg.twiki, lr=self.lr)
        if self.epochs is not None:
            over["ckl"] = dataclasses.replace(over.get("ckl", cfg.ckl), epochs=self.epochs)
        over["method_lr"] = method_values("--method-lr", self.method_lr, float)
        over["method_epochs"] = method_values("--method-epochs", self.method_epochs, int)
        return taalm.with_seed(dataclasses.replace(cfg, **over), self.seed)

    def __post_init__(self):
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")
        self.taalm()  # every setting checked before anything is written (taalm.TaalmConfig.__post_init__)
        if self.record is None:
            if self.phi_record_only:
                raise ValueError("--phi-record-only needs --record NAME")
            return
        if not self.record or "/" in self.record or ".." in self.record:
            raise ValueError(f"--record {self.record!r}: a name such as 'small' (records taalm/lama_ckl_<NAME>)")
        if any(s < 0 for s in self.record_seeds):
            raise ValueError(f"--record-seeds must be >= 0, got {self.record_seeds}")
        try:
            mine = self.record_dirs.format(preset=self.preset, seed=self.seed)
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"--record-dirs {self.record_dirs!r}: only {{preset}} and {{seed}} may appear ({e})")
        if "{seed}" not in self.record_dirs:
            raise ValueError(f"--record-dirs {self.record_dirs!r} must contain {{seed}} (one folder per seed)")
        if self.record_seeds and self.seed not in self.record_seeds:
            raise ValueError(f"--record-seeds {','.join(map(str, self.record_seeds))} lacks --seed {self.seed}")
        out = self.out or f"runs/taalm-{self.preset}"
        if not self.phi_record_only and pathlib.Path(out).resolve() != pathlib.Path(mine).resolve():
            raise ValueError(f"--out {out} is not --record-dirs's folder of seed {self.seed} ({mine}); the record "
                             "would leave this run out")

    def record_stage(self, stage: str) -> None:
        """After ``stage`` (``lama``, ``twiki``): this run's clock, then the stage's record over the seeds."""
        from cfka_jax.experiments import taalm_record

        taalm_record.stamp(self.taalm().out, stage)
        where = {"name": self.record, "results": self.results, "template": self.record_dirs,
                 "seeds": self.record_seeds or (self.seed,), "preset": self.preset}
        paths = [taalm_record.write_stage_record(stage, **where)]
        if stage == "lama":  # φ is finished once LAMA-CKL is
            paths.append(taalm_record.write_phi_record(**where))
        for path in paths:
            if path is not None:
                print(f"[taalm] record {path}", flush=True)


def method_values(flag: str, items: tuple[str, ...], kind: type) -> tuple[tuple[str, object], ...]:
    """``("K-Adapter=3e-2", ...)`` → ``(("K-Adapter", 0.03), ...)``; a bad item: ``ValueError`` naming ``flag``."""
    out = []
    for item in items:
        name, eq, text = item.rpartition("=")
        name = name.strip()
        if not eq or not name:
            raise ValueError(f"{flag}: expected METHOD=VALUE items, got {item!r}")
        try:
            out.append((name, number(kind, text.strip())))
        except ValueError as err:
            raise ValueError(f"{flag}: {name}: {err}") from None
    return tuple(out)


def _presets() -> list[str]:
    return sorted(taalm.PRESETS)


SYNTHETIC = Flags(Config, prog="cfka taalm", choices={"preset": _presets},
                  metavars={"out": "DIR", "record": "NAME", "record_dirs": "TEMPLATE", "results": "DIR",
                            "biography": "PT_DIR", "lama_ckl": "DIR", "temporalwiki": "DIR"})
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
    if cfg.phi_record_only:
        from cfka_jax.experiments import taalm_record

        path = taalm_record.write_phi_record(name=cfg.record, results=cfg.results, template=cfg.record_dirs,
                                             seeds=cfg.record_seeds or (cfg.seed,), preset=cfg.preset)
        print(f"[taalm] record {path}" if path else "[taalm] no finished φ in the --record-seeds folders", flush=True)
        return 0
    if cfg.record is not None:  # its clock starts now: the run's wall and CPU time go into the records
        from cfka_jax.experiments import taalm_record  # noqa: F401
    study = cfg.taalm()
    taalm.run(study, twiki=cfg.twiki, on_stage=cfg.record_stage if cfg.record is not None else None)
    print((pathlib.Path(study.out) / "table.md").read_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(FLAGS.parse(argv))


if __name__ == "__main__":
    raise SystemExit(main())
