"""The differentiable inner optimisers of the TAALM meta-gradient (spec taalm.md §4.2, §4.3), pure functions.

AdamW exactly as the reference's differentiable optimiser (``utils/tool_TAALM/taalm_adamw.py`` L590–600), per
parameter p with gradient g at step t (t counts from 1)::

    p ← p·(1 − lr·wd)
    m ← m + (1 − β1)·(g − m)
    v ← β2·v + (1 − β2)·g²                                   (the stored v excludes eps_root)
    den = (sqrt(v + eps_root) + eps_root) / sqrt(1 − β2^t) + eps
    p ← p − (lr / (1 − β1^t))·m / den

Epsilon placement (quirk #3). ``eps_root`` (1e-8) *inside* the square root keeps
d sqrt(v)/dv = 1/(2·sqrt(v + eps_root)) finite where v = 0 — e.g. LoRA A at step 1 while B = 0 — which the second
derivative of the meta-gradient needs; with only an outer eps (optax's ``eps``) the double backward gives inf/NaN
there. optax's ``eps_root`` is added after bias correction, a different formula, hence this hand-written step.
The same AdamW (persistent state) is the outer optimiser of φ (§4.4).

The paper's form (§4.2) is one plain SGD step ``p ← p − α·g`` (:func:`sgd_step`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class AdamWConfig:
    """Reference defaults: lr 2e-4 (hard-coded in ``TAALM_trainer.py``), betas (0.9, 0.999), eps 1e-8, wd 0.01."""

    lr: float = 2e-4
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    eps_root: float = 1e-8
    weight_decay: float = 0.01

    def __post_init__(self):
        vals = dataclasses.asdict(self)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in vals.values()):
            raise ValueError(f"AdamW settings must be finite numbers, got {vals}")
        if self.lr <= 0 or not (0 <= self.b1 < 1 and 0 <= self.b2 < 1):
            raise ValueError(f"need lr > 0 and betas in [0, 1), got lr={self.lr}, b1={self.b1}, b2={self.b2}")
        if self.eps < 0 or self.eps_root < 0 or self.weight_decay < 0:
            raise ValueError("eps, eps_root and weight_decay must be >= 0")


class AdamWState(NamedTuple):
    """First and second moments (trees like the parameters) and the number of steps taken."""

    m: Any
    v: Any
    t: jax.Array


def adamw_init(params) -> AdamWState:
    """m = v = 0, t = 0 (a fresh optimiser; θ's inner optimiser is fresh for every (D, T_D) pair)."""
    zeros = jax.tree.map(jnp.zeros_like, params)
    return AdamWState(zeros, jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.int32))


def adamw_step(params, grads, state: AdamWState, cfg: AdamWConfig):
    """One reference AdamW step (module docstring); differentiable in ``params``, ``grads`` and the moments.

    Returns:
        ``(params, state)`` after the step.
    """
    t = state.t + 1

    def leaf(p, g, m, v):
        dt = p.dtype
        tf = t.astype(dt)
        c = lambda x: jnp.asarray(x, dt)  # noqa: E731  (Python floats as the parameter dtype: strict promotion)
        p = p * c(1.0 - cfg.lr * cfg.weight_decay)
        m = m + c(1.0 - cfg.b1) * (g - m)
        v = c(cfg.b2) * v + c(1.0 - cfg.b2) * g * g
        bc1 = c(1.0) - c(cfg.b1) ** tf
        bc2 = c(1.0) - c(cfg.b2) ** tf
        den = (jnp.sqrt(v + c(cfg.eps_root)) + c(cfg.eps_root)) / jnp.sqrt(bc2) + c(cfg.eps)
        return p - (c(cfg.lr) / bc1) * m / den, m, v

    p_leaves, treedef = jax.tree.flatten(params)
    rows = [leaf(*xs) for xs in zip(p_leaves, treedef.flatten_up_to(grads), treedef.flatten_up_to(state.m),
                                     treedef.flatten_up_to(state.v))]
    p_new, m_new, v_new = (treedef.unflatten([r[i] for r in rows]) for i in range(3))
    return p_new, AdamWState(m_new, v_new, t)


def sgd_step(params, grads, lr: float):
    """The paper's inner step ``p − lr·g``."""
    return jax.tree.map(lambda p, g: p - jnp.asarray(lr, p.dtype) * g, params, grads)
