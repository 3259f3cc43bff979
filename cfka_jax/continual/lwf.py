"""Learning without Forgetting (Li & Hoiem 2016, "Learning without Forgetting", Eq. 2–4) for language models:
distillation towards the pre-CPT model's predictions on the CPT inputs themselves.

With θ0 the parameters the run starts from (frozen), z0 = logits of θ0 and z = logits of θ at the same position,
temperature T and weight λ:

    ℓ(θ) = ℓ_NLL(θ) + λ · T² · (1/N) Σ_{b,s} m_{b,s+1} · KL( p0_{b,s} ‖ q_{b,s} ),
    p0 = softmax(z0 / T),   q = softmax(z / T),   KL(p0 ‖ q) = Σ_v p0_v (log p0_v − log q_v),

over the N = Σ m predicting positions (position s predicts token s + 1; ``m`` = the batch's ``target_mask``, the
same positions as the NLL). No old data is needed: the new inputs carry the old model's behaviour. Properties:

* at θ = θ0 the distillation term is 0 and its gradient is 0 (KL(p ‖ p) = 0 is a minimum);
* per position, ∂/∂z [λ T² KL(p0 ‖ q) / N] = (λ T / N) (q − p0) (the T² keeps the gradient's scale independent
  of T, as in Hinton et al. 2015).

The teacher's log-probabilities log p0 (``B × S × V``) are added to each batch by the context's frozen θ0
(``ctx.reference``, jitted with the teacher's forward); options in the name: ``lwf(T=2, weight=1)``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from cfka_jax.continual.method import Component, Hooks, MethodOptions

TEACHER = "teacher_logp"
"""The batch field holding log p0 = log_softmax(z0 / T) (``B S V``, float32)."""


def _float(dtype):
    return jnp.float64 if dtype == jnp.float64 else jnp.float32


def distillation(logits_BSV: Float[Array, "B S V"], teacher_logp_BSV: Float[Array, "B S V"],
                 target_mask_BS: Float[Array, "B S"], temperature: float) -> tuple[jax.Array, jax.Array]:
    """``((1/N) Σ m · KL(p0 ‖ q), N)`` over the predicting positions (module docstring), in float32 (float64
    inputs stay float64)."""
    dtype = _float(logits_BSV.dtype)
    logq_BSV = jax.nn.log_softmax(logits_BSV.astype(dtype) / temperature, axis=-1)
    p0_BSV = jnp.exp(teacher_logp_BSV)
    kl_BS = jnp.sum(p0_BSV * (teacher_logp_BSV - logq_BSV), axis=-1)
    m_BS = target_mask_BS[:, 1:].astype(dtype)
    count = jnp.sum(m_BS)
    return jnp.sum(m_BS * kl_BS[:, :-1]) / jnp.maximum(count, 1.0), count


def make_lwf_loss(base_loss, temperature: float, weight: float):
    """``loss_fn(logits_BSV, batch) → (loss, count)``: ``base_loss`` plus λ T² times :func:`distillation`
    against ``batch[TEACHER]``."""
    def loss_fn(logits_BSV, batch):
        loss, count = base_loss(logits_BSV, batch)
        kl, _ = distillation(logits_BSV, batch[TEACHER], batch["target_mask"], temperature)
        return loss + weight * temperature ** 2 * kl, count

    return loss_fn


def teacher_logp(temperature: float):
    """``fn(logits_BSV, batch) → log_softmax(z0 / T)``, the batch field the teacher's forward produces."""
    return lambda logits_BSV, batch: jax.nn.log_softmax(logits_BSV.astype(_float(logits_BSV.dtype)) / temperature,
                                                        axis=-1)


def component(options: MethodOptions, T: float = 2.0, weight: float = 1.0, **given) -> Component:
    """LwF with temperature ``T`` > 0 and weight λ = ``weight`` >= 0 (module docstring).

    Raises:
      ValueError: an unknown option, or T / weight outside their ranges.
    """
    if given:
        raise ValueError(f"lwf options are T and weight, got {sorted(given)}")
    t, lam = float(T), float(weight)
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"lwf: the temperature T must be a finite number > 0, got {T!r}")
    if not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lwf: the weight must be a finite number >= 0, got {weight!r}")

    def objective(ctx):
        teacher = ctx.reference(teacher_logp(t))
        return make_lwf_loss(ctx.base_loss, t, lam), lambda batch: {**batch, TEACHER: teacher(batch)}

    return Component("lwf", Hooks(token_objective=objective), needs={"reference"})
