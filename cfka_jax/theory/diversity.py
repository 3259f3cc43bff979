"""The Diversity Index and the attention it predicts (spec cfka_stoc.md §2.6, §2.8).

With v_{o,s} = ln Pr(s|o) + L⁻¹ ln Pr(o) and a small initialisation, the conserved quantity of
``theory/conservation.py`` is ≈ 0 for every token: z_s²/η_Z ≈ ‖y_s‖²/η_Y. At convergence y_s ≈ u_s = v_s / z_s
(spec §2.3), so z_s⁴ ≈ (η_Z/η_Y) ‖v_s‖², i.e.

    |z_s| ≈ (η_Z/η_Y)^{1/4} ‖v_s‖^{1/2}          (derived conservation law),
    |z_s| ≈ (η_Z/η_Y)^{1/2} ‖v_s‖^{1/2}          (if the quoted law held),

and DI(s) = −c · ‖v_s‖^{1/2} + C with c the prefactor: lower DI ⇒ larger attention. ``prefactor_exponent``
selects 1/4 (derived, default) or 1/2 (quoted). Attention is reported as |z_s|: the loss is invariant under
(z_s, y_s) → (−z_s, −y_s), so only the magnitude is meaningful.

Centring (``centre=True``, the project default): softmax over objects is invariant to a per-column shift of
Y (``theory/optimum.py``), so the mean over o of v_{o,s} carries no information and the learned column does not
pay for it. The project's DI therefore uses the object-centred ṽ_{o,s} = v_{o,s} − mean_o v_{o,s}; the quoted
form (``centre=False``) keeps the raw ln Pr(s|o), whose norm is dominated by how many tokens share the slot.
``proofs_check/check_diversity.py`` measures both.

Support convention (decision #3): the sum over o runs over objects that co-occur with s, i.e. whose
Pr(s|o) exceeds the world's smoothing floor by ``support_margin``; with ``support='all'`` every object counts.
"""

from __future__ import annotations

import jax.numpy as jnp

from cfka_jax.shapes import Array, Float
from cfka_jax.theory.stats import pearson, spearman  # noqa: F401 (re-exported: the DI's correlations)
from cfka_jax.theory.world import FactWorld, log_prior_terms


def support_mask(world: FactWorld, *, support: str = "cooccur") -> Float[Array, "M O"]:
    """1 where object o co-occurs with token s (Pr(s|o) above the slot's smoothing floor), else 0."""
    if support == "all":
        return jnp.ones_like(world.pr_s_given_o)
    if support != "cooccur":
        raise ValueError(f"support must be 'cooccur' or 'all', got {support!r}")
    floor = jnp.min(jnp.where(world.pr_s_given_o > 0, world.pr_s_given_o, jnp.inf), axis=-1, keepdims=True)
    above = world.pr_s_given_o > floor * (1.0 + 1e-6)
    uniform = jnp.all(~above, axis=-1, keepdims=True)  # a token with equal Pr(s|o) for all o co-occurs with all
    return (above | uniform).astype(world.pr_s_given_o.dtype)


def v_norm(world: FactWorld, *, support: str = "all", centre: bool = True) -> Float[Array, " M"]:
    """‖v_s‖ = (Σ_o v_{o,s}²)^{1/2} over the chosen support (zero for object tokens).

    With ``centre`` the mean over the support is removed first (ṽ_s); without it this is the quoted ‖v_s‖.
    """
    mask = support_mask(world, support=support)
    v = log_prior_terms(world) * mask
    if centre:
        mean = jnp.sum(v, axis=-1, keepdims=True) / jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0)
        v = (v - mean) * mask
    return jnp.sqrt(jnp.sum(v**2, axis=-1))


def diversity_index(world: FactWorld, eta_y, eta_z, *, exponent: float = 0.25, support: str = "all",
                    centre: bool = True):
    """DI(s) = −(η_Z/η_Y)^exponent · ‖v_s‖^{1/2} (C = 0).

    Args:
      world: the fact world.
      eta_y, eta_z: learning rates of Y and Z.
      exponent: 1/4 (derived from the conservation law that holds) or 1/2 (quoted).
      support: 'all' objects or 'cooccur' (objects seen with s).
      centre: remove the per-token mean over objects (project default) or not (quoted form).
    """
    return -((eta_z / eta_y) ** exponent) * jnp.sqrt(v_norm(world, support=support, centre=centre))


def predicted_attention(world: FactWorld, eta_y, eta_z, *, exponent: float = 0.25, support: str = "all",
                        centre: bool = True):
    """|z_s| predicted at convergence from a small init: (η_Z/η_Y)^exponent ‖v_s‖^{1/2} (= −DI)."""
    return -diversity_index(world, eta_y, eta_z, exponent=exponent, support=support, centre=centre)
