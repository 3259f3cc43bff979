"""The LAMA-CKL and TemporalWiki protocols (spec taalm.md §5.4, §8) for any method the one registry
resolves for the CKL recipe (``runs/method.resolve(name, "ckl")``); its hooks are called with the context of
``ckl_methods``.

LAMA-CKL: θ0 trains on the TO-LEARN evidence for ``epochs`` epochs (batch 64, AdamW lr 1e-4, wd 0.01, no
schedule, one optimiser for the whole run); the probe sets are scored (``eval.knowledge_probes``) before training
and after every epoch, and ``ckl_summary`` gives Top Acc / Epoch / NF Acc / Total Knowledge. The epoch order is
reshuffled from (seed, epoch); ``fixed_epoch_order`` reproduces the reference's single order (quirk #15). A short
last batch is filled by wrapping around, as the reference's sampler pads 500 documents to 504.

TemporalWiki: θ is carried across periods, each period gets a fresh optimiser and ``epochs`` (1) epochs over its
stream; the changed and unchanged probes are scored (object NLL, lower is better) before and after each period.

The step is the engine's one step builder (``train.step.make_train_step``, convention 6) with θ's forward as its
objective: an explicit dropout key, the method's ``loss_fn``, the optimiser, the finite guard; each epoch runs
through the one loop (``train.loop.run_loop``, in memory).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfka_jax.continual.ckl_methods import Theta, method_objective, method_tx, review_of
from cfka_jax.continual.method import Method
from cfka_jax.continual.kadapter import KAdapterConfig
from cfka_jax.data.ckl_encode import Encoded, pad_batch
from cfka_jax.eval.knowledge_probes import ckl_summary, evaluate_probes, make_probe_scorer
from cfka_jax.train.loop import LoopConfig, NonFiniteError, run_loop
from cfka_jax.train.step import Loss, init_state, make_train_step


@dataclasses.dataclass(frozen=True)
class CKLConfig:
    """Training settings shared by every method (reference values; the small preset overrides lr/epochs/batch)."""

    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-4
    weight_decay: float = 0.01
    seed: int = 42
    fixed_epoch_order: bool = False
    include_pad_targets: bool = False
    reference_mask: bool = False
    dropout: bool = True
    rho_k: float = 0.6
    review_ratio: float = 1.0
    eval_batch: int = 64
    kadapter: KAdapterConfig = KAdapterConfig()
    recadam_reference_groups: bool = False

    def __post_init__(self):
        if self.epochs < 0 or self.batch_size < 1 or self.eval_batch < 1:
            raise ValueError(f"need epochs >= 0, batch_size >= 1, eval_batch >= 1; got {self}")
        if not self.lr > 0 or self.review_ratio <= 0:
            raise ValueError("lr and review_ratio must be > 0")


@dataclasses.dataclass(frozen=True)
class Stream:
    """Training documents with object masks and, for TAALM, φ's token weights per document."""

    docs: Encoded
    phi_weights: tuple[np.ndarray, ...] | None = None


def epoch_batches(n: int, batch_size: int, epoch: int, seed: int, fixed: bool) -> list[list[int]]:
    """Row indices of every batch of one epoch (shuffled from (seed, epoch), wrapped to full batches)."""
    order = np.random.default_rng([seed, 0 if fixed else epoch]).permutation(n)
    n_batches = -(-n // batch_size)
    order = np.resize(order, n_batches * batch_size)
    return [order[i * batch_size:(i + 1) * batch_size].tolist() for i in range(n_batches)]


def stream_batch(stream: Stream, rows, length: int, cfg: CKLConfig) -> dict:
    """Padded numpy batch of ``rows`` with ``phi_weights`` (token space, zero on padding) when present."""
    batch = pad_batch(stream.docs, rows, length=length, reference_mask=cfg.reference_mask)
    if cfg.include_pad_targets:
        batch["target_mask"] = np.concatenate([np.zeros_like(batch["target_mask"][:, :1]),
                                               np.ones_like(batch["target_mask"][:, 1:])], axis=1)
    w = np.zeros(batch["tokens"].shape, np.float32)
    if stream.phi_weights is not None:
        for i, r in enumerate(rows):
            w[i, :len(stream.phi_weights[r])] = stream.phi_weights[r]
    batch["phi_weights"] = w
    return batch


def _concat(a: dict, b: dict) -> dict:
    return {k: np.concatenate([a[k], b[k]], axis=0) for k in a}


def make_step(theta: Theta, loss_fn: Callable, tx: optax.GradientTransformation):
    """Jitted ``step(state, frozen, batch, key) -> (state, metrics)`` over θ's trainable pytree: the engine's
    ``make_train_step`` with θ's forward as its objective (``loss``, ``targets``, ``grad_norm``, ``finite``)."""

    def objective(train, frozen, batch: dict, key):
        loss, count = loss_fn(theta.logits(train, frozen, batch, key), batch)
        return loss, {"loss": loss, "targets": count}

    return make_train_step(None, None, tx, loss=Loss(objective=objective))


class Trainer:
    """One method's θ, step and batch stream (shared by both protocols and ``runs/ckl_real``'s resumable runs).

    ``put`` turns each numpy batch field into a device array (``jnp.asarray``; a mesh run places the rows over
    the batch axes instead); ``state`` and ``key`` are what a resumable run checkpoints."""

    def __init__(self, theta: Theta, method: Method, cfg: CKLConfig, total_updates: int, *,
                 put: Callable = jnp.asarray):
        self.theta, self.method, self.cfg, self.put = theta, method, cfg, put
        self.tx = method_tx(method, lr=cfg.lr, total_updates=total_updates, weight_decay=cfg.weight_decay,
                            recadam_reference_groups=cfg.recadam_reference_groups)
        loss_fn, self.add = method_objective(method, theta)  # before training: θ0 = θ's start values
        self.step = make_step(theta, loss_fn, self.tx)
        self.scorer = make_probe_scorer(lambda p, batch: theta.logits(p[0], p[1], batch, None))
        self.key = jax.random.key(cfg.seed)
        self.state = init_state(jax.tree.map(jnp.copy, theta.train), self.tx)

    def fresh_optimizer(self):
        self.state = init_state(self.state.params, self.tx)

    def batches(self, stream: Stream, review: Stream | None, epoch: int):
        cfg, n_review = self.cfg, 0
        length = stream.docs.max_len
        if review is not None:
            n_review = max(1, int(round(cfg.batch_size * cfg.review_ratio)))
            length = max(length, review.docs.max_len)
        train_rows = epoch_batches(len(stream.docs), cfg.batch_size, epoch, cfg.seed, cfg.fixed_epoch_order)
        if not n_review:
            return [stream_batch(stream, r, length, cfg) for r in train_rows]
        review_rows = epoch_batches(len(review.docs), n_review, epoch, cfg.seed + 1, cfg.fixed_epoch_order)
        return [_concat(stream_batch(stream, a, length, cfg), stream_batch(review, b, length, cfg))
                for a, b in zip(train_rows, review_rows)]  # zipped loaders: the shorter one ends the epoch

    def train_epoch(self, stream: Stream, review: Stream | None, epoch: int) -> float:
        """One epoch through ``train/loop.run_loop`` (in memory: no folder, the finite flag checked one step
        late); the mean training loss."""
        batches, losses = self.batches(stream, review, epoch), []

        def batch_at(t: int):
            batch = {k: self.put(v) for k, v in batches[t].items()}
            batch = self.add(batch)
            batch.pop("phi_weights")
            self.key, sub = jax.random.split(self.key)
            return batch, sub if self.cfg.dropout else None

        step = lambda state, inputs: self.step(state, self.theta.frozen, *inputs)  # noqa: E731
        if batches:
            try:
                self.state = run_loop(self.state, step, batch_at, cfg=LoopConfig(steps=len(batches), log_every=len(
                    batches), progress=False), on_metrics=lambda done, m: losses.append(float(m["loss"]))).state
            except NonFiniteError as err:
                raise FloatingPointError(f"{self.method.name}: non-finite loss or update at epoch {epoch} "
                                         f"({err})") from err
        return float(np.mean(losses)) if losses else float("nan")

    def score(self, probes: dict[str, Encoded]) -> dict:
        params = (self.state.params, self.theta.frozen)
        out = {}
        for name, enc in probes.items():
            res = evaluate_probes(self.scorer, params, enc, batch_size=self.cfg.eval_batch)
            out[f"{name}/acc"], out[f"{name}/nll"] = res.acc, res.nll
        return out


def updates_per_epoch(n_docs: int, cfg: CKLConfig) -> int:
    return -(-n_docs // cfg.batch_size)


def run_lama_ckl(theta: Theta, method: Method, stream: Stream, probes: dict[str, Encoded], cfg: CKLConfig, *,
                 review: Stream | None = None, on_point: Callable | None = None) -> dict:
    """LAMA-CKL for one method. ``probes`` must hold ``to_learn`` and ``not_to_forget``.

    Returns:
        ``{"history": [per point k: epoch, train_loss, <set>/acc, <set>/nll], "summary": ckl_summary(...)}``.
    """
    if method.hooks.documents is not None and review is None:
        raise ValueError(f"{method.name} needs review documents")
    review = review_of(method, review)
    trainer = Trainer(theta, method, cfg, cfg.epochs * updates_per_epoch(len(stream.docs), cfg))
    history = [{"epoch": 0, "train_loss": float("nan"), **trainer.score(probes)}]
    if on_point is not None:
        on_point(history[-1])
    for epoch in range(1, cfg.epochs + 1):
        loss = trainer.train_epoch(stream, review, epoch)
        history.append({"epoch": epoch, "train_loss": loss, **trainer.score(probes)})
        if on_point is not None:
            on_point(history[-1])
    summary = ckl_summary([h["to_learn/acc"] for h in history], [h["not_to_forget/acc"] for h in history])
    return {"history": history, "summary": summary}


@dataclasses.dataclass(frozen=True)
class Period:
    """One TemporalWiki period: its training stream and its changed / unchanged probes."""

    name: str
    stream: Stream
    changed: Encoded
    unchanged: Encoded


def run_temporalwiki(theta: Theta, method: Method, periods: list[Period], cfg: CKLConfig, *,
                     review: Stream | None = None) -> list[dict]:
    """TemporalWiki for one method (module docstring); one record per period with before/after NLL and acc."""
    per_period = max(cfg.epochs * updates_per_epoch(len(p.stream.docs), cfg) for p in periods)
    trainer = Trainer(theta, method, cfg, per_period)  # the optimiser (and RecAdam's schedule) restarts per period
    review = review_of(method, review)
    out = []
    for p in periods:
        probes = {"changed": p.changed, "unchanged": p.unchanged}
        before = trainer.score(probes)
        trainer.fresh_optimizer()
        losses = [trainer.train_epoch(p.stream, review, e) for e in range(1, cfg.epochs + 1)]
        out.append({"period": p.name, "train_loss": float(np.mean(losses)) if losses else float("nan"),
                    "before": before, "after": trainer.score(probes)})
    return out
