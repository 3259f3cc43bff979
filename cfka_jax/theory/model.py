"""The single-layer linear-attention transformer of the cFKA theory (spec cfka_stoc.md §2.2).

Raw parameters: an embedding E (M×D, rows are token embeddings e_v = Eᵀx_v, tied input/output) and one head
W_Q, W_K, W_V, W_O (each D×H). For a context x_1..x_L (L tokens: shape letter J) whose last token is the query q,
linear attention (no softmax over positions) gives

    a_l = e_{x_l}ᵀ W_K W_Qᵀ e_q / √H,      h = Σ_l a_l W_Vᵀ e_{x_l},      logit(o | X) = e_oᵀ W_O h,

and the loss is cross-entropy over the object set O only. With the reparameterisation (§2.2)

    Y = E W_O W_Vᵀ Eᵀ   (M×M, output token × input token: the knowledge store),
    Z = E W_K W_Qᵀ Eᵀ / √H   (M×M, Z[s, q] = attention logit from query q to key s),

the logit is logit(o | X) = Σ_l Z[x_l, q] · Y[o, x_l] = Σ_l z_{x_l} y_{o, x_l}, the form every theory function
uses. The spec writes √d; we take d = H, the head width (the usual attention scaling).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float, Int


class YZParams(NamedTuple):
    """Reparameterised parameters; Y[o, s] stores knowledge, Z[s, q] is attention from q to s."""

    Y: Float[Array, "M M"]
    Z: Float[Array, "M M"]


class RawParams(NamedTuple):
    """Raw parameters of the one-head linear-attention layer."""

    E: Float[Array, "M D"]
    W_Q: Float[Array, "D H"]
    W_K: Float[Array, "D H"]
    W_V: Float[Array, "D H"]
    W_O: Float[Array, "D H"]


def init_yz(key, vocab_size: int, *, scale: float = 1e-3, dtype=None) -> YZParams:
    """Small Gaussian init N(0, scale²) for Y and Z (spec §2.9: small init makes the conserved quantity ≈ 0)."""
    dtype = dtype or jax.dtypes.canonicalize_dtype(jnp.float64)
    k_y, k_z = jax.random.split(key)
    shape = (vocab_size, vocab_size)
    return YZParams(scale * jax.random.normal(k_y, shape, dtype), scale * jax.random.normal(k_z, shape, dtype))


def init_raw(key, vocab_size: int, width: int, head_dim: int, *, scale: float = 0.3, dtype=None) -> RawParams:
    """Gaussian init of the raw parameters with standard deviation ``scale``."""
    dtype = dtype or jax.dtypes.canonicalize_dtype(jnp.float64)
    ks = jax.random.split(key, 5)
    shapes = [(vocab_size, width)] + [(width, head_dim)] * 4
    return RawParams(*(scale * jax.random.normal(k, s, dtype) for k, s in zip(ks, shapes)))


def raw_to_yz(raw: RawParams) -> YZParams:
    """Maps raw parameters to (Y, Z): Y = E W_O W_Vᵀ Eᵀ, Z = E W_K W_Qᵀ Eᵀ / √H."""
    head_dim = raw.W_Q.shape[-1]
    Y = raw.E @ raw.W_O @ raw.W_V.T @ raw.E.T
    Z = raw.E @ raw.W_K @ raw.W_Q.T @ raw.E.T / jnp.sqrt(jnp.asarray(head_dim, raw.E.dtype))
    return YZParams(Y, Z)


def _one_hot(tokens_BJ: Int[Array, "B J"], vocab_size: int, dtype) -> Float[Array, "B J M"]:
    return jax.nn.one_hot(tokens_BJ, vocab_size, dtype=dtype)


def attention_weights(Z: Float[Array, "M M"], tokens_BJ: Int[Array, "B J"]) -> Float[Array, "B J"]:
    """z_{x_l} = Z[x_l, q]: linear attention from the query (last token) to every context token.

    Written as one-hot contractions rather than gathers: the gradient is then a dense matmul instead of a
    scatter-add, which keeps ``vmap`` over many configurations fast on CPU.
    """
    x_BJM = _one_hot(tokens_BJ, Z.shape[0], Z.dtype)
    zq_BM = jnp.einsum("mn,bn->bm", Z, x_BJM[:, -1])  # column q of Z for each sample
    return jnp.einsum("bjm,bm->bj", x_BJM, zq_BM)


def yz_logits(params: YZParams, tokens_BJ: Int[Array, "B J"], objects_O: Int[Array, " O"]) -> Float[Array, "B O"]:
    """logit(o | X) = Σ_l Z[x_l, q] · Y[o, x_l] = (Σ_l z_{x_l} x_l)ᵀ Y[o, :] over the object set."""
    x_BJM = _one_hot(tokens_BJ, params.Y.shape[0], params.Y.dtype)
    z_BJ = jnp.einsum("bjm,bm->bj", x_BJM, jnp.einsum("mn,bn->bm", params.Z, x_BJM[:, -1]))
    mass_BM = jnp.einsum("bj,bjm->bm", z_BJ, x_BJM)  # attention mass on each token type
    return jnp.einsum("bm,om->bo", mass_BM, params.Y[objects_O])


def raw_logits(raw: RawParams, tokens_BJ: Int[Array, "B J"], objects_O: Int[Array, " O"]) -> Float[Array, "B O"]:
    """The forward pass written on raw parameters, as a transformer layer computes it."""
    e_BJD = raw.E[tokens_BJ]
    q_BH = e_BJD[:, -1] @ raw.W_Q
    k_BJH = e_BJD @ raw.W_K
    v_BJH = e_BJD @ raw.W_V
    a_BJ = jnp.einsum("bjh,bh->bj", k_BJH, q_BH) / jnp.sqrt(jnp.asarray(raw.W_Q.shape[-1], raw.E.dtype))
    h_BH = jnp.einsum("bj,bjh->bh", a_BJ, v_BJH)
    out_BD = h_BH @ raw.W_O.T
    return out_BD @ raw.E[objects_O].T


def soft_cross_entropy(logits_BO: Float[Array, "B O"], targets_BO: Float[Array, "B O"]) -> Float[Array, ""]:
    """ℓ = −Σ_b Σ_o targets[b, o] · log softmax(logits_b)[o].

    ``targets`` carry the sample weights: the joint Pr(X, o) for the population loss, one-hot/B for a minibatch.
    """
    return -jnp.sum(targets_BO * jax.nn.log_softmax(logits_BO, axis=-1))


def yz_loss(params: YZParams, tokens_BJ, targets_BO, objects_O) -> Float[Array, ""]:
    """Cross-entropy over objects of the (Y, Z) model (spec §2.2)."""
    return soft_cross_entropy(yz_logits(params, tokens_BJ, objects_O), targets_BO)


def raw_loss(raw: RawParams, tokens_BJ, targets_BO, objects_O) -> Float[Array, ""]:
    """Cross-entropy over objects of the raw model."""
    return soft_cross_entropy(raw_logits(raw, tokens_BJ, objects_O), targets_BO)
