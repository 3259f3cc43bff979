"""Closed-form error evolution of Y around the reference optimum (spec cfka_stoc.md §2.4).

Time convention: t counts SGD steps of size η_Y on Y with Z held fixed (η_Z = 0, the limit η_Y ≫ η_Z).
Write e = Y − U on the active block (object rows × context-token columns; O·X numbers, flattened row-major
as e[o, s]). The per-sample gradient is ∇_{y_s} ℓ = z_s δ_s (p − x_o); expanding p around the Bayes
posterior p* gives p − x_o = ξ + H̃_X Σ_{s'∈X} z_{s'} e_{s'} + O(e²) with H̃_X = diag(p*) − p* p*ᵀ and label
noise ξ = p* − x_o. Hence, exactly to first order,

    e(t+1) = (I − η_Y K) e(t) − η_Y g_t,       K = Σ_X Pr(X) J_Xᵀ H̃_X J_X   (the Hessian of ℓ at U),

where (J_X e)_o = Σ_{s∈X} z_s e[o, s] and g_t is the zero-mean minibatch gradient at U. Its covariance is the
Fisher, which equals K at the Bayes optimum, divided by the batch size n. Consequences:

* mean:   E e(t) = (I − η_Y K)^t e(0)  (full batch or minibatch; gradient flow: exp(−η_Y K t) e(0));
* t → ∞: e → P₀ e(0), the projection onto null(K) = the logit-map null space (see ``theory/optimum.py``);
* stationary covariance Σ = (I − η_Y K) Σ (I − η_Y K)ᵀ + (η_Y²/n) K, i.e. along an eigenvector of K with
  eigenvalue λ > 0 the variance is η_Y / (n (2 − η_Y λ)).

The spec's single-token form (§2.4) keeps only the diagonal block of token s,
K_ss = z_s² δ̄_s H̃_s with δ̄_s = Pr(s ∈ X) and H̃_s = E[H̃_X | s ∈ X]; the quoted formula writes the factor as
η_Y z_s δ_s H̃ (z_s to the first power). ``token_block`` returns both forms so the checks can compare them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float
from cfka_jax.theory.model import YZParams, yz_loss
from cfka_jax.theory.predictor import Predictor
from cfka_jax.theory.world import FactWorld, full_batch


def _active(world: FactWorld):
    num_x = world.context_tokens.shape[0]
    return world.objects, num_x


def flatten_error(Y: Float[Array, "M M"], U: Float[Array, "M M"], world: FactWorld) -> Float[Array, " OX"]:
    """e = vec((Y − U)[objects, context tokens]), row-major over (o, s)."""
    objects, num_x = _active(world)
    return (Y - U)[objects, :num_x].reshape(-1)


def unflatten_error(e: Float[Array, "*R OX"], world: FactWorld) -> Float[Array, "*R O X"]:
    objects, num_x = _active(world)
    return e.reshape(*e.shape[:-1], objects.shape[0], num_x)


def error_hessian(world: FactWorld, U: Float[Array, "M M"], Z: Float[Array, "M M"]) -> Float[Array, "OX OX"]:
    """K: the Hessian of the population loss in the active block of Y at Y = U (Z fixed)."""
    objects, num_x = _active(world)

    def loss_of_e(e):
        Y = U.at[objects, :num_x].add(e.reshape(objects.shape[0], num_x))
        return yz_loss(YZParams(Y, Z), *full_batch(world), world.objects)

    return jax.hessian(loss_of_e)(jnp.zeros(objects.shape[0] * num_x, U.dtype))


class Spectrum(NamedTuple):
    """Eigen-decomposition of a symmetric PSD matrix with a rank threshold."""

    evals: Float[Array, " N"]
    evecs: Float[Array, "N N"]
    positive: jax.Array  # boolean mask of eigenvalues counted as > 0

    @property
    def lam_max(self):
        return jnp.max(self.evals)

    @property
    def lam_min_pos(self):
        """λ⁺_min: the smallest eigenvalue above the rank threshold."""
        return jnp.min(jnp.where(self.positive, self.evals, jnp.inf))


def spectrum(K: Float[Array, "N N"], *, rtol: float | None = None) -> Spectrum:
    """eigh of K; eigenvalues below rtol·λ_max count as zero (default rtol = 1e3 · N · eps of the dtype)."""
    evals, evecs = jnp.linalg.eigh(K)
    tol = rtol if rtol is not None else 1e3 * K.shape[0] * jnp.finfo(K.dtype).eps
    return Spectrum(evals, evecs, evals > tol * jnp.max(evals))


def _lift(v: Float[Array, " N"], t: Float[Array, "*R 1"]) -> Float[Array, "*R N"]:
    """Reshapes a vector to broadcast against time arrays with explicit rank (no implicit rank promotion)."""
    return v.reshape((1,) * (t.ndim - 1) + v.shape)


def error_evolution(K, e0, eta_y, *, mode: str = "gd") -> Predictor:
    """Factory for the mean error trajectory e(t) of the linearised dynamics.

    Args:
      K: error Hessian (N×N, N = O·X).
      e0: initial error, shape (N,).
      eta_y: learning rate of Y.
      mode: 'gd' for discrete steps, (I − η_Y K)^t e0; 'flow' for exp(−η_Y K t) e0.

    Returns:
      predict(t) with t of any shape (steps, may be non-integer in 'flow' mode) returning shape t.shape + (N,).
    """
    if mode not in ("gd", "flow"):
        raise ValueError(f"mode must be 'gd' or 'flow', got {mode!r}")
    spec = spectrum(K)
    c0 = spec.evecs.T @ e0
    lam = jnp.where(spec.positive, spec.evals, 0.0)

    def predict(t):
        t = jnp.asarray(t, e0.dtype)[..., None]
        lam_t, c0_t = _lift(lam, t), _lift(c0, t)
        decay = jnp.exp(-eta_y * lam_t * t) if mode == "flow" else (1.0 - eta_y * lam_t) ** t
        return (decay * c0_t) @ spec.evecs.T

    return predict


def null_projection(K, e0):
    """P₀ e0: the t → ∞ limit of ``error_evolution`` (projection on the null space of K)."""
    spec = spectrum(K)
    c0 = spec.evecs.T @ e0
    return (jnp.where(spec.positive, 0.0, 1.0) * c0) @ spec.evecs.T


def error_covariance(K, eta_y, batch_size: int) -> Predictor:
    """Factory for Cov e(t) of minibatch SGD started at e(0) deterministic (linear regime).

    Σ_t = Σ_{j<t} (I − ηK)^j (η²/n) K (I − ηK)^j; along an eigenvector with eigenvalue λ the variance is
    (η²/n) λ (1 − (1 − ηλ)^{2t}) / (1 − (1 − ηλ)²). Returns cov(t) for a scalar step count t.
    """
    spec = spectrum(K)
    lam = jnp.where(spec.positive, spec.evals, 0.0)
    rho2 = (1.0 - eta_y * lam) ** 2
    safe = jnp.where(spec.positive, 1.0 - rho2, 1.0)

    def cov(t):
        var = jnp.where(spec.positive, (eta_y**2 / batch_size) * lam * (1.0 - rho2**t) / safe, 0.0)
        return (spec.evecs * var[None, :]) @ spec.evecs.T

    return cov


def stationary_covariance(K, eta_y, batch_size: int):
    """Σ solving Σ = (I − η K) Σ (I − η K)ᵀ + (η²/n) K: per positive eigenvalue λ, variance η / (n (2 − ηλ))."""
    spec = spectrum(K)
    var = jnp.where(spec.positive, eta_y / (batch_size * (2.0 - eta_y * spec.evals)), 0.0)
    return (spec.evecs * var[None, :]) @ spec.evecs.T


class TokenBlock(NamedTuple):
    """Single-token quantities for token s (spec §2.4)."""

    H_tilde: Float[Array, "O O"]  # E[diag(p*) − p* p*ᵀ | s ∈ X]
    delta: Float[Array, ""]  # Pr(s ∈ X)
    z: Float[Array, ""]  # z_s


def token_block(world: FactWorld, z: Float[Array, " M"], s: int) -> TokenBlock:
    """H̃_s, δ̄_s and z_s for context token s, from the Bayes posterior of every context."""
    post = world.joint / jnp.sum(world.joint, axis=-1, keepdims=True)
    h_COO = jax.vmap(lambda p: jnp.diag(p) - jnp.outer(p, p))(post)
    w_C = jnp.sum(world.joint, axis=-1) * jnp.any(world.contexts == s, axis=-1).astype(world.joint.dtype)
    delta = jnp.sum(w_C)
    return TokenBlock(jnp.einsum("c,cij->ij", w_C, h_COO) / delta, delta, z[s])


def token_factor(block: TokenBlock, eta_y, *, z_power: int) -> Float[Array, "O O"]:
    """One-step contraction I − η_Y z_s^p δ̄_s H̃_s of the single-token form (p = 2 derived, p = 1 quoted)."""
    n = block.H_tilde.shape[0]
    return jnp.eye(n, dtype=block.H_tilde.dtype) - eta_y * block.z**z_power * block.delta * block.H_tilde


def token_error_evolution(block: TokenBlock, e0_s, eta_y, *, z_power: int = 2) -> Predictor:
    """Factory: e_s(t) = (I − η_Y z_s^p δ̄_s H̃_s)^t e_s(0), the single-token product formula with constant H̃."""
    evals, evecs = jnp.linalg.eigh(block.H_tilde)
    rate = eta_y * block.z**z_power * block.delta * evals
    c0 = evecs.T @ e0_s

    def predict(t):
        t = jnp.asarray(t, e0_s.dtype)[..., None]
        return ((1.0 - _lift(rate, t)) ** t * _lift(c0, t)) @ evecs.T

    return predict
