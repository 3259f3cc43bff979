"""RHO-1 selective language modelling as a token-level loss (spec taalm.md §7.2; Lin et al. 2024,
arXiv:2404.07965), for ``train.step.make_train_step``'s ``loss_fn`` or the CKL benchmark.

The caller puts the reference model's per-token NLL in the batch (``batch['ref_nll']``, ``B S`` token space:
column s = −log p_ref(x_s | x_<s), column 0 unused); the reference is θ0 (stop-gradient), computed online with the
same padding (quirk #10).

* ``faithful`` (default): excess loss L_Δ = L_θ − L_ref per target token (no gradient through the selection);
  I_k = 1 on the top fraction k of the **batch's** target tokens by L_Δ;
  ``L_SLM = Σ I_k·L_θ / (k·N)`` with N the number of targets (k = fraction kept).
* ``taalm_code`` (quirk #9, reproduces the released code): score s = p_θ − p_ref (a probability difference, no
  gradient); per sequence ``sel_j = 1[argsort(s)_j / (S−1) > k]`` — argsort used as if it were ranks, so an
  arbitrary ≈ (1−k) of the positions is kept whatever s is, pads ranked too; loss per sequence
  ``Σ nll·sel·m / (k·Σ m)``, mean over sequences.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from cfka_jax.train.losses import next_token_nll
from cfka_jax.shapes import Array, Float

RHO_MODES = ("faithful", "taalm_code")


def top_fraction(score_BS: Float[Array, "B S"], mask_BS: Float[Array, "B S"], k: float) -> Float[Array, "B S"]:
    """1 on the ⌈k·N⌉ highest-scoring masked entries of the whole batch (ties at the threshold all kept)."""
    m = mask_BS > 0
    n = jnp.sum(m)
    n_keep = jnp.maximum(jnp.ceil(jnp.asarray(k, jnp.float32) * n.astype(jnp.float32)).astype(jnp.int32), 1)
    ranked = jnp.sort(jnp.where(m, score_BS, -jnp.inf).ravel())[::-1]
    threshold = ranked[jnp.minimum(n_keep, ranked.shape[0]) - 1]
    return (m & (score_BS >= threshold)).astype(mask_BS.dtype)


def argsort_selection(score_BS: Float[Array, "B S"], k: float) -> Float[Array, "B S"]:
    """The released code's rule ``argsort(s)_j / S > k`` per row (sorted indices read as ranks)."""
    s = score_BS.shape[1]
    return (jnp.argsort(score_BS, axis=1).astype(jnp.float32) / jnp.float32(s) > k).astype(score_BS.dtype)


def make_rho1_loss(k: float = 0.6, mode: str = "faithful"):
    """A ``loss_fn(logits_BSV, batch) -> (loss, number of targets)`` reading ``target_mask`` and ``ref_nll``.

    Raises:
        ValueError: unknown mode or k outside (0, 1].
    """
    if mode not in RHO_MODES:
        raise ValueError(f"rho mode must be one of {RHO_MODES}, got {mode!r}")
    if not (isinstance(k, (int, float)) and math.isfinite(k) and 0 < k <= 1):
        raise ValueError(f"k must be in (0, 1], got {k!r}")

    def loss_fn(logits_BSV, batch):
        nll = next_token_nll(logits_BSV, batch["tokens"])
        mask = batch["target_mask"][:, 1:].astype(nll.dtype)
        ref = batch["ref_nll"][:, 1:].astype(nll.dtype)
        count = jnp.sum(mask)
        if mode == "faithful":
            sel = top_fraction(jax.lax.stop_gradient(nll) - ref, mask, k)
            return jnp.sum(sel * nll) / jnp.maximum(jnp.asarray(k, nll.dtype) * count, 1.0), count
        score = jax.lax.stop_gradient(jnp.exp(-nll) - jnp.exp(-ref))
        sel = argsort_selection(score, k)
        per_seq = jnp.sum(nll * sel * mask, axis=1) / jnp.maximum(jnp.asarray(k, nll.dtype) * jnp.sum(mask, 1), 1.0)
        return jnp.mean(per_seq), count

    return loss_fn


def reference_nll(ref_logits_BSV: Float[Array, "B S V"], tokens_BS) -> Float[Array, "B S"]:
    """``ref_nll`` for the batch: the reference model's per-token NLL in token space (column 0 = 0)."""
    nll = jax.lax.stop_gradient(next_token_nll(ref_logits_BSV, tokens_BS))
    return jnp.concatenate([jnp.zeros_like(nll[:, :1]), nll], axis=1)
