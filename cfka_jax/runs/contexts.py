"""The contexts the recipes that train through ``runs/engine.train_lm`` hand a method's hooks, and those recipes'
declarations (:data:`RECIPES`: the hooks each calls, the capabilities its context provides;
``continual/components.py`` lists what each capability means).

* :class:`BiographyContext` (Biography CPT, ``runs/biography.continual``): real replay of the PT population
  (``all`` / ``half``) or a generative corpus of the PT model, mixed by the reference's ``reference_copies`` rule;
  EWC's old batches from the PT training chunks; θ0 = the parameters CPT starts from; the old keys of the
  null-space / GPM projection from the PT training chunks;
* :class:`HFContext` (corpus CPT and KnowEdit on a pretrained HF model): a generative corpus sampled from the base
  model (the recipe's own mixing); no pre-training data is at hand, so EWC's Fisher is taken on the first
  ``ewc_batches`` batches of the training stream (``Σ_b B_b (∇ℓ̄_b)²`` over all rows used: the penalty resists
  moving along the directions of the base model's steepest loss on the stream); θ0 = the base model; the old keys
  (corpus CPT) from the original-knowledge question texts the run evaluates.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import numpy as np
from flax import nnx

from cfka_jax.continual import gpm
from cfka_jax.continual.method import HOOKS, Recipe
from cfka_jax.data.batching import packed_batch
from cfka_jax.data.mixing import mix_replay
from cfka_jax.runs.replay import GENERATIVE, ensure_replay, replay_made_from, synthetic_replay_config
from cfka_jax.train.step import make_eval_logits, token_nll_loss

_GENERATED = {f"generative_replay:{k}" for k in GENERATIVE}
_SAMPLED = {f"generative_replay:{k}" for k in ("stoc", "random", "lamol")}  # continual/replay's real-data kinds
BIOGRAPHY = Recipe("biography", hooks=set(HOOKS) - {"update"}, provides={
    "real_replay:all", "real_replay:half", *_GENERATED, "old_batches", "reference", "old_keys"})
CORPUS = Recipe("corpus", hooks=set(HOOKS) - {"update"}, provides={*_SAMPLED, "old_batches", "reference", "old_keys"})
KNOWEDIT = Recipe("knowedit", hooks=set(HOOKS) - {"update", "transform"},
                  provides={*_SAMPLED, "old_batches", "reference"})
RECIPES = (BIOGRAPHY, CORPUS, KNOWEDIT)
"""K-Adapter's θ stays with the CKL protocols (``continual/ckl_methods``): its forward has no KV-cached decoding
and no packed-document segments, which the Biography EM and the packed CPT steps need. KnowEdit's data holds no
old facts whose keys a projection could protect."""


def reference(model, compute_dtype=None):
    """``reference(fn) → batch ↦ fn(logits of θ0, batch)``, jitted, with θ0 a frozen copy of ``model``'s current
    parameters (the same forward as the step's, ``train.step.make_eval_logits``)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    theta0 = jax.tree.map(jax.numpy.copy, params)
    logits = make_eval_logits(graphdef, rest, compute_dtype)

    def make(fn):
        ref = jax.jit(lambda p, batch: fn(logits(p, batch), batch))
        return lambda batch: ref(theta0, batch)

    return make


def key_bases(model, batches: list[dict], state: str, update, stats: dict):
    """``update(None, grams)`` of ``model``'s key Grams on ``batches`` (``gpm.input_grams``); records the
    protected fraction of the layers' input spaces as ``<state>/protected_fraction`` in ``stats``."""
    bases = update(None, gpm.input_grams(model, batches))
    stats[f"{state}/protected_fraction"] = float(np.mean([m.shape[1] / m.shape[0] for m in bases.values()]))
    return bases


@dataclasses.dataclass
class BiographyContext:
    """A Biography CPT run's context (module docstring); ``model`` is the live model (hooks read its current
    parameters), ``stats`` collects what hooks record for ``final.json``. What it takes of the run: ``alpha`` (the
    new-data fraction replay is mixed at), the generative ``replay`` switches (``runs/replay.ReplaySwitches``),
    the ``seed``, the PT run's folder ``pt_folder`` (what a replay corpus records it was made from), the replay
    corpus folder ``replay_folder`` and the CPT ``batch`` rows (the old keys' batches)."""

    bundle: object
    model: object
    alpha: float
    replay: object
    seed: int
    pt_folder: object
    replay_folder: object
    batch: int
    compute_dtype: object = None
    total_steps: int = 0
    peak_lr: float = 0.0
    recadam_reference_groups: bool = False
    base_loss: Callable = token_nll_loss
    stats: dict = dataclasses.field(default_factory=dict)

    @property
    def new_docs(self) -> list:
        return self.bundle.splits["cpt_train"].docs()

    def real_replay(self, subset: str):
        real = self.bundle.splits[f"replay_{subset}"].docs()
        return mix_replay(self.new_docs, real, self.alpha, rule="reference_copies")[0], {}

    def generative_replay(self, kind: str):
        bundle = self.bundle
        rcfg = synthetic_replay_config(kind, bundle.config.seq_len, self.replay, self.seed)
        made_from = replay_made_from(bundle, self.pt_folder)  # recorded; a reused corpus must record the same
        corpus = ensure_replay(self.replay_folder, self.model, bundle, rcfg, made_from=made_from)
        docs, _ = mix_replay(self.new_docs, corpus.sequences, self.alpha, rule="reference_copies")
        return docs, {f"replay/{k}": v for k, v in corpus.stats.items()}

    def old_batches(self, n: int):
        """Up to ``n`` batches of 8 PT chunks; ``total_chunks`` = all PT chunks (the reference's scale)."""
        pt = self.bundle.train["pt_train"]
        rows = [slice(i, i + 8) for i in range(0, min(pt.num_chunks, 8 * n) - 7, 8)]
        return [packed_batch(pt, r) for r in rows], pt.num_chunks

    def reference(self, fn):
        return reference(self.model, self.compute_dtype)(fn)

    def protected_bases(self, state: str, update):
        """The old keys: ``gpm.GPMConfig().batches`` batches of CPT-batch-size PT training chunks."""
        pt, rows = self.bundle.train["pt_train"], self.batch
        n = min(gpm.GPMConfig().batches, pt.num_chunks // rows)
        if n < 1:
            raise ValueError(f"{pt.num_chunks} PT chunks cannot fill one batch of {rows} for the old keys")
        batches = [packed_batch(pt, slice(i * rows, (i + 1) * rows)) for i in range(n)]
        return key_bases(self.model, batches, state, update, self.stats)


@dataclasses.dataclass
class HFContext:
    """Corpus CPT's / KnowEdit's context (module docstring). ``replay(kind) → (docs, stats)`` is the recipe's
    generative replay, ``key_batches()`` its old-knowledge batches (None: the recipe has none)."""

    model: object
    batch_at: Callable
    compute_dtype: object = None
    total_steps: int = 0
    peak_lr: float = 0.0
    replay: Callable | None = None
    key_batches: Callable | None = None
    recadam_reference_groups: bool = False
    base_loss: Callable = token_nll_loss
    stats: dict = dataclasses.field(default_factory=dict)

    def generative_replay(self, kind: str):
        return self.replay(kind)

    def old_batches(self, n: int):
        batches = [self.batch_at(t) for t in range(n)]
        return batches, sum(int(b["tokens"].shape[0]) for b in batches)

    def reference(self, fn):
        return reference(self.model, self.compute_dtype)(fn)

    def protected_bases(self, state: str, update):
        if self.key_batches is None:
            raise ValueError("this run has no old-knowledge data whose keys the projection could protect")
        return key_bases(self.model, self.key_batches(), state, update, self.stats)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The part of a context the optimiser hook reads (``total_steps``, ``peak_lr``)."""

    total_steps: int
    peak_lr: float
    recadam_reference_groups: bool = False
