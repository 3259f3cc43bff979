"""RecAdam (Chen et al. 2020, "Recall and Learn") as an optax transformation that really anneals
(spec taalm.md §7.4, quirk #12).

Per parameter p with pre-trained (start) value p_pre, at step t (from 1)::

    m ← β1·m + (1−β1)·g;   v ← β2·v + (1−β2)·g²
    step = lr·sqrt(1 − β2^t)/(1 − β1^t);   den = sqrt(v) + eps;   λ(t) = anneal_w·sigmoid(k·(t − t0))
    p ← p − step·λ(t)·m/den − lr·(anneal_w − λ(t))·γ·(p − p_pre)          (anneal_w = 0: a plain Adam step)
    p ← p − lr·wd·p                                                         (decoupled decay, after the step)

Early on λ ≈ 0: the update is the pull back to p_pre (the quadratic "recall" penalty γ/2·‖p − p_pre‖²); after t0
the task gradient takes over. Project default: every trainable parameter is annealed and decayed;
:meth:`RecAdamConfig.rescaled` puts t0 at half the run and keeps the reference's sharpness k·t0 and pull lr·γ
(the reference's t0 = 250 exceeds its 240 updates). ``reference_groups=True`` reproduces the released grouping:
names with "bias"/"norm" get anneal_w 1 and wd 0.01, everything else (every LoRA matrix) anneal_w 0 and wd 0, so
with LoRA RecAdam is plain Adam with eps 1e-6.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

_REF_T0, _REF_K, _REF_LR, _REF_GAMMA = 250.0, 0.5, 1e-4, 5000.0


@dataclasses.dataclass(frozen=True)
class RecAdamConfig:
    """RecAdam settings (reference: lr 1e-4, sigmoid anneal, k 0.5, t0 250, γ = pretrain_cof 5000, eps 1e-6)."""

    lr: float = 1e-4
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.01
    anneal_w: float = 1.0
    anneal_k: float = _REF_K
    anneal_t0: float = _REF_T0
    pretrain_cof: float = _REF_GAMMA
    reference_groups: bool = False

    def __post_init__(self):
        nums = {k: v for k, v in dataclasses.asdict(self).items() if k != "reference_groups"}
        if any(isinstance(v, bool) or not math.isfinite(v) for v in nums.values()):
            raise ValueError(f"RecAdam settings must be finite numbers, got {nums}")
        if self.lr <= 0 or self.anneal_k <= 0 or self.pretrain_cof < 0 or self.anneal_w < 0:
            raise ValueError("need lr > 0, anneal_k > 0, pretrain_cof >= 0, anneal_w >= 0")

    @classmethod
    def rescaled(cls, total_updates: int, lr: float, **overrides) -> "RecAdamConfig":
        """t0 = half the run, k·t0 and lr·γ as in the reference (0.5·250 and 1e-4·5000)."""
        t0 = max(total_updates / 2.0, 1.0)
        return cls(lr=lr, anneal_t0=t0, anneal_k=_REF_K * _REF_T0 / t0, pretrain_cof=_REF_LR * _REF_GAMMA / lr,
                   **overrides)


def anneal_lambda(t, cfg: RecAdamConfig):
    """λ(t) = anneal_w·sigmoid(k·(t − t0))."""
    return cfg.anneal_w * jax.nn.sigmoid(cfg.anneal_k * (jnp.asarray(t, jnp.float32) - cfg.anneal_t0))


class RecAdamState(NamedTuple):
    count: jax.Array
    m: optax.Updates
    v: optax.Updates
    pre: optax.Params


def _groups(params, cfg: RecAdamConfig):
    """Per leaf (anneal_w, weight decay)."""
    def leaf(path, _):
        if not cfg.reference_groups:
            return cfg.anneal_w, cfg.weight_decay
        name = jax.tree_util.keystr(path).lower()
        return (1.0, 0.01) if ("bias" in name or "norm" in name) else (0.0, 0.0)

    return jax.tree_util.tree_map_with_path(leaf, params)


def recadam(cfg: RecAdamConfig) -> optax.GradientTransformation:
    """The RecAdam update (module docstring); p_pre is the parameter value at ``init``."""

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return RecAdamState(jnp.zeros((), jnp.int32), zeros, jax.tree.map(jnp.zeros_like, params),
                            jax.tree.map(jnp.copy, params))

    def update(grads, state, params):
        t = state.count + 1
        m = jax.tree.map(lambda m, g: cfg.b1 * m + (1.0 - cfg.b1) * g, state.m, grads)
        v = jax.tree.map(lambda v, g: cfg.b2 * v + (1.0 - cfg.b2) * g * g, state.v, grads)

        def leaf(p, m, v, pre, group):
            aw, wd = group
            tf = t.astype(p.dtype)  # schedule in the parameter dtype (float64 in the exactness tests)
            step = cfg.lr * jnp.sqrt(1.0 - cfg.b2 ** tf) / (1.0 - cfg.b1 ** tf)
            lam = aw * jax.nn.sigmoid(cfg.anneal_k * (tf - cfg.anneal_t0))
            adam = m / (jnp.sqrt(v) + cfg.eps)
            new = p - step * (lam if aw > 0 else 1.0) * adam - cfg.lr * (aw - lam) * cfg.pretrain_cof * (p - pre)
            new = new - cfg.lr * wd * new
            return (new - p).astype(p.dtype)

        groups = _groups(params, cfg)
        leaves, treedef = jax.tree.flatten(params)
        rows = [leaf(*xs) for xs in zip(leaves, treedef.flatten_up_to(m), treedef.flatten_up_to(v),
                                        treedef.flatten_up_to(state.pre), treedef.flatten_up_to(groups))]
        return treedef.unflatten(rows), RecAdamState(t, m, v, state.pre)

    return optax.GradientTransformation(init, update)
