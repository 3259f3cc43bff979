"""Conserved quantities of (Y, Z) gradient flow (spec cfka_stoc.md §2.5).

Under gradient flow Ẏ = −η_Y ∇_Y ℓ, Ż = −η_Z ∇_Z ℓ, the loss depends on column y_s and the attention
entries z_{s,q} = Z[s, q] only through the products z_{s,q} · y_{o,s}, so Σ_q z_{s,q} ∂ℓ/∂z_{s,q} =
Σ_o y_{o,s} ∂ℓ/∂y_{o,s}. Therefore

    derived:  c_s = Σ_q z_{s,q}² / η_Z − Σ_o y_{o,s}² / η_Y        is constant in time, while
    quoted:   c̃_s = Σ_q (z_{s,q} / η_Z)² − Σ_o (y_{o,s} / η_Y)²    has dc̃_s/dt = −2 G_s (1/η_Z − 1/η_Y),

with G_s = Σ_o y_{o,s} ∂ℓ/∂y_{o,s}, which vanishes only when η_Y = η_Z. Discrete SGD/GD conserves c_s only up
to O(η²) per step. Sums run over the query tokens q of the world and the object rows o, the only entries the
loss reads.
"""

from __future__ import annotations

import jax.numpy as jnp

from cfka_jax.shapes import Array, Float
from cfka_jax.theory.model import YZParams
from cfka_jax.theory.world import FactWorld


def _norms(params: YZParams, world: FactWorld):
    z2 = params.Z[:, world.query_token] ** 2
    y2 = jnp.sum(params.Y[world.objects, :] ** 2, axis=0)
    return z2, y2


def derived_quantity(params: YZParams, world: FactWorld, eta_y, eta_z) -> Float[Array, " M"]:
    """c_s = z_s²/η_Z − Σ_o y_{o,s}²/η_Y for every token s (the conserved quantity)."""
    z2, y2 = _norms(params, world)
    return z2 / eta_z - y2 / eta_y


def quoted_quantity(params: YZParams, world: FactWorld, eta_y, eta_z) -> Float[Array, " M"]:
    """c̃_s = (z_s/η_Z)² − Σ_o (y_{o,s}/η_Y)², the form quoted by the paper summaries."""
    z2, y2 = _norms(params, world)
    return z2 / eta_z**2 - y2 / eta_y**2


def relative_drift(traj: Float[Array, "R M"], scale: Float[Array, "R M"]) -> Float[Array, ""]:
    """max_{t,s} |q_s(t) − q_s(0)| / max_{t,s} |scale_s(t)|: drift of a monitored quantity relative to its terms."""
    return jnp.max(jnp.abs(traj - traj[0:1])) / jnp.max(jnp.abs(scale))
