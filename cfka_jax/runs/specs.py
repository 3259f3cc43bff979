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


def loop_config(schedule: Any, memory: MemoryOptions, progress: bool) -> LoopConfig:
    """``schedule.loop()`` with the run's accelerator options (``accumulate``, ``profile``, ``keep_checkpoints``
    of ``memory``; None keeps the loop's defaults)."""
    changes = {k: getattr(memory, k) for k in ("accumulate", "profile", "keep_checkpoints")
               if getattr(memory, k) is not None}
    return dataclasses.replace(schedule.loop(progress=progress), **changes)


def _number(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value) or value < 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


@dataclasses.dataclass(frozen=True)
class CPTSchedule:
    """The CPT phase's schedule numbers a run sets in place of its preset's (None: the preset's): the peak and floor
    learning rates ``lr`` / ``min_lr`` of the warm-up + cosine schedule (finite, >= 0), the ``warmup`` steps, the
    FTA evaluation interval ``eval_every`` and the checkpoint interval ``ckpt_every`` (0: only at the end).

    Raises:
      ValueError: naming the field.
    """

    lr: float | None = None
    min_lr: float | None = None
    warmup: int | None = None
    eval_every: int | None = None
    ckpt_every: int | None = None

    def __post_init__(self):
        _number("lr", self.lr)
        _number("min_lr", self.min_lr)
        _positive("warmup", self.warmup, minimum=0)
        _positive("eval_every", self.eval_every, minimum=0)
        _positive("ckpt_every", self.ckpt_every, minimum=0)

    def changes(self) -> dict[str, Any]:
        """The preset fields these numbers replace (``runs/presets.override`` names), the unset ones left out."""
        return {k: v for k, v in (("cpt.eval_every", self.eval_every), ("cpt.ckpt_every", self.ckpt_every),
                                  ("cpt.peak_lr", self.lr), ("cpt.min_lr", self.min_lr), ("cpt.warmup", self.warmup))
                if v is not None}


@dataclasses.dataclass(frozen=True)
class UpdateMode:
    """Which parameters CPT trains: ``update`` ``full`` (all), ``freeze`` (the input embedding and the first
    ``freeze_layers`` blocks fixed) or ``lora`` (rank-``lora_rank`` adapters, base weights fixed); an unset
    ``freeze_layers`` / ``lora_rank`` is the preset's (:meth:`at`).

    Raises:
      ValueError: naming the options (:func:`check_update_options`; ``--lora-rank`` only with ``--update lora``).
    """

    update: str = "full"
    freeze_layers: int | None = None
    lora_rank: int | None = None

    def __post_init__(self):
        if self.update not in UPDATES:
            raise ValueError(f"update must be in {UPDATES}, got {self.update!r}")
        check_update_options(self.update, self.freeze_layers, self.lora_rank)
        if self.lora_rank is not None and self.update != "lora":
            raise ValueError(f"--lora-rank {self.lora_rank} applies to --update lora only, got --update {self.update} "
                             "(add --update lora or drop --lora-rank)")

    def check_model(self, p: Preset, name: str) -> None:
        """Once the preset's model is known: at least one block left to train under ``freeze``."""
        if p.model is None:
            return
        check_update_options(self.update, self.freeze_layers, self.lora_rank, blocks=p.model.layers,
                             model=f"preset {name!r}")
        if self.update == "freeze" and self.freeze_layers is None and p.freeze_layers >= p.model.layers:
            raise ValueError(f"--update freeze: preset {name!r} freezes {p.freeze_layers} of its model's "
                             f"{p.model.layers} blocks, leaving none to train; give --freeze-layers below "
                             f"{p.model.layers}")

    def at(self, p: Preset) -> tuple[int, int]:
        """(frozen blocks, LoRA rank) of this mode under preset ``p`` (the preset's where unset)."""
        return (self.freeze_layers if self.freeze_layers is not None else p.freeze_layers,
                self.lora_rank if self.lora_rank is not None else p.lora_rank)


@dataclasses.dataclass(frozen=True)
class MemoryOptions:
    """How a run holds, places and records its state: ``dtype`` (``float32``, or ``bfloat16``: float32 master
    weights, bf16 forward/backward, float32 loss; :attr:`compute_dtype`), ``mesh`` (e.g. ``"data=2,fsdp=4"``,
    ``parallel/mesh.parse_mesh``), ``accumulate`` (micro-batches per optimiser update), ``profile`` (``START:STOP``,
    a trace of those steps) and ``keep_checkpoints`` (how many of the newest to keep); None keeps the loop's
    defaults (:func:`check_loop_options`, docs/guides/sweeps_and_accelerators.md).

    Raises:
      ValueError: naming the field or the option.
    """

    dtype: str = "float32"
    mesh: str | None = None
    accumulate: int | None = None
    profile: str | None = None
    keep_checkpoints: int | None = None

    def __post_init__(self):
        check_loop_options(self.accumulate, self.profile, self.keep_checkpoints)
        if self.mesh is not None:
            parse_mesh(self.mesh)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")

    @property
    def compute_dtype(self):
        """The step's compute dtype (None: float32 throughout)."""
        return DTYPES[self.dtype]


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """The method a CPT run trains with and its knobs: ``method`` (a name of the one registry, ``runs/method.py``,
    or a composition such as ``stoc + ewc``), ``alpha`` (the new-data fraction when the method mixes replay, in
    (0, 1)), EWC's strength ``ewc_lambda`` (>= 0), Fisher ``ewc_fisher`` (``code`` or ``per_example``) and its
    ``ewc_batches``, RHO-1's kept fraction ``rho_k`` (None: 0.6), the generative replay ``replay`` switches.

    Raises:
      ValueError: naming the field (an unknown or unavailable method names ``--method``; a method that mixes
        replay needs 0 < alpha < 1).
    """

    method: str = "naive"
    alpha: float = 0.5
    ewc_lambda: float = 1e3
    ewc_fisher: str = "code"
    ewc_batches: int = 8
    rho_k: float | None = None
    replay: ReplaySwitches = ReplaySwitches()

    def __post_init__(self):
        if not (isinstance(self.alpha, (int, float)) and 0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha (the new-data fraction) must be in [0, 1], got {self.alpha!r}")
        if not (isinstance(self.ewc_lambda, (int, float)) and math.isfinite(self.ewc_lambda)
                and self.ewc_lambda >= 0):
            raise ValueError(f"ewc_lambda must be a finite number >= 0 (a negative λ rewards drift), "
                             f"got {self.ewc_lambda!r}")
        if self.ewc_fisher not in ("code", "per_example"):
            raise ValueError(f"ewc_fisher must be 'code' or 'per_example', got {self.ewc_fisher!r}")
        _positive("ewc_batches", self.ewc_batches, allow_none=False)
        try:
            resolved = self.resolved  # unknown or unavailable components fail here
        except ValueError as e:
            raise ValueError(f"method (--method) {self.method!r}: {e}") from e
        if resolved.mixes and not 0.0 < self.alpha < 1.0:
            raise ValueError(f"replay needs 0 < alpha < 1, got {self.alpha}")

    @property
    def resolved(self) -> Method:
        """The method, resolved by the one registry for the Biography recipe."""
        return resolve(self.method, "biography", method_options(
            ewc_lambda=self.ewc_lambda, ewc_fisher=self.ewc_fisher, ewc_batches=self.ewc_batches, rho_k=self.rho_k))


@dataclasses.dataclass(frozen=True)
class TokenObjective:
    """The run's token objective, one at most: the mean next-token NLL (nothing set), φ-weighted TWPPL with the
    Train-Attention model saved in ``token_weights`` (``continual/taalm``), or update-energy masking at threshold
    ``energy_tau`` normalised by ``energy_normalize`` (``all`` supervised tokens, the default, or the ``kept``
    ones; ``geometry/energy.py``).

    Raises:
      ValueError: naming the fields, for two objectives or ``energy_normalize`` without ``energy_tau``.
    """

    token_weights: str | None = None
    energy_tau: float | None = None
    energy_normalize: str | None = None

    def __post_init__(self):
        if self.token_weights is not None and self.energy_tau is not None:
            raise ValueError("token_weights (TAALM) and energy_tau (energy masking) are two token objectives; "
                             "choose one")
        if self.energy_normalize is not None and self.energy_tau is None:
            raise ValueError("energy_normalize needs energy_tau")
        if self.energy_tau is not None:
            from cfka_jax.geometry.energy import EnergyMaskConfig

            EnergyMaskConfig(tau=self.energy_tau, normalize=self.energy_normalize or "all")

    @property
    def named(self) -> bool:
        """True when the run names an objective other than the plain NLL."""
        return self.token_weights is not None or self.energy_tau is not None


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
    def memory(self) -> MemoryOptions:
        """The run's precision, placement and loop memory options (:class:`MemoryOptions`)."""
        return MemoryOptions(dtype=self.dtype, mesh=self.mesh, accumulate=self.accumulate, profile=self.profile,
                             keep_checkpoints=self.keep_checkpoints)

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

    The fields are flat: one per command-line option, and the ``run`` record of the run folder's config.json.
    What reads them takes them grouped into small option objects, each checked on construction (the checks below
    are theirs): :attr:`schedule` (:class:`CPTSchedule`: lr, min_lr, warmup, eval_every, ckpt_every),
    :attr:`update_mode` (:class:`UpdateMode`: update, freeze_layers, lora_rank), :attr:`memory`
    (:class:`MemoryOptions`: dtype, mesh, accumulate, profile, keep_checkpoints), :attr:`method_options`
    (:class:`MethodOptions`: method, alpha, ewc_lambda, ewc_fisher, ewc_batches, rho_k, replay) and
    :attr:`objective` (:class:`TokenObjective`: token_weights, energy_tau, energy_normalize);
    :meth:`from_groups` builds a spec from them. The recipe (``runs/biography.continual``) unpacks a spec once
    and hands each step only its group.
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
        method = self.method_options  # each group checks its own fields as it is made
        self.update_mode.check_model(BIOGRAPHY[self.preset], self.preset)
        self.schedule  # noqa: B018
        self.memory  # noqa: B018
        self._check_schedule()
        self._check_objective(method)

    def _check_schedule(self) -> None:
        """The schedule the preset's CPT phase makes with :attr:`schedule`'s numbers must be valid
        (0 <= min_lr <= lr, warmup <= steps)."""
        try:
            self.scale  # noqa: B018 (the preset's CPT schedule with these numbers, re-validated)
        except ValueError as e:
            raise ValueError(f"lr / min_lr / warmup: {e}") from None

    def _check_objective(self, method: MethodOptions) -> None:
        """One token objective per run: plain NLL, φ-weighted TWPPL (``token_weights``), energy masking, or the
        method's own token loss (RHO-1)."""
        objective = self.objective
        if method.resolved.hooks.token_objective is not None and objective.named:
            raise ValueError(f"method {self.method!r} sets the token loss ({method.resolved.token_loss}); "
                             f"token_weights / energy_tau are other token objectives; choose one")

    # The nested option groups of the flat record (one explicit mapping each way: these properties, and
    # :meth:`from_groups`). The fields stay flat: they are the command line's options and config.json's record.

    @property
    def schedule(self) -> CPTSchedule:
        return CPTSchedule(lr=self.lr, min_lr=self.min_lr, warmup=self.warmup, eval_every=self.eval_every,
                           ckpt_every=self.ckpt_every)

    @property
    def update_mode(self) -> UpdateMode:
        return UpdateMode(update=self.update, freeze_layers=self.freeze_layers, lora_rank=self.lora_rank)

    @property
    def memory(self) -> MemoryOptions:
        return MemoryOptions(dtype=self.dtype, mesh=self.mesh, accumulate=self.accumulate, profile=self.profile,
                             keep_checkpoints=self.keep_checkpoints)

    @property
    def method_options(self) -> MethodOptions:
        return MethodOptions(method=self.method, alpha=self.alpha, ewc_lambda=self.ewc_lambda,
                             ewc_fisher=self.ewc_fisher, ewc_batches=self.ewc_batches, rho_k=self.rho_k,
                             replay=self.replay)

    @property
    def objective(self) -> TokenObjective:
        return TokenObjective(token_weights=self.token_weights, energy_tau=self.energy_tau,
                              energy_normalize=self.energy_normalize)

    @classmethod
    def from_groups(cls, *, schedule: CPTSchedule = CPTSchedule(), update_mode: UpdateMode = UpdateMode(),
                    memory: MemoryOptions = MemoryOptions(), method: MethodOptions = MethodOptions(),
                    objective: TokenObjective = TokenObjective(), **fields) -> CPTSpec:
        """The spec of these option groups and the remaining fields (``preset``, ``out``, ``arch``, ``seed``,
        folders, ``progress``, ``bpe_vocab``, ``replay_dir``): the inverse of the group properties."""
        groups = (schedule, update_mode, memory, method, objective)
        flat = {f.name: getattr(g, f.name) for g in groups for f in dataclasses.fields(g)}
        clash = sorted(set(flat) & set(fields))
        if clash:
            raise ValueError(f"CPTSpec.from_groups: {clash} belong to the option groups; set them there")
        return cls(**flat, **fields)

    @property
    def resolved(self) -> Method:
        """The run's method, resolved by the one registry for the Biography recipe."""
        return self.method_options.resolved

    @property
    def uses_alpha(self) -> bool:
        return self.resolved.mixes

    @property
    def scale(self) -> Preset:
        """The preset with this run's overrides (evaluation and checkpoint intervals, learning rates and warm-up of
        the CPT phase)."""
        bpe = {} if self.bpe_vocab is None else {"bpe_vocab": self.bpe_vocab}
        return override(BIOGRAPHY[self.preset], {**self.schedule.changes(), **bpe})

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
