"""AdamW with linear warm-up then cosine decay to a floor (HF ``cosine_with_min_lr``), clipping and masks.

Spec cfka_stoc.md §4.1: AdamW β = (0.9, 0.999), ε = 1e-6, weight decay 0.1 except biases and norm weights,
global-norm clipping at 1.0, linear warm-up 0 → peak then half-cosine peak → min.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """Optimiser and schedule settings."""

    peak_lr: float = 1e-3
    min_lr: float = 5e-5
    warmup_steps: int = 100
    total_steps: int = 1000
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.1
    clip_norm: float = 1.0

    def __post_init__(self):
        rates = {"peak_lr": self.peak_lr, "min_lr": self.min_lr, "b1": self.b1, "b2": self.b2, "eps": self.eps,
                 "weight_decay": self.weight_decay, "clip_norm": self.clip_norm}
        bad = {k: v for k, v in rates.items() if isinstance(v, bool) or not isinstance(v, (int, float))
               or not math.isfinite(v)}
        if bad:
            raise ValueError(f"optimiser settings must be finite numbers, got {bad}")
        if not 0 <= self.min_lr <= self.peak_lr:
            raise ValueError(f"need 0 <= min_lr <= peak_lr, got {self.min_lr}, {self.peak_lr}")
        if not 0 <= self.warmup_steps <= self.total_steps or self.total_steps < 1:
            raise ValueError(f"need 0 <= warmup_steps <= total_steps >= 1, got {self.warmup_steps}, {self.total_steps}")
        if self.clip_norm <= 0 or self.weight_decay < 0:
            raise ValueError("clip_norm must be > 0 and weight_decay >= 0")


def lr_schedule(cfg: OptimConfig) -> optax.Schedule:
    """lr(t) = peak·t/warmup for t < warmup, then min + (peak − min)·(1 + cos(π·u))/2, u = progress in [0, 1]."""

    def schedule(step):
        t = jnp.asarray(step, jnp.float32)
        warm = cfg.peak_lr * t / max(cfg.warmup_steps, 1)
        u = jnp.clip((t - cfg.warmup_steps) / max(cfg.total_steps - cfg.warmup_steps, 1), 0.0, 1.0)
        cosine = cfg.min_lr + (cfg.peak_lr - cfg.min_lr) * 0.5 * (1.0 + jnp.cos(jnp.pi * u))
        return jnp.where(t < cfg.warmup_steps, warm, cosine)

    return schedule


def decay_mask(params):
    """True for weights that get weight decay: matrices (ndim ≥ 2); biases and norm scales (ndim 1) do not."""
    return jax.tree.map(lambda p: getattr(p, "ndim", 0) >= 2, params)


def make_optimizer(cfg: OptimConfig, trainable=None) -> optax.GradientTransformation:
    """Clip → AdamW on trainable leaves; frozen leaves (``trainable`` False) get exactly zero updates.

    Args:
      cfg: optimiser settings.
      trainable: optional pytree of bools matching the parameters (None: everything trains). Clipping uses the
        global norm of the trainable gradients only.
    """
    adamw = optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm),
        optax.adamw(lr_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
                    mask=decay_mask),
    )
    if trainable is None:
        return adamw
    from cfka_jax.continual.peft import masked_tx

    return masked_tx(adamw, trainable)
