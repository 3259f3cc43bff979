"""Typed run specs of the Biography study: one pre-training run (:class:`PTSpec`) and one CPT run (:class:`CPTSpec`).

A spec names what a run chooses (method, update mode, α, seed, folders, the token objective); the scale comes from its preset
(``runs/presets.BIOGRAPHY``). Specs are frozen and validated on construction, so a bad value fails before any data
is built or any model is loaded. ``config.json`` of a run folder stores the spec and its preset.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Any

import jax.numpy as jnp

from cfka_jax.data.tokenize import BPE_MIN_VOCAB
from cfka_jax.models import family
from cfka_jax.parallel.mesh import parse_mesh
from cfka_jax.runs.method import Method, method_options, recipe_components, resolve
from cfka_jax.runs.presets import BIOGRAPHY, Preset, lookup, override
from cfka_jax.runs.replay import ReplaySwitches
from cfka_jax.train.loop import LoopConfig
from cfka_jax.train.profiling import parse_profile

METHODS = recipe_components("biography")
"""The one-component methods of a Biography CPT run (``runs/method.RECIPES``); ``+`` composes them."""
UPDATES = ("full", "freeze", "lora")
ARCHS = family.names()  # the registered model families (models/family.py): llama, pythia, qwen
DTYPES = {"float32": None, "bfloat16": jnp.bfloat16}
"""bfloat16: float32 master weights, bf16 forward/backward, float32 loss (``train/step.py``)."""


def _positive(name: str, value, allow_none: bool = True, minimum: int = 1) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_update_options(update: str, freeze_layers: int | None, lora_rank: int | None, *, blocks: int | None = None,
                         model: str = "the model") -> None:
    """The one check of the update-mode options of every recipe (Biography, corpus, KnowEdit, LAMA-CKL /
    TemporalWiki), run before anything is loaded or written: ``--freeze-layers`` only with ``--update freeze``,
    ``--lora-rank`` >= 1 and, once the model's shape is known (``blocks``), at least one block left
    to train (``freeze_layers`` None: half of the blocks). Both forms of the blocks (looped and ``scan_layers``)
    hold LoRA and freezing (``continual/peft``: stacked adapters, row masks).

    Raises:
      ValueError: naming both options of a combination that cannot apply.
    """
    if update not in UPDATES:
        raise ValueError(f"--update must be one of {UPDATES}, got {update!r}")
    if freeze_layers is not None:
        if isinstance(freeze_layers, bool) or not isinstance(freeze_layers, int) or freeze_layers < 0:
            raise ValueError(f"--freeze-layers must be an integer >= 0, got {freeze_layers!r}")
        if update != "freeze":
            raise ValueError(f"--freeze-layers {freeze_layers} applies to --update freeze only, got --update {update} "
                             "(add --update freeze or drop --freeze-layers)")
    if lora_rank is not None and (isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or lora_rank < 1):
        raise ValueError(f"--lora-rank must be an integer >= 1, got {lora_rank!r}")
    if blocks is not None and update == "freeze":
        frozen = blocks // 2 if freeze_layers is None else freeze_layers
        if frozen >= blocks:
            raise ValueError(f"--freeze-layers {frozen} with --update freeze leaves none of the {blocks} blocks of "
                             f"{model} to train; give --freeze-layers below {blocks}")


def check_loop_options(accumulate: int | None, profile: str | None, keep_checkpoints: int | None,
                       batch: int | None = None) -> None:
    """The accelerator options of a run, before anything is written: ``--accumulate`` (an integer >= 1 dividing
    the preset's batch), ``--profile`` (``START:STOP``), ``--keep-checkpoints`` (an integer >= 1)."""
    _positive("--accumulate", accumulate)
    _positive("--keep-checkpoints", keep_checkpoints)
    parse_profile(profile)
    if accumulate is not None and batch is not None and batch % accumulate:
        raise ValueError(f"--accumulate {accumulate} must divide the preset's batch of {batch} rows")


def loop_config(schedule: Any, spec: Any) -> LoopConfig:
    """``schedule.loop()`` with the run's accelerator options (``accumulate``, ``profile``,
    ``keep_checkpoints`` of the spec; None keeps the loop's defaults)."""
    changes = {k: getattr(spec, k) for k in ("accumulate", "profile", "keep_checkpoints")
               if getattr(spec, k, None) is not None}
    return dataclasses.replace(schedule.loop(progress=spec.progress), **changes)


@dataclasses.dataclass(frozen=True)
class PTSpec:
    """A pre-training run on the PT population (``ckpt_every``: checkpoint interval, default the preset's;
    ``mesh``: e.g. ``"data=2,fsdp=4"`` to shard the run over devices, ``parallel/mesh.parse_mesh``; ``bpe_vocab``:
    a BPE tokenizer of that size instead of the word-level one, ``data/tokenize.py``; ``accumulate``,
    ``profile``, ``keep_checkpoints``: :func:`check_loop_options`, docs/guides/sweeps_and_accelerators.md)."""

    preset: str = "smoke"
    out: str = "runs/pt-smoke"
    arch: str = "qwen"
    seed: int = 0
    cache_dir: str = "runs/data-cache"
    progress: bool = True
    dtype: str = "float32"
    ckpt_every: int | None = None
    mesh: str | None = None
    bpe_vocab: int | None = None
    accumulate: int | None = None
    """split each batch into N micro-batches, one optimiser update (memory of one micro-batch; default 1)"""
    profile: str | None = None
    """START:STOP: a jax.profiler trace of those steps into <out>/profile/"""
    keep_checkpoints: int | None = None
    """how many of the newest checkpoints to keep (default 2)"""

    def __post_init__(self):
        lookup(BIOGRAPHY, self.preset, "Biography")
        pt = BIOGRAPHY[self.preset].pt
        check_loop_options(self.accumulate, self.profile, self.keep_checkpoints, pt.batch if pt else None)
        if self.mesh is not None:
            parse_mesh(self.mesh)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        _positive("seed", self.seed, allow_none=False, minimum=0)
        _positive("ckpt_every", self.ckpt_every, minimum=0)
        _positive("bpe_vocab", self.bpe_vocab, minimum=BPE_MIN_VOCAB)

    @property
    def scale(self) -> Preset:
        """The preset with this run's overrides."""
        changes = {k: v for k, v in (("pt.ckpt_every", self.ckpt_every), ("bpe_vocab", self.bpe_vocab))
                   if v is not None}
        return override(BIOGRAPHY[self.preset], changes)


@dataclasses.dataclass(frozen=True)
class CPTSpec:
    """A continual pre-training run (decisions #7, #9–#11 of the spec's table; #16–#24 for generative replay).

    ``method`` is a name of the one method registry (``runs/method.py``, e.g. ``ewc``, ``stoc + ewc``, ``rho1``):
    stoc | random | lamol mixes a generative replay corpus built from the PT model (``replay_dir``,
    default ``<out>/../replay-<replay kind><switch tag>[-seed<seed>]``, built when absent) at new-data fraction
    ``alpha``; ``rho_k`` is RHO-1's kept fraction (None: 0.6). ``pt_dir`` None means
    ``<out>/../pt-<preset>-<arch>``, trained first when absent; an explicit ``pt_dir`` must hold a finished PT run.
    ``lr`` / ``min_lr`` / ``warmup`` replace the preset's CPT peak and floor learning rates and warm-up steps
    (None: the preset's).
    """

    preset: str = "smoke"
    out: str = "runs/cpt-smoke"
    method: str = "naive"
    update: str = "full"
    alpha: float = 0.5
    ewc_lambda: float = 1e3
    ewc_fisher: str = "code"
    ewc_batches: int = 8
    freeze_layers: int | None = None
    lora_rank: int | None = None
    arch: str = "qwen"
    seed: int = 0
    pt_dir: str | None = None
    cache_dir: str = "runs/data-cache"
    progress: bool = True
    dtype: str = "float32"
    replay: ReplaySwitches = ReplaySwitches()
    replay_dir: str | None = None
    eval_every: int | None = None
    ckpt_every: int | None = None
    mesh: str | None = None
    token_weights: str | None = None
    energy_tau: float | None = None
    energy_normalize: str | None = None
    bpe_vocab: int | None = None
    rho_k: float | None = None
    lr: float | None = None
    min_lr: float | None = None
    warmup: int | None = None
    accumulate: int | None = None
    """split each batch into N micro-batches, one optimiser update (memory of one micro-batch; default 1)"""
    profile: str | None = None
    """START:STOP: a jax.profiler trace of those steps into <out>/profile/"""
    keep_checkpoints: int | None = None
    """how many of the newest checkpoints to keep (default 2)"""

    def __post_init__(self):
        PTSpec(preset=self.preset, arch=self.arch, seed=self.seed, dtype=self.dtype, ckpt_every=self.ckpt_every,
               mesh=self.mesh, bpe_vocab=self.bpe_vocab)
        check_loop_options(self.accumulate, self.profile, self.keep_checkpoints, BIOGRAPHY[self.preset].cpt.batch)
        if self.update not in UPDATES:
            raise ValueError(f"update must be in {UPDATES}, got {self.update!r}")
        if not (isinstance(self.alpha, (int, float)) and 0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha (the new-data fraction) must be in [0, 1], got {self.alpha!r}")
        if not (isinstance(self.ewc_lambda, (int, float)) and math.isfinite(self.ewc_lambda)
                and self.ewc_lambda >= 0):
            raise ValueError(f"ewc_lambda must be a finite number >= 0 (a negative λ rewards drift), "
                             f"got {self.ewc_lambda!r}")
        if self.ewc_fisher not in ("code", "per_example"):
            raise ValueError(f"ewc_fisher must be 'code' or 'per_example', got {self.ewc_fisher!r}")
        _positive("ewc_batches", self.ewc_batches, allow_none=False)
        model = BIOGRAPHY[self.preset].model
        check_update_options(self.update, self.freeze_layers, self.lora_rank,
                             blocks=model.layers if model is not None else None,
                             model=f"preset {self.preset!r}")
        if self.update == "freeze" and self.freeze_layers is None and model is not None \
                and BIOGRAPHY[self.preset].freeze_layers >= model.layers:
            raise ValueError(f"--update freeze: preset {self.preset!r} freezes {BIOGRAPHY[self.preset].freeze_layers} "
                             f"of its model's {model.layers} blocks, leaving none to train; give --freeze-layers "
                             f"below {model.layers}")
        if self.lora_rank is not None and self.update != "lora":
            raise ValueError(f"--lora-rank {self.lora_rank} applies to --update lora only, got --update {self.update} "
                             "(add --update lora or drop --lora-rank)")
        _positive("eval_every", self.eval_every, minimum=0)
        self._check_schedule()
        try:
            self.resolved  # noqa: B018 (resolves the method: unknown or unavailable components fail here)
        except ValueError as e:
            raise ValueError(f"method (--method) {self.method!r}: {e}") from e
        if self.uses_alpha and not 0.0 < self.alpha < 1.0:
            raise ValueError(f"replay needs 0 < alpha < 1, got {self.alpha}")
        self._check_objective()

    def _check_schedule(self) -> None:
        """``lr`` / ``min_lr`` (finite, >= 0) and ``warmup`` (an integer >= 0) replace the preset's CPT schedule
        numbers; the schedule they make must be valid (0 <= min_lr <= lr, warmup <= steps)."""
        for name in ("lr", "min_lr"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        _positive("warmup", self.warmup, minimum=0)
        try:
            self.scale  # noqa: B018 (the preset's CPT schedule with these numbers, re-validated)
        except ValueError as e:
            raise ValueError(f"lr / min_lr / warmup: {e}") from None

    def _check_objective(self) -> None:
        """One token objective per run: plain NLL, φ-weighted TWPPL (``token_weights``) or energy masking."""
        if self.token_weights is not None and self.energy_tau is not None:
            raise ValueError("token_weights (TAALM) and energy_tau (energy masking) are two token objectives; "
                             "choose one")
        if self.resolved.hooks.token_objective is not None and (self.token_weights is not None
                                                               or self.energy_tau is not None):
            raise ValueError(f"method {self.method!r} sets the token loss ({self.resolved.token_loss}); "
                             f"token_weights / energy_tau are other token objectives; choose one")
        if self.energy_normalize is not None and self.energy_tau is None:
            raise ValueError("energy_normalize needs energy_tau")
        if self.energy_tau is not None:
            from cfka_jax.geometry.energy import EnergyMaskConfig

            EnergyMaskConfig(tau=self.energy_tau, normalize=self.energy_normalize or "all")

    @property
    def resolved(self) -> Method:
        """The run's method, resolved by the one registry for the Biography recipe."""
        return resolve(self.method, "biography", method_options(
            ewc_lambda=self.ewc_lambda, ewc_fisher=self.ewc_fisher, ewc_batches=self.ewc_batches, rho_k=self.rho_k))

    @property
    def uses_alpha(self) -> bool:
        return self.resolved.mixes

    @property
    def scale(self) -> Preset:
        """The preset with this run's overrides (evaluation and checkpoint intervals, learning rates and warm-up of
        the CPT phase)."""
        changes = {k: v for k, v in (("cpt.eval_every", self.eval_every), ("cpt.ckpt_every", self.ckpt_every),
                                     ("bpe_vocab", self.bpe_vocab), ("cpt.peak_lr", self.lr),
                                     ("cpt.min_lr", self.min_lr), ("cpt.warmup", self.warmup)) if v is not None}
        return override(BIOGRAPHY[self.preset], changes)

    @property
    def pt_folder(self) -> pathlib.Path:
        bpe = f"-bpe{self.bpe_vocab}" if self.bpe_vocab is not None else ""
        return pathlib.Path(self.pt_dir or pathlib.Path(self.out).parent / f"pt-{self.preset}-{self.arch}{bpe}")

    @property
    def replay_folder(self) -> pathlib.Path:
        name = f"replay-{self.resolved.replay}{self.replay.tag}" + (f"-seed{self.seed}" if self.seed else "")
        return pathlib.Path(self.replay_dir or pathlib.Path(self.out).parent / name)

    def pt_spec(self) -> PTSpec:
        """The PT run this CPT starts from."""
        return PTSpec(preset=self.preset, out=str(self.pt_folder), arch=self.arch, seed=self.seed,
                      cache_dir=self.cache_dir, progress=self.progress, dtype=self.dtype, mesh=self.mesh,
                      bpe_vocab=self.bpe_vocab)
