"""Seed ensembles of tiny ports trained on a rendered theory world (``data/theory_text.py``; ``cfka di-walk``).

The same machinery as the Biography ensembles (``runs/ensemble.py``): E from-scratch models of one family, their
parameters stacked (``train.ensemble.split_members``), trained together by the engine's one step builder
(``train.step.make_train_step(..., placement=Placement(ensemble=mode))``) in the one loop (``train.loop.run_loop``, in
memory, a member's non-finite step counted, not fatal), AdamW with warm-up and cosine decay (``train.optim``), batches
from ``data.batching.EpochBatcher`` seeded per member (member e reads the batches of its own seed). What differs is the
data and the objective: documents of the rendered world instead of biographies, and

* ``objective="object"``: the loss on the object tokens only (the theory's objective: the query predicts o);
* ``objective="all"``: next-token loss on every token, as a language model (and the Biography ports) is trained.

The model is the family's port at the spec's own sizes (``models/family.ModelSize``), with the spec's attention
kind (softmax, or the theory's causal linear attention).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.theory_text import TextCorpus
from cfka_jax.models import family
from cfka_jax.models.layers import ATTENTION_KINDS
from cfka_jax.runs.presets import Schedule
from cfka_jax.train.ensemble import init_ensemble, member, split_members, stack_members
from cfka_jax.train.loop import LoopConfig, run_loop
from cfka_jax.train.optim import make_optimizer
from cfka_jax.train.step import Placement, make_train_step

OBJECTIVES = ("object", "all")


@dataclasses.dataclass(frozen=True)
class PortSpec:
    """A tiny port and its training on a rendered world (module docstring)."""

    layers: int = 1
    attention: str = "linear"
    hidden: int = 32
    heads: int = 2
    kv_heads: int = 1
    intermediate: int = 64
    arch: str = "qwen"
    seq_len: int = 7
    objective: str = "object"
    steps: int = 1500
    warmup: int = 100
    peak_lr: float = 3e-3
    min_lr: float = 1e-4
    batch: int = 32
    log_every: int = 50

    def __post_init__(self):
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {self.attention!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.seq_len < 2 or self.log_every < 1:
            raise ValueError(f"seq_len must be >= 2 and log_every >= 1, got {self.seq_len}, {self.log_every}")
        self.size, self.schedule  # noqa: B018  (validates the sizes and the schedule)

    @property
    def size(self) -> family.ModelSize:
        return family.ModelSize(self.hidden, self.layers, self.heads, self.kv_heads, self.intermediate)

    @property
    def schedule(self) -> Schedule:
        return Schedule(self.steps, self.warmup, self.peak_lr, self.min_lr, batch=self.batch)


@dataclasses.dataclass(frozen=True)
class WorldEnsemble:
    """Trained members, in memory: stacked final parameters, logged losses (steps × E), non-finite step counts."""

    spec: PortSpec
    seeds: tuple[int, ...]
    graphdef: Any
    rest: Any
    params_E: Any
    steps: np.ndarray
    losses: np.ndarray
    nonfinite: np.ndarray
    seconds: float

    def params(self, e: int) -> Any:
        return member(self.params_E, e)

    def final_loss(self, tail: float = 0.1) -> np.ndarray:
        """Each member's mean logged training loss over the last ``tail`` of the logs, (E,)."""
        k = max(1, int(round(len(self.losses) * tail)))
        return self.losses[-k:].mean(axis=0)


def build_models(spec: PortSpec, vocab_size: int, seeds: tuple[int, ...]) -> list[nnx.Module]:
    """The members at initialisation: the family's port of ``spec.size`` with the spec's attention kind."""
    fam = family.get(spec.arch)
    cfg = fam.from_size(spec.size, vocab_size=vocab_size, max_position_embeddings=max(64, spec.seq_len),
                        dtype=jnp.float32)
    cfg = dataclasses.replace(cfg, attention_kind=spec.attention)
    return [fam.build(cfg, seed) for seed in seeds]


def _objective_mask(batch: dict, object_ids: np.ndarray, objective: str) -> dict:
    if objective == "all":
        return batch
    is_obj = jnp.isin(batch["tokens"], jnp.asarray(object_ids, jnp.int32))
    return batch | {"target_mask": batch["target_mask"] * is_obj.astype(batch["target_mask"].dtype)}


def train_world_ensemble(spec: PortSpec, corpus: TextCorpus, seeds: tuple[int, ...], *,
                         log: Callable[[str], None] = print, mode: str | None = None) -> WorldEnsemble:
    """Trains one member per seed on ``corpus`` (module docstring).

    Raises:
      ValueError: no seeds, repeated seeds, or a corpus too small for one batch.
    """
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {seeds!r}")
    graphdef, params_E, rest = split_members(build_models(spec, corpus.vocab_size, seeds))
    sched = spec.schedule
    tx = make_optimizer(sched.optim())
    mode = mode or ("map" if jax.default_backend() == "cpu" else "vmap")
    step = make_train_step(graphdef, rest, tx, placement=Placement(ensemble=mode))
    state = init_ensemble(params_E, tx)
    batchers = [EpochBatcher(corpus.docs, seq_len=spec.seq_len, eos_id=corpus.eos_id, batch_size=sched.batch,
                             seed=s) for s in seeds]
    logged, losses, nonfinite = [], [], np.zeros(len(seeds), np.int64)
    t0, tag = time.perf_counter(), f"[{spec.layers}L {spec.attention} {spec.objective} ×{len(seeds)}]"

    def batch_at(t: int):
        return stack_members([_objective_mask(b(t), corpus.object_ids, spec.objective) for b in batchers])

    def on_metrics(done: int, metrics: dict):
        nonfinite[:] += ~np.asarray(metrics["finite"])
        if done % spec.log_every == 0 or done == sched.steps:
            logged.append(done)
            losses.append(np.asarray(metrics["loss"], np.float64))
            if done % (spec.log_every * 10) == 0 or done == sched.steps:
                log(f"{tag} step {done}/{sched.steps} loss {losses[-1].mean():.4f} ({time.perf_counter() - t0:.0f}s)")

    state = run_loop(state, step, batch_at, cfg=LoopConfig(steps=sched.steps, log_every=spec.log_every,
                                                           progress=False),
                     stop_on_nonfinite=False, on_metrics=on_metrics).state
    return WorldEnsemble(spec, tuple(seeds), graphdef, rest, state.params, np.asarray(logged), np.stack(losses),
                         nonfinite, time.perf_counter() - t0)
