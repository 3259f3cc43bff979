"""Token force g, update energy E and the one shared shift (spec token_force.md §2, §5.1–§5.2).

Conventions (binding, spec §2):

* **Force** ``g_t = e_{y_t} − softmax(z_t) ∈ R^V`` = ``∂ log p(y_t | s_t) / ∂ z_t`` (logprob convention). The
  target component ``1 − π_y ≥ 0``; every other component ``−π_k ≤ 0`` (a "negative force"). The NLL convention
  (softmax − onehot) is ``−g``; ``nll=True`` negates at output only. ``⟨g_o, g_u⟩``, ``⟨Wᵀg_o, Wᵀg_u⟩`` and E
  do not depend on the convention.
* **Positions.** The target at position p is scored by the logits (and hidden state) at p − 1. Every per-token
  array of this package is keyed by *target position*: ``x_BS[b, p]`` belongs to the target ``tokens[b, p]``;
  column 0 has no target. :func:`to_targets` is the one function that does the shift; ``target_mask[b, p] = 1``
  (the training engine's convention, ``train/losses.py``) marks supervised targets in the same keying.
* **Energy** ``E = ‖g‖² = 1 − 2π_y + Σ_v π_v² ∈ [0, 2]``; ``E = 0`` iff ``π = e_y``, ``E = 2`` iff π is one-hot
  on some ``k ≠ y``. Computed in float32 from ``lp = log_softmax(z)`` as ``1 − 2·exp(lp_y) + Σ_v exp(2·lp_v)``.

Energy bounds [DERIVED, §5.2], with ``s = 1 − π_y`` and ``m = max_{k≠y} π_k``: ``E = s² + Σ_{k≠y} π_k²``, so

* competitor bound ``E ≤ s(s + m) ≤ 1 + m``: **E > 1 ⇒ some rival has π_k ≥ E − 1**;
* target bounds ``s² ≤ E ≤ 2s²``: **1 − √E ≤ π_y ≤ 1 − √(E/2)**.

Shape letters (``cfka_jax.shapes``): B batch, S positions (keyed by target), V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float, Int

F32 = jnp.float32
BANDS = (0.8, 1.8)
"""Figure bands (spec §5.1): E < 0.8 "confident", 0.8 ≤ E ≤ 1.8 "semantic forking", E > 1.8 "extreme"."""


def wide(x: Array) -> Array:
    """``x`` in float32 or wider: bf16/fp16 are upcast, float64 (x64 identity checks) is kept."""
    return x if jnp.dtype(x.dtype).itemsize >= 4 else x.astype(F32)


def to_targets(x_BS: Array) -> Array:
    """The one shared shift: a per-position array computed at p − 1, re-keyed by the target position p.

    ``out[:, p] = x[:, p − 1]`` for p ≥ 1 and ``out[:, 0] = 0`` (position 0 has no target). Works on any
    trailing shape (logits ``B S V``, hidden states ``B S D``, stacked streams ``B S L D``).
    """
    return jnp.concatenate([jnp.zeros_like(x_BS[:, :1]), x_BS[:, :-1]], axis=1)


def has_target(tokens_BS: Int[Array, "B S"], dtype=F32) -> Float[Array, "B S"]:
    """1 at positions p ≥ 1 (which have a target scored from p − 1), 0 at column 0."""
    s = tokens_BS.shape[1]
    return jnp.broadcast_to((jnp.arange(s) >= 1).astype(dtype)[None, :], tokens_BS.shape)


def target_logprobs(logits_BSV: Float[Array, "B S V"]) -> Float[Array, "B S V"]:
    """``log_softmax`` of the model's logits re-keyed by target position (float32 or wider); column 0 uniform."""
    return jax.nn.log_softmax(to_targets(wide(logits_BSV)), axis=-1)


def force_from_logprobs(lp_XV: Float[Array, "*X V"], y_X: Int[Array, "*X"], *, nll: bool = False
                        ) -> Float[Array, "*X V"]:
    """``g = e_y − exp(lp)`` for already aligned log-probabilities (any leading shape); ``nll`` gives ``−g``."""
    g = jax.nn.one_hot(y_X, lp_XV.shape[-1], dtype=lp_XV.dtype) - jnp.exp(lp_XV)
    return -g if nll else g


def force(logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"], *, nll: bool = False
          ) -> Float[Array, "B S V"]:
    """Force of every target, keyed by target position: ``g[b, p] = e_{tokens[b,p]} − softmax(logits[b, p−1])``.

    Column 0 (no target) is zero. Softmax over all V rows of the head (Pythia's padded rows included, §2).
    """
    g = force_from_logprobs(target_logprobs(logits_BSV), tokens_BS, nll=nll)
    return g * has_target(tokens_BS, g.dtype)[..., None]


def energy_from_logprobs(lp_XV: Float[Array, "*X V"], y_X: Int[Array, "*X"]) -> Float[Array, "*X"]:
    """On-the-fly energy ``E = 1 − 2·exp(lp_y) + Σ_v exp(2·lp_v)`` (§5.3; O(V), no extra forward), float32."""
    lp = wide(lp_XV)
    lp_y = jnp.take_along_axis(lp, y_X[..., None], axis=-1)[..., 0]
    return 1.0 - 2.0 * jnp.exp(lp_y) + jnp.sum(jnp.exp(2.0 * lp), axis=-1)


def energy(logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"]) -> Float[Array, "B S"]:
    """Update energy ``E = ‖g‖²`` of every target, keyed by target position (column 0 is zero)."""
    e = energy_from_logprobs(target_logprobs(logits_BSV), tokens_BS)
    return e * has_target(tokens_BS, e.dtype)


def rival_max(probs_XV: Float[Array, "*X V"], y_X: Int[Array, "*X"]) -> Float[Array, "*X"]:
    """``m = max_{k≠y} π_k``, the strongest rival of the target."""
    others = jnp.where(jax.nn.one_hot(y_X, probs_XV.shape[-1], dtype=bool), -jnp.inf, probs_XV)
    return jnp.max(others, axis=-1)


def target_bound(e_X: Float[Array, "*X"]) -> Float[Array, "*X"]:
    """The upper bound ``π_y ≤ 1 − √(E/2)`` implied by energy E."""
    return 1.0 - jnp.sqrt(e_X / 2.0)


def band_counts(e_N: Float[Array, " N"], mask_N: Float[Array, " N"]) -> dict[str, Array]:
    """Numbers of masked-in tokens per figure band (:data:`BANDS`): ``confident`` / ``forking`` / ``extreme``."""
    lo, hi = BANDS
    m = mask_N.astype(e_N.dtype)
    return {"confident": jnp.sum(m * (e_N < lo).astype(m.dtype)),
            "forking": jnp.sum(m * ((e_N >= lo) & (e_N <= hi)).astype(m.dtype)),
            "extreme": jnp.sum(m * (e_N > hi).astype(m.dtype))}
