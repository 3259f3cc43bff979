"""The Diversity Index of a corpus's token types (spec cfka_stoc.md §2.6), conventions of ``theory/diversity.py``.

With v_{o,s} = ln Pr(s|o) + L⁻¹ ln Pr(o) from the corpus's own counts (``lm_theory/cooccurrence.py``),

    DI(s) = −(η_Z/η_Y)^e · ‖v_s‖^{1/2},       ‖v_s‖ = (Σ_{o ∈ support(s)} v_{o,s}²)^{1/2},

lower DI ⇒ larger predicted attention |z_s|. The conventions, as in the theory module:

* ``centre`` (project default True): remove the mean over the support first (softmax over objects ignores a
  per-column shift of Y, so the mean carries no information); False is the quoted, un-centred form.
* ``support``: 'cooccur' (objects seen with s; decision #3) or 'all' (every object, smoothed counts).
* ``exponent`` e: 1/4 (derived from the conservation law that holds) or 1/2 (quoted). A trained LM has one
  learning rate for every block, η_Z/η_Y = 1, so the prefactor is 1 under either exponent: the exponent
  rescales nothing and no correlation depends on it. Only centring and support change the ranking of tokens.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from cfka_jax.lm_theory.cooccurrence import CoOccurrence, log_prior_terms, support_mask
from cfka_jax.shapes import Array, Float


@dataclasses.dataclass(frozen=True)
class DIConvention:
    """One DI convention (module docstring); ``smoothing`` is ε of the counts (support 'all' needs ε > 0 unless
    every (token, object) pair was seen)."""

    centre: bool = True
    support: str = "cooccur"
    exponent: float = 0.25
    smoothing: float = 0.0

    def __post_init__(self):
        if self.exponent not in (0.25, 0.5):
            raise ValueError(f"exponent must be 1/4 (derived) or 1/2 (quoted), got {self.exponent}")
        if not 0.0 <= self.smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {self.smoothing}")

    @property
    def name(self) -> str:
        return f"{'centred' if self.centre else 'uncentred'}/{self.support}"


CONVENTIONS = (DIConvention(True, "cooccur"), DIConvention(False, "cooccur"),
               DIConvention(True, "all", smoothing=0.05), DIConvention(False, "all", smoothing=0.05))
"""The four conventions every study reports: centred / un-centred × co-occurring / all objects (ε = 0.05, the
theory worlds' default smoothing); the first is the project default."""


def v_norm(co: CoOccurrence, conv: DIConvention = DIConvention()) -> Float[Array, " M"]:
    """‖v_s‖ (‖ṽ_s‖ when centred) over the convention's support; 0 for tokens with an empty support."""
    mask = support_mask(co, support=conv.support)
    v = log_prior_terms(co, support=conv.support, smoothing=conv.smoothing)
    if conv.centre:
        mean = jnp.sum(v, axis=-1, keepdims=True) / jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0)
        v = (v - mean) * mask
    return jnp.sqrt(jnp.sum(v**2, axis=-1))


def diversity_index(co: CoOccurrence, conv: DIConvention = DIConvention(), *, eta_ratio: float = 1.0
                    ) -> Float[Array, " M"]:
    """DI(s) = −(η_Z/η_Y)^e ‖v_s‖^{1/2} (C = 0); ``eta_ratio`` = η_Z/η_Y (1 for one learning rate)."""
    return -(eta_ratio**conv.exponent) * jnp.sqrt(v_norm(co, conv))
