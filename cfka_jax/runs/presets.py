"""The one preset type: the scale of a study (model size, training phases, evaluation and replay sizes).

A :class:`Preset` holds what a scale fixes and nothing a run chooses (method, α, seed, folders):

* ``pt`` / ``cpt``: the :class:`Schedule` of each training phase (``pt`` is None for studies that start from a
  pretrained model: KnowEdit, bring-your-own corpus);
* ``model``: the :class:`~cfka_jax.models.family.ModelSize` of a from-scratch model (Biography), None for a
  pretrained one;
* ``data`` / ``people`` / ``seq_len`` / ``bpe_vocab`` / ``name_pool``: the Biography data preset and its overrides
  (``seq_len`` is the chunk length of every study; ``bpe_vocab`` trains a BPE tokenizer of that size instead of the
  word-level one; ``name_pool`` cuts the name pools so name parts are shared, ``BiographyConfig.name_pool``);
* evaluation (``eval_batch``, ``em_docs``, ``mc_max_length``), update modes (``freeze_layers``, ``lora_rank``)
  and generative-replay sampling sizes (:class:`ReplaySampling`).

``BIOGRAPHY``, ``KNOWEDIT`` and ``CORPUS`` are the shipped scales of the three studies (``smoke`` runs in seconds
for tests; ``small`` shows the effect on 2 CPU cores; ``paper`` is the reference scale, for accelerators).
:func:`override` replaces fields by dotted name (``{"cpt.steps": 5, "replay.samples": 1}``), re-validating.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from cfka_jax.models.family import ModelSize  # noqa: F401 (re-exported: the one size type)
from cfka_jax.train.loop import LoopConfig
from cfka_jax.train.optim import OptimConfig


def _check_ints(obj, names: tuple[str, ...], minimum: dict[str, int]) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{type(obj).__name__}.{name} must be an integer, got {value!r}")
        if value < minimum.get(name, 0):
            raise ValueError(f"{type(obj).__name__}.{name} must be >= {minimum.get(name, 0)}, got {value}")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One training phase: steps, AdamW warm-up/cosine learning rates, batch size and cadence.

    ``eval_every`` / ``ckpt_every`` = 0: evaluate / checkpoint only at step 0 (evaluation) and at the end.
    """

    steps: int
    warmup: int
    peak_lr: float
    min_lr: float
    batch: int
    eval_every: int = 0
    ckpt_every: int = 0

    def __post_init__(self):
        _check_ints(self, ("steps", "warmup", "batch", "eval_every", "ckpt_every"), {"steps": 1, "batch": 1})
        self.optim()  # validates the learning rates (finite, 0 <= min <= peak) and warmup <= steps

    def optim(self) -> OptimConfig:
        return OptimConfig(peak_lr=self.peak_lr, min_lr=self.min_lr, warmup_steps=self.warmup,
                           total_steps=self.steps)

    def loop(self, *, progress: bool = True) -> LoopConfig:
        return LoopConfig(steps=self.steps, log_every=max(1, min(10, self.steps)), eval_every=self.eval_every,
                          ckpt_every=self.ckpt_every, progress=progress)


@dataclasses.dataclass(frozen=True)
class ReplaySampling:
    """Generative-replay sampling sizes of a real-data study: source documents (None: all), new tokens per
    sample, samples per prompt, rows per sampling call."""

    sources: int | None = None
    new_tokens: int = 256
    samples: int = 3
    batch: int = 64

    def __post_init__(self):
        _check_ints(self, ("sources", "new_tokens", "samples", "batch"),
                    {"sources": 1, "new_tokens": 1, "samples": 1, "batch": 1})


@dataclasses.dataclass(frozen=True)
class Preset:
    """The scale of one study (module docstring)."""

    name: str
    cpt: Schedule
    pt: Schedule | None = None
    model: ModelSize | None = None
    data: str | None = None
    people: tuple[int, int] | None = None
    seq_len: int | None = None
    eval_batch: int = 16
    em_docs: int = 20
    freeze_layers: int = 1
    lora_rank: int = 8
    replay: ReplaySampling = ReplaySampling()
    mc_max_length: int = 2048
    bpe_vocab: int | None = None
    name_pool: tuple[int, int, int] | None = None
    bios_per_person: int | None = None

    def __post_init__(self):
        _check_ints(self, ("seq_len", "eval_batch", "em_docs", "freeze_layers", "lora_rank", "mc_max_length"),
                    {"seq_len": 2, "eval_batch": 1, "lora_rank": 1, "mc_max_length": 8})

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def data_config(self):
        """The Biography data preset with this preset's overrides (people, chunk length, BPE vocabulary)."""
        from cfka_jax.data.pipeline import preset as data_preset

        if self.data is None:
            raise ValueError(f"preset {self.name!r} has no Biography data preset")
        cfg = data_preset(self.data)
        if self.people is not None:
            bio_cfg = dataclasses.replace(cfg.bio, num_pt_people=self.people[0], num_cpt_people=self.people[1])
            cfg = dataclasses.replace(cfg, bio=bio_cfg)
        if self.bpe_vocab is not None:
            cfg = dataclasses.replace(cfg, bpe_vocab=self.bpe_vocab)
        if self.name_pool is not None:
            cfg = dataclasses.replace(cfg, bio=dataclasses.replace(cfg.bio, name_pool=self.name_pool))
        if self.bios_per_person is not None:
            cfg = dataclasses.replace(cfg, bio=dataclasses.replace(cfg.bio, train_bios_per_person=self.bios_per_person))
        return dataclasses.replace(cfg, seq_len=self.seq_len) if self.seq_len is not None else cfg


def override(preset: Preset, changes: Mapping[str, Any]) -> Preset:
    """``preset`` with fields replaced by dotted name (``cpt.steps``, ``replay.samples``, ``eval_batch``).

    Raises:
      ValueError: an unknown field name (listing the known ones) or an invalid value.
    """
    nested: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for name, value in changes.items():
        head, _, leaf = name.partition(".")
        (nested.setdefault(head, {}).__setitem__(leaf, value) if leaf else top.__setitem__(head, value))
    known = {f.name for f in dataclasses.fields(Preset)}
    for head, fields in nested.items():
        part = getattr(preset, head, None) if head in known else None
        if not dataclasses.is_dataclass(part):
            raise ValueError(f"unknown preset field {head!r}; known: {sorted(known)}")
        names = {f.name for f in dataclasses.fields(part)}
        if not set(fields) <= names:
            raise ValueError(f"unknown field(s) {sorted(set(fields) - names)} of preset.{head}; known: {sorted(names)}")
        top[head] = dataclasses.replace(part, **fields)
    if not set(top) <= known:
        raise ValueError(f"unknown preset field(s) {sorted(set(top) - known)}; known: {sorted(known)}")
    return dataclasses.replace(preset, **top)


BIOGRAPHY = {
    "smoke": Preset("smoke", data="smoke", model=ModelSize(32, 2, 4, 2, 64),
                    pt=Schedule(12, 2, 3e-3, 3e-4, batch=4), cpt=Schedule(6, 1, 1e-3, 1e-4, batch=4), em_docs=4),
    "small": Preset("small", data="small", model=ModelSize(96, 3, 4, 2, 288),
                    pt=Schedule(2000, 100, 3e-3, 1e-4, batch=16, eval_every=250, ckpt_every=250),
                    cpt=Schedule(400, 40, 1e-3, 1e-4, batch=16, eval_every=250, ckpt_every=250),
                    lora_rank=16, em_docs=100, people=(150, 50), seq_len=128),
    "paper": Preset("paper", data="paper", model=ModelSize(768, 12, 12, 12, 3072),
                    pt=Schedule(320_000, 1000, 1e-3, 5e-5, batch=48, eval_every=5000, ckpt_every=5000),
                    cpt=Schedule(80_000, 250, 5e-5, 1e-5, batch=48, eval_every=5000, ckpt_every=5000),
                    freeze_layers=6, lora_rank=128, em_docs=20_000),
    # World sizes between small and paper (the STOC-at-scale sweep, ``cfka stoc-scale``): PT and CPT people in the
    # small preset's 3 : 1 ratio, steps × batch scaled with the people so each person gets the small preset's
    # exposure (≈ 27k PT tokens per PT person, ≈ 16k CPT tokens per CPT person), the model widened with the world.
    "w600": Preset("w600", data="small", model=ModelSize(128, 4, 4, 2, 384),
                   pt=Schedule(8000, 200, 3e-3, 1e-4, batch=16, eval_every=1000, ckpt_every=1000),
                   cpt=Schedule(1600, 80, 1e-3, 1e-4, batch=16, eval_every=400, ckpt_every=400),
                   lora_rank=16, em_docs=200, people=(600, 200), seq_len=128),
    "w2400": Preset("w2400", data="small", model=ModelSize(192, 4, 6, 2, 576),
                    pt=Schedule(16_000, 400, 2e-3, 1e-4, batch=32, eval_every=2000, ckpt_every=2000),
                    cpt=Schedule(3200, 160, 1e-3, 1e-4, batch=32, eval_every=800, ckpt_every=800),
                    lora_rank=16, em_docs=400, people=(2400, 800), seq_len=128),
    "w10k": Preset("w10k", data="small", model=ModelSize(256, 6, 8, 4, 1024),
                   pt=Schedule(33_000, 1000, 1.5e-3, 1e-4, batch=64, eval_every=3300, ckpt_every=3300),
                   cpt=Schedule(6600, 300, 7e-4, 7e-5, batch=64, eval_every=1650, ckpt_every=1650),
                   lora_rank=32, em_docs=800, people=(10_000, 3300), seq_len=128),
}
"""Biography PT → CPT (spec §4.1–§4.2 at the paper scale: Pythia-160M shape, 320k PT / 80k CPT steps; ``w600``,
``w2400``, ``w10k``: world sizes between small and paper for ``cfka stoc-scale``, sized for an accelerator)."""

# Shared-name worlds (issue #23): the small / w600 scales with name pools cut so that, as in the reference's 100k
# world, a new person's first name (100 %) and "First M." prefix (96 % / 99 %) belong to some old person; each first
# name is held by 15 PT people, each "First M." by 3.8 (reference: ~100 and ~3.8). ``data/sharing.name_sharing``.
BIOGRAPHY["names150"] = dataclasses.replace(BIOGRAPHY["small"], name="names150", name_pool=(10, 4, 20))
BIOGRAPHY["names600"] = dataclasses.replace(BIOGRAPHY["w600"], name="names600", name_pool=(40, 4, 80))
# The depth control of issue #22 (``cfka di-attention --preset small1``): the small world and schedule with a
# ONE-block port (width, heads and MLP of ``small``), the multi-layer port nearest the single-layer theory model.
BIOGRAPHY["small1"] = dataclasses.replace(BIOGRAPHY["small"], name="small1", model=ModelSize(96, 1, 4, 2, 288))
# The dose axis of issue #23: names150's world, model and PT with 4× its CPT steps (the same replay corpus seen 4×
# as often; warm-up and evaluation scaled). A names150 PT folder serves it (same data and PT schedule).
BIOGRAPHY["names150x4"] = dataclasses.replace(
    BIOGRAPHY["names150"], name="names150x4",
    cpt=dataclasses.replace(BIOGRAPHY["names150"].cpt, steps=1600, warmup=160, eval_every=400, ckpt_every=400))
BIOGRAPHY["names150x16"] = dataclasses.replace(
    BIOGRAPHY["names150"], name="names150x16",
    cpt=dataclasses.replace(BIOGRAPHY["names150"].cpt, steps=6400, warmup=640, eval_every=1600, ckpt_every=1600))
# The same dose axis at 600 people with shared names: names600's world, model and PT with 4× its CPT steps; a
# names600 PT folder serves it.
BIOGRAPHY["names600x4"] = dataclasses.replace(
    BIOGRAPHY["names600"], name="names600x4",
    cpt=dataclasses.replace(BIOGRAPHY["names600"].cpt, steps=6400, warmup=320, eval_every=1600, ckpt_every=1600))
# The 1-Aug world of issue #23 (Allen-Zhu & Li's bioS single): names150 with ONE training biography per person
# (and the three test biographies), the same PT and CPT steps, so each training biography is seen 5× as often.
BIOGRAPHY["names150_1aug"] = dataclasses.replace(BIOGRAPHY["names150"], name="names150_1aug", bios_per_person=1)

KNOWEDIT = {
    "paper": Preset("paper", cpt=Schedule(8000, 500, 5e-5, 1e-5, batch=48, eval_every=500), seq_len=256,
                    replay=ReplaySampling(sources=None, new_tokens=256, samples=3, batch=64)),
    "smoke": Preset("smoke", cpt=Schedule(3, 1, 1e-3, 1e-4, batch=2), seq_len=16, eval_batch=4,
                    replay=ReplaySampling(sources=None, new_tokens=4, samples=3, batch=64)),
}
"""KnowEdit CPT of a pretrained LM (spec §4.7: chunks of 256, 8000 steps, warm-up 500, 5e-5 → 1e-5, batch 48)."""

CORPUS = {
    "paper": Preset("paper", cpt=Schedule(8000, 500, 5e-5, 1e-5, batch=48, eval_every=500, ckpt_every=500),
                    seq_len=256, replay=ReplaySampling(sources=1000, new_tokens=256, samples=3, batch=64)),
    "smoke": Preset("smoke", cpt=Schedule(3, 1, 1e-3, 1e-4, batch=2), seq_len=16, eval_batch=4,
                    replay=ReplaySampling(sources=3, new_tokens=4, samples=1, batch=4), mc_max_length=256),
}
"""Bring-your-own-corpus CPT of a pretrained LM (spec §4.7 schedule, §6.3 real-data replay)."""


def lookup(table: Mapping[str, Preset], name: str, study: str) -> Preset:
    """``table[name]`` or a ValueError naming the choices."""
    if name not in table:
        raise ValueError(f"unknown {study} preset {name!r}; choose from {sorted(table)}")
    return table[name]
