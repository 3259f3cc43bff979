"""Meta-training of φ on (D, T_D) pairs: the outer loop, TA validation and the checkpoint rule
(spec taalm.md §4.1, §4.4).

Pairs: D = the evidence (``evidence`` / TemporalWiki ``text``), T_D = the schematic probe with its object mask
(``data.ckl_encode``). ``val_size`` pairs are held out (seeded); the rest is reshuffled every epoch and cut into
meta-batches of ``meta_batch`` pairs (a short remainder is dropped); one outer AdamW step per meta-batch
(``meta.make_meta_step``), run by the engine's one loop (``train.loop.run_loop``, in memory; a non-finite meta-step
stops the run with ``NonFiniteError`` naming the step). ``skip_first`` reproduces the reference's skipped first meta-batch (quirk #22).

TA validation (``ta_eval.py`` L76–160), at step 0 and every ``val_every`` steps: θ reset to θ0, trained for
``val_epochs`` epochs on the validation D (batch ``val_batch``, ``val_accum`` micro-batches per update, torch
AdamW, i.e. ``adamw_step`` with ``eps_root = 0``, lr ``val_lr``, wd 0.01) with TWPPL under φ's frozen weights and
known-masking on; then the schematic T_D are scored (object accuracy and NLL, §5.5). Checkpoint rule (quirk #23):
the best validation accuracy, then the lower NLL, then the earliest step.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.continual.taalm.adamw import AdamWConfig, adamw_init, adamw_step
from cfka_jax.continual.taalm.meta import MetaConfig, ModelFns, Operands, init_meta_state, make_meta_step
from cfka_jax.continual.taalm.twppl import known_mask, twppl
from cfka_jax.data.ckl_encode import Encoded, pad_batch
from cfka_jax.eval.knowledge_probes import probe_scores
from cfka_jax.train.loop import LoopConfig, run_loop


@dataclasses.dataclass(frozen=True)
class MetaTrainConfig:
    """Outer loop, validation and φ optimiser (reference: 30 epochs, meta-batch 16, 16 validation pairs every 10
    steps, AdamW lr 2e-4 wd 0.01)."""

    epochs: int = 30
    meta_batch: int = 16
    val_size: int = 16
    val_every: int = 10
    max_steps: int | None = None
    skip_first: bool = False
    outer: AdamWConfig = AdamWConfig()
    meta: MetaConfig = MetaConfig()
    val_epochs: int = 4
    val_batch: int = 4
    val_accum: int = 2
    val_lr: float = 2e-4
    split_seed: int = 42
    order_seed: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.epochs < 0 or self.meta_batch < 1 or self.val_size < 0 or self.val_every < 1:
            raise ValueError(f"need epochs >= 0, meta_batch >= 1, val_size >= 0, val_every >= 1; got {self}")
        if self.meta_batch % self.meta.pair_chunk:
            raise ValueError(f"meta_batch={self.meta_batch} is not a multiple of pair_chunk={self.meta.pair_chunk}")
        if self.val_batch < 1 or self.val_accum < 1 or self.val_epochs < 0 or not self.val_lr > 0:
            raise ValueError("need val_batch, val_accum >= 1, val_epochs >= 0 and val_lr > 0")


@dataclasses.dataclass(frozen=True)
class PairSet:
    """Encoded D (evidence, object masks for diagnostics) and T_D (schematic probes, object masks)."""

    d: Encoded
    t: Encoded

    def __post_init__(self):
        if len(self.d) != len(self.t):
            raise ValueError(f"{len(self.d)} documents but {len(self.t)} probes")

    def arrays(self, rows) -> dict:
        """``{"d": batch, "t": batch}`` with a leading P axis (every D padded to the longest D, every T_D to the
        longest T_D, so one compiled program serves every meta-batch)."""
        d = pad_batch(self.d, rows, length=self.d.max_len)
        t = pad_batch(self.t, rows, length=self.t.max_len)
        return {"d": {k: jnp.asarray(v) for k, v in d.items()}, "t": {k: jnp.asarray(v) for k, v in t.items()}}


def split_pairs(n: int, val_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows), a seeded split."""
    if val_size >= n:
        raise ValueError(f"val_size={val_size} leaves no training pairs out of {n}")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[val_size:]), np.sort(perm[:val_size])


def make_validator(fns: ModelFns, cfg: MetaTrainConfig):
    """``validate(phi, ops, val_arrays) -> (acc, nll)`` (module docstring), jitted pieces."""
    opt = AdamWConfig(lr=cfg.val_lr, weight_decay=0.01, eps_root=0.0)

    @jax.jit
    def grad_fn(theta, ops: Operands, d: dict, w):
        def loss(th):
            logits = fns.logits(th, ops.theta_frozen, d, None)
            return twppl(logits, d["tokens"], w, known_mask(logits, d["tokens"], d["target_mask"]))
        return jax.grad(loss)(theta)

    update = jax.jit(lambda theta, g, state: adamw_step(theta, g, state, opt))
    weights = jax.jit(lambda phi, ops, d: fns.weights(phi, ops.phi_frozen, d, None))
    score = jax.jit(lambda theta, ops, t: probe_scores(fns.logits(theta, ops.theta_frozen, t, None), t["tokens"],
                                                       t["object_mask"]))

    def validate(phi, ops: Operands, val: dict) -> tuple[float, float]:
        n = val["d"]["tokens"].shape[0]
        w_all = weights(phi, ops, val["d"])
        theta, state = ops.theta0, adamw_init(ops.theta0)
        rng = np.random.default_rng(42)
        for _ in range(cfg.val_epochs):
            order = rng.permutation(n)
            micro = [order[i:i + cfg.val_batch] for i in range(0, n, cfg.val_batch)]
            for i in range(0, len(micro), cfg.val_accum):
                group = micro[i:i + cfg.val_accum]
                gs = [grad_fn(theta, ops, jax.tree.map(lambda x: x[rows], val["d"]), w_all[rows]) for rows in group]
                g = jax.tree.map(lambda *x: sum(x) / len(x), *gs)
                theta, state = update(theta, g, state)
        acc, nll, cnt = jax.device_get(score(theta, ops, val["t"]))
        has = cnt > 0
        return float(acc.mean()), float(nll[has].mean()) if has.any() else float("nan")

    return validate


@dataclasses.dataclass
class MetaTrainResult:
    """The selected φ (trainable pytree), its step, and the training / validation records."""

    phi: object
    best_step: int
    history: list
    validation: list


def _better(a: dict, b: dict | None) -> bool:
    return b is None or (a["acc"], -a["nll"]) > (b["acc"], -b["nll"])


def _meta_batches(train_rows: np.ndarray, cfg: MetaTrainConfig, total: int):
    """Row indices of each meta-batch: epochs of reshuffled training pairs, a short remainder dropped, the very
    first meta-batch skipped with ``skip_first``; ``total`` batches in all."""
    rng, per_epoch, done, first = np.random.default_rng(cfg.order_seed), len(train_rows) // cfg.meta_batch, 0, True
    while done < total:
        order = rng.permutation(train_rows)
        for b in range(per_epoch):
            if first and cfg.skip_first:
                first = False
                continue
            first = False
            if done == total:
                return
            done += 1
            yield order[b * cfg.meta_batch:(b + 1) * cfg.meta_batch]


def meta_train(fns: ModelFns, phi, ops: Operands, pairs: PairSet, cfg: MetaTrainConfig, *,
               progress: bool = True) -> MetaTrainResult:
    """Meta-train φ's trainable pytree ``phi`` (module docstring) and return the selected checkpoint."""
    from tqdm.auto import tqdm

    train_rows, val_rows = split_pairs(len(pairs.d), cfg.val_size, cfg.split_seed)
    per_epoch = len(train_rows) // cfg.meta_batch
    if per_epoch == 0:
        raise ValueError(f"{len(train_rows)} training pairs cannot fill one meta-batch of {cfg.meta_batch}")
    total = cfg.epochs * per_epoch if cfg.max_steps is None else min(cfg.max_steps, cfg.epochs * per_epoch)
    step_fn = make_meta_step(fns, cfg.meta, cfg.outer)
    validate = make_validator(fns, cfg) if cfg.val_size else None
    val = pairs.arrays(val_rows) if cfg.val_size else None
    state, key = init_meta_state(jax.tree.map(jnp.copy, phi)), jax.random.key(cfg.seed)
    history, validation, best, best_phi = [], [], None, None

    def check(step: int):
        nonlocal best, best_phi
        acc, nll = validate(state.phi, ops, val)
        validation.append({"step": step, "acc": acc, "nll": nll})
        if _better(validation[-1], best):
            best, best_phi = validation[-1], jax.tree.map(jnp.copy, state.phi)

    if validate is not None:
        check(0)
    bar = tqdm(total=total, desc="meta-train φ", disable=not progress)
    batches = _meta_batches(train_rows, cfg, total)

    def batch_at(t: int):
        nonlocal key
        key, sub = jax.random.split(key)
        return pairs.arrays(next(batches)), sub

    def on_metrics(step: int, m: dict):
        history.append({"step": step, **{k: float(v) for k, v in jax.device_get(m).items()}})
        bar.update(1)
        bar.set_postfix(loss=f"{history[-1]['outer_loss']:.3f}", w_obj=f"{history[-1]['w_object']:.3f}",
                        w_other=f"{history[-1]['w_other']:.3f}")

    def on_state(step: int, s):
        nonlocal state
        state = s
        check(step)

    state = run_loop(state, lambda s, b: step_fn(s, ops, *b), batch_at, cfg=LoopConfig(
        steps=total, log_every=max(total, 1), progress=False), on_metrics=on_metrics, on_state=on_state,
        state_at=(lambda step: step % cfg.val_every == 0) if validate is not None else None).state
    bar.close()
    if validate is None:
        best_phi, best = state.phi, {"step": len(history)}
    return MetaTrainResult(best_phi, best["step"], history, validation)
