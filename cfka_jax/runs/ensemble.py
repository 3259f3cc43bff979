"""Seed ensembles of the Biography ports: E from-scratch models trained together in one jitted program.

    data = build_data(BIOGRAPHY["small"].data_config(), "runs/data-cache")
    pt = pretrain_ensemble(EnsembleSpec(preset="small", seeds=tuple(range(8)), attention="linear"), data)
    cpt = continual_ensemble(spec, pt, data)          # naive CPT of every member on the new population
    pt.params_E, pt.model(e), pt.losses

With per-seed streams, member e trains like the lone PT run of seed ``seeds[e]``
(:func:`~cfka_jax.runs.biography.pretrain`): the same initial parameters (``build_model`` with that seed), the same
batches (``EpochBatcher`` seeded with it), the same AdamW schedule; CPT batches use seed + 1 as ``continual`` does.
What the ensemble leaves out is evaluation, run folders and checkpoints: results stay in memory, and
:func:`save_ensemble` / :func:`load_ensemble` keep the final parameters. ``shared`` streams feed every member the
batches of ``seeds[0]`` (the seeds then differ only in their initialisation).

The members train through the engine's one step builder
(``train.step.make_train_step(..., placement=Placement(ensemble=mode))``) and its one loop
(``train.loop.run_loop``, in memory, ``stop_on_nonfinite=False``: a member whose step is not finite keeps its own
last good state and the count per member is reported in ``nonfinite``; one diverged seed does not stop the others). ``mode`` picks the form of the one jitted step:
``vmap`` (batched kernels; sharded over devices when several exist), ``map`` (the members in turn inside the program,
with the lone step's unbatched kernels), or ``auto`` — ``map`` on CPU, ``vmap`` on accelerators. Both match lone runs to
float32 rounding (``tests/train/test_ensemble.py``).

``pt_steps`` / ``cpt_steps`` shorten a phase through the preset (``runs/presets.override``): the schedule keeps
its shape, with the warm-up scaled by the same factor, so a scaled run is the preset's recipe run for fewer steps.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.pipeline import DataBundle
from cfka_jax.jsonio import read_json_object, require_keys, write_json_atomic
from cfka_jax.models.layers import ATTENTION_KINDS
from cfka_jax.provenance import KEY, check_made_from, fingerprint, tokenizer_fingerprint
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.presets import BIOGRAPHY, Preset, Schedule, lookup, override
from cfka_jax.runs.specs import ARCHS
from cfka_jax.train.checkpoint import CheckpointDir, restore, save
from cfka_jax.train.ensemble import (ENSEMBLE_MODES, init_ensemble, member, member_sharding, shard_members,
                                     split_members, stack_members)
from cfka_jax.train.loop import LoopConfig, run_loop
from cfka_jax.train.optim import make_optimizer
from cfka_jax.train.step import Placement, make_train_step

STREAMS = ("per_seed", "shared")


@dataclasses.dataclass(frozen=True)
class EnsembleSpec:
    """E seeds of one Biography port (module docstring)."""

    preset: str = "smoke"
    arch: str = "qwen"
    seeds: tuple[int, ...] = (0, 1)
    attention: str = "softmax"
    streams: str = "per_seed"
    pt_steps: int | None = None
    cpt_steps: int | None = None
    log_every: int = 10
    mode: str = "auto"

    def __post_init__(self):
        lookup(BIOGRAPHY, self.preset, "Biography")
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {self.attention!r}")
        if self.streams not in STREAMS:
            raise ValueError(f"streams must be one of {STREAMS}, got {self.streams!r}")
        if self.mode not in ("auto",) + ENSEMBLE_MODES:
            raise ValueError(f"mode must be 'auto' or one of {ENSEMBLE_MODES}, got {self.mode!r}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or any(
                not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be distinct integers >= 0, got {self.seeds!r}")
        for name in ("pt_steps", "cpt_steps", "log_every"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    @property
    def step_mode(self) -> str:
        """The ensemble step's form: ``auto`` is ``map`` on CPU (XLA:CPU's batched matmuls are slower than its
        plain ones) and ``vmap`` on accelerators."""
        if self.mode != "auto":
            return self.mode
        return "map" if jax.default_backend() == "cpu" else "vmap"

    @property
    def scale(self) -> Preset:
        """The preset with the phase lengths of this spec (warm-up scaled with the steps)."""
        p, changes = BIOGRAPHY[self.preset], {}
        for phase, steps in (("pt", self.pt_steps), ("cpt", self.cpt_steps)):
            sched: Schedule = getattr(p, phase)
            if steps is not None and steps != sched.steps:
                changes |= {f"{phase}.steps": steps, f"{phase}.warmup": round(sched.warmup * steps / sched.steps)}
        return override(p, changes)


@dataclasses.dataclass(frozen=True)
class EnsembleResult:
    """A trained ensemble, in memory: stacked final parameters and the logged per-member losses."""

    spec: EnsembleSpec
    phase: str
    graphdef: Any
    rest: Any
    params_E: Any
    steps: np.ndarray
    losses: np.ndarray
    nonfinite: np.ndarray
    seconds: float
    made_from: dict | None = None

    def identity(self) -> dict:
        """``{"parent_run", "parent_step"}`` of this ensemble, what an ensemble trained from it records
        (``cfka_jax.provenance``): the hash of its spec and phase, and its last step."""
        return {"parent_run": fingerprint({"spec": dataclasses.asdict(self.spec), "phase": self.phase}),
                "parent_step": int(self.steps[-1])}

    def model(self, e: int) -> nnx.Module:
        """Member ``e`` as an NNX model (float32 master parameters)."""
        return nnx.merge(self.graphdef, member(self.params_E, e), self.rest)


def ensemble_models(spec: EnsembleSpec, vocab_size: int) -> list[nnx.Module]:
    """The E initial models: ``build_model`` of each seed, with the spec's attention kind.

    The attention kind creates no parameters, so a linear member starts from the same parameters as the softmax
    model of its seed.
    """
    out = []
    for seed in spec.seeds:
        model = build_model(spec.scale, spec.arch, vocab_size, seed)
        if spec.attention != model.cfg.attention_kind:
            cfg = dataclasses.replace(model.cfg, attention_kind=spec.attention)
            model = type(model)(cfg, rngs=nnx.Rngs(seed))
        out.append(model)
    return out


def ensemble_made_from(bundle: DataBundle, phase: str, parent: EnsembleResult | None = None) -> dict:
    """What an ensemble of ``phase`` trained on ``bundle`` is made from (``cfka_jax.provenance``): the tokenizer's
    content hash, the world config's hash, the phase, and for CPT the PT ensemble it started from
    (:meth:`EnsembleResult.identity`)."""
    out = {"tokenizer": tokenizer_fingerprint(bundle.tokenizer),
           "world": fingerprint(dataclasses.asdict(bundle.world.config)), "phase": phase}
    return out | (parent.identity() if parent is not None else {})


def _batchers(spec: EnsembleSpec, bundle: DataBundle, docs, sched: Schedule, offset: int) -> list[EpochBatcher]:
    seeds = spec.seeds if spec.streams == "per_seed" else spec.seeds[:1]
    return [EpochBatcher(docs, seq_len=bundle.config.seq_len, eos_id=bundle.eos_id, batch_size=sched.batch,
                         seed=s + offset, doc_mask=bundle.config.doc_mask) for s in seeds]


def _resume(ckpt: CheckpointDir | None, state, phase: str, num: int, made_from: dict | None = None):
    """``(state, start_step, logged, losses, nonfinite, seconds)`` from the newest checkpoint, or a fresh start.
    With ``made_from``, the checkpoint's progress record must record the same (a checkpoint of another PT
    ensemble, tokenizer or world is refused, naming the folder)."""
    fresh = (state, 0, [], [], np.zeros(num, np.int64), 0.0)
    if made_from is not None and ckpt is not None:  # before any array is read
        for where in sorted(ckpt.directory.glob("progress-*.json")):
            check_made_from(read_json_object(where, f"the {phase} progress record").get(KEY), made_from,
                            flag="--out", folder=ckpt.directory)
    found = ckpt.restore_latest(state) if ckpt is not None else None
    if found is None:
        return fresh
    state, step = found
    where = ckpt.directory / f"progress-{step}.json"
    prog = read_json_object(where, f"the {phase} progress record")
    require_keys(prog, ("steps", "losses", "nonfinite", "seconds"), str(where))
    return (state, step, list(prog["steps"]), [np.asarray(x) for x in prog["losses"]],
            np.asarray(prog["nonfinite"], np.int64), float(prog["seconds"]))


def train_members(spec: EnsembleSpec, bundle: DataBundle, phase: str, graphdef, rest, params_E, *,
                  log: Callable[[str], None] = print, ckpt_dir: str | pathlib.Path | None = None,
                  ckpt_every: int = 250, made_from: dict | None = None) -> EnsembleResult:
    """Trains every member for the phase's schedule (``pt`` on ``pt_train``, ``cpt`` naive on ``cpt_train``).

    With ``ckpt_dir``, the stacked train state is checkpointed every ``ckpt_every`` steps (with the logged losses
    beside it) and a killed run resumes from the newest intact checkpoint: batches are a pure function of the
    step, so a resumed run equals an uninterrupted one. ``made_from`` (:func:`ensemble_made_from`) is recorded
    beside each checkpoint and in the result; a checkpoint recording something else is refused.
    """
    if ckpt_every < 1:
        raise ValueError(f"ckpt_every must be >= 1, got {ckpt_every}")
    sched: Schedule = getattr(spec.scale, phase)
    docs = bundle.splits[f"{phase}_train"].docs()
    tx = make_optimizer(sched.optim())
    step = make_train_step(graphdef, rest, tx,
                           placement=Placement(ensemble=spec.step_mode, shared_batch=spec.streams == "shared"))
    params_E = jax.tree.map(jnp.copy, params_E)  # the step donates its state; the caller's arrays stay valid
    sharding = member_sharding(len(spec.seeds)) if spec.step_mode == "vmap" else None
    state = shard_members(init_ensemble(params_E, tx), sharding)
    batchers = _batchers(spec, bundle, docs, sched, offset=0 if phase == "pt" else 1)
    ckpt = CheckpointDir(ckpt_dir, keep=1) if ckpt_dir is not None else None
    state, start, logged, losses, nonfinite, before = _resume(ckpt, state, phase, len(spec.seeds), made_from)
    if start:
        log(f"[{phase} {spec.attention} ×{len(spec.seeds)}] resumed at step {start} from {ckpt.directory}")
    t0 = time.perf_counter() - before
    tag = f"[{phase} {spec.attention} ×{len(spec.seeds)}]"

    def batch_at(t: int):
        return batchers[0](t) if spec.streams == "shared" else stack_members([b(t) for b in batchers])

    def on_metrics(done: int, metrics: dict):
        nonfinite[:] += ~np.asarray(metrics["finite"])
        if done % spec.log_every == 0 or done == sched.steps:
            logged.append(done)
            losses.append(np.asarray(metrics["loss"]))
            log(f"{tag} step {done}/{sched.steps} loss {losses[-1].mean():.3f} ({time.perf_counter() - t0:.0f}s)")

    def on_state(done: int, state):
        write_json_atomic(ckpt.directory / f"progress-{done}.json",
                          {"steps": logged, "losses": [x.tolist() for x in losses], "nonfinite": nonfinite.tolist(),
                           "seconds": time.perf_counter() - t0, **({KEY: made_from} if made_from else {})})
        ckpt.save(done, state)
        for old in ckpt.directory.glob("progress-*.json"):
            if int(old.stem.split("-")[1]) not in ckpt.steps():
                old.unlink()

    state = run_loop(state, step, batch_at, cfg=LoopConfig(steps=sched.steps, log_every=spec.log_every,
                                                           progress=False),
                     start=start, stop_on_nonfinite=False, on_metrics=on_metrics, on_state=on_state,
                     state_at=(lambda done: done % ckpt_every == 0 and done < sched.steps) if ckpt is not None
                     else None).state
    return EnsembleResult(spec, phase, graphdef, rest, state.params, np.asarray(logged), np.stack(losses),
                          nonfinite, time.perf_counter() - t0, made_from)


def pretrain_ensemble(spec: EnsembleSpec, bundle: DataBundle, *, log: Callable[[str], None] = print,
                      ckpt_dir: str | pathlib.Path | None = None) -> EnsembleResult:
    """PT of every member from its seed's initialisation (module docstring); resumable with ``ckpt_dir``."""
    graphdef, params_E, rest = split_members(ensemble_models(spec, len(bundle.tokenizer)))
    return train_members(spec, bundle, "pt", graphdef, rest, params_E, log=log, ckpt_dir=ckpt_dir,
                         made_from=ensemble_made_from(bundle, "pt"))


def continual_ensemble(spec: EnsembleSpec, pt: EnsembleResult, bundle: DataBundle, *,
                       log: Callable[[str], None] = print, ckpt_dir: str | pathlib.Path | None = None
                       ) -> EnsembleResult:
    """Naive CPT of every member (the new population's training biographies alone) from its PT parameters."""
    return train_members(spec, bundle, "cpt", pt.graphdef, pt.rest, pt.params_E, log=log, ckpt_dir=ckpt_dir,
                         made_from=ensemble_made_from(bundle, "cpt", pt))


def save_ensemble(path: str | pathlib.Path, result: EnsembleResult) -> None:
    """Write the stacked final parameters (``params/``) and ``ensemble.json`` (spec, phase, losses, and under
    ``made_from`` what the ensemble was trained from, :func:`ensemble_made_from`)."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save(path / "params", result.params_E, step=int(result.steps[-1]), force=True)
    meta = {"spec": dataclasses.asdict(result.spec), "phase": result.phase, "steps": result.steps.tolist(),
            "losses": result.losses.tolist(), "nonfinite": result.nonfinite.tolist(), "seconds": result.seconds,
            **({KEY: result.made_from} if result.made_from is not None else {})}
    write_json_atomic(path / "ensemble.json", meta)  # last, after params/: its presence marks a whole ensemble


def load_ensemble(path: str | pathlib.Path, spec: EnsembleSpec, bundle: DataBundle, *, phase: str | None = None,
                  parent: EnsembleResult | None = None, flag: str = "--out") -> EnsembleResult:
    """An ensemble written by :func:`save_ensemble` for ``spec``, trained on ``bundle`` (and, for CPT, from the PT
    ensemble ``parent``).

    Args:
      phase: the expected phase (default: the recorded one).
      parent: the PT ensemble a CPT ensemble must have started from.
      flag: the option that named the folder, for the messages.

    Raises:
      ValueError: the folder holds an ensemble of another spec (the differing spec named), or one made from another
        tokenizer, world, phase or PT ensemble, or recording none (one line naming ``flag`` and the folder; before
        any parameter is read).
    """
    path = pathlib.Path(path)
    where = path / "ensemble.json"
    meta = read_json_object(where, "an ensemble record (JSON object)")
    require_keys(meta, ("spec", "phase", "steps", "losses", "nonfinite", "seconds"), str(where))
    try:
        stored = EnsembleSpec(**{**meta["spec"], "seeds": tuple(meta["spec"]["seeds"])})
    except (TypeError, KeyError, ValueError) as err:  # a spec of the wrong shape, an unknown or bad field
        raise ValueError(f"{where}: key 'spec' is not a valid ensemble spec ({err})") from None
    if stored != spec:
        raise ValueError(f"{path} holds the ensemble of {stored}, not of {spec}")
    expected = ensemble_made_from(bundle, phase or str(meta["phase"]), parent)
    check_made_from(meta.get(KEY), expected, flag=flag, folder=path)
    graphdef, abstract, rest = split_members(ensemble_models(spec, len(bundle.tokenizer)))
    params_E, _ = restore(path / "params", abstract)
    try:
        arrays = [np.asarray(meta[k], dtype) for k, dtype in (("steps", np.int64), ("losses", np.float64),
                                                              ("nonfinite", np.int64))]
        seconds = float(meta["seconds"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: steps / losses / nonfinite / seconds are not numbers ({err})") from None
    return EnsembleResult(spec, meta["phase"], graphdef, rest, params_E, *arrays, seconds, meta[KEY])


def load_checkpoint(ckpt_dir: str | pathlib.Path, spec: EnsembleSpec, bundle: DataBundle, phase: str = "pt"
                    ) -> EnsembleResult:
    """The newest intact training checkpoint of a phase still in progress (``train_members(ckpt_dir=...)``), as an
    :class:`EnsembleResult` whose ``steps[-1]`` is the checkpoint's step (of ``spec.scale.<phase>.steps``).

    Raises:
      ValueError: no checkpoint in ``ckpt_dir``.
    """
    graphdef, params_E, rest = split_members(ensemble_models(spec, len(bundle.tokenizer)))
    sched: Schedule = getattr(spec.scale, phase)
    ckpt = CheckpointDir(ckpt_dir, keep=1)
    made_from = ensemble_made_from(bundle, phase)
    state, start, logged, losses, nonfinite, seconds = _resume(ckpt, init_ensemble(params_E, make_optimizer(
        sched.optim())), phase, len(spec.seeds), made_from if phase == "pt" else None)
    if not start:
        raise ValueError(f"{ckpt_dir} holds no {phase} checkpoint of {spec}")
    return EnsembleResult(spec, phase, graphdef, rest, state.params, np.asarray(logged), np.stack(losses),
                          nonfinite, seconds, made_from if phase == "pt" else None)
