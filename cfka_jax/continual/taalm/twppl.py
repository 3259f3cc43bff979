"""Token-weighted losses of TAALM (spec taalm.md §2, §4.3 step 5), pure functions of logits.

Token space. Every per-token array here is ``B S`` and indexed by the *target* token: column s (s ≥ 1) refers to
predicting ``tokens[:, s]`` from ``tokens[:, :s]``; column 0 is ignored. In the spec's notation (targets
j = 0 … L−2, ``w_j`` the weight of ``x_{j+1}``) column s holds ``w_{s−1}``. The Train-Attention weight of token s
is σ(head(h^φ_s)) — φ's state *at* the weighted token — so φ's output needs no shift in this layout.

TWPPL (reference ``TAALM.py`` L255–327), per sequence b::

    TWPPL_b = Σ_s w[b,s]·m[b,s]·nll[b,s] / (Σ_s w[b,s]·m[b,s] + 1e-6),      loss = mean_b TWPPL_b

— the unweighted mean over sequences, weights never normalised, the 1e-6 only in the denominator (all-zero
weights give loss 0 and zero gradient). The target mask ``m`` is ``a[s−1]·a[s]`` by default (quirk #7: the
reference uses the input-position mask ``a[s−1]``, which keeps one pad target per right-padded row;
:func:`target_mask` with ``reference=True``).

L_solve (the outer objective, §4.3 step 5): ``Σ_s y·nll / (Σ_s y + 1e-6)`` per sequence over the object-token
mask y of the probe, mean over sequences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float, Int
from cfka_jax.train.losses import next_token_nll

TWPPL_EPS = 1e-6
"""The reference's denominator epsilon (TWPPL and L_solve)."""


def target_mask(attention_mask_BS: Int[Array, "B S"], *, reference: bool = False) -> Float[Array, "B S"]:
    """The TWPPL target mask in token space (column 0 = 0).

    Args:
        attention_mask_BS: 1 for real tokens, 0 for padding.
        reference: the reference's input-position mask ``a[s−1]`` (a right-padded row keeps its first pad as a
            target); default the project's ``a[s−1]·a[s]``.
    """
    a = attention_mask_BS.astype(jnp.float32)
    m = a[:, :-1] if reference else a[:, :-1] * a[:, 1:]
    return jnp.concatenate([jnp.zeros_like(a[:, :1]), m], axis=1)


def _shifted(x_BS: Float[Array, "B S"], dtype) -> Float[Array, "B S-1"]:
    return x_BS[:, 1:].astype(dtype)


def twppl(
    logits_BSV: Float[Array, "B S V"],
    tokens_BS: Int[Array, "B S"],
    weights_BS: Float[Array, "B S"],
    mask_BS: Float[Array, "B S"],
    *,
    eps: float = TWPPL_EPS,
) -> Float[Array, ""]:
    """Mean over sequences of ``Σ w·m·nll / (Σ w·m + eps)`` (module docstring); gradients flow into ``weights``."""
    nll = next_token_nll(logits_BSV, tokens_BS)
    wm = _shifted(weights_BS, nll.dtype) * _shifted(mask_BS, nll.dtype)
    per_seq = jnp.sum(wm * nll, axis=1) / (jnp.sum(wm, axis=1) + jnp.asarray(eps, nll.dtype))
    return jnp.mean(per_seq)


def object_nll(
    logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"], y_BS: Float[Array, "B S"], *,
    eps: float = TWPPL_EPS
) -> Float[Array, ""]:
    """L_solve: mean over sequences of the mean NLL over the object tokens ``y`` (``Σ y·nll / (Σ y + eps)``)."""
    return twppl(logits_BSV, tokens_BS, jnp.ones_like(y_BS), y_BS, eps=eps)


def known_mask(logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"], mask_BS: Float[Array, "B S"]):
    """Known-masking (TA validation only, §2): ``m ← m · 1[argmax p ≠ target]``, without gradient."""
    pred_BS = jnp.argmax(jax.lax.stop_gradient(logits_BSV[:, :-1]), axis=-1).astype(tokens_BS.dtype)
    unknown = (pred_BS != tokens_BS[:, 1:]).astype(mask_BS.dtype)
    return mask_BS * jnp.concatenate([jnp.zeros_like(mask_BS[:, :1]), unknown], axis=1)


def twppl_loss(logits_BSV: Float[Array, "B S V"], batch: dict) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """``loss_fn`` for ``train.step.make_train_step``: TWPPL with ``batch['token_weights']`` (``B S``, token
    space) over ``batch['target_mask']``; returns ``(loss, number of targets)``."""
    mask = batch["target_mask"].astype(jnp.float32)
    loss = twppl(logits_BSV, batch["tokens"], batch["token_weights"], mask)
    return loss, jnp.sum(mask[:, 1:])
