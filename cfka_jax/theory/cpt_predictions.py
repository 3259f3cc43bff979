"""Predictions for continual training in the theory model (spec cfka_stoc.md §2.4, §2.6, §2.7).

Conventions as in ``theory/cpt.py``: Z fixed, t counts SGD steps of size η_Y on Y, CPT starts at
θ* = U_old, and the objective is ℓ_{k,α}(Y) = CE under Pr_α + (k/2) Σ w (Y − Y*)², with e the active block of Y
(object rows × context-token columns, flattened as in ``dynamics.flatten_error``).

What is closed form and what is computed:

* naive (α = 1, k = 0): the limit posterior is exactly Pr_new(o | X) (the new world is naive Bayes), so the
  old-fact probability at convergence is (1/F) Σ_f Pr_new(o_f | X_f) — closed form (``naive_old_prob``);
* EWC and replay: the convergence point is the minimiser of ℓ_{k,α}. For k > 0 it is unique (w > 0 everywhere
  when ε > 0); for k = 0 it is unique modulo the logit-map null space, and gradient descent keeps the null-space
  component of its start, so the limit is the minimiser on Y_start + range(K). For k > 0 there is no closed form
  (a regularised logistic regression): ``minimise`` computes it by damped Newton with a pseudo-inverse (which,
  like GD, never moves the null-space component), to float64 precision. Its first-order dependence on k is
  closed form (``ewc_first_order_shift``); the curvature the penalty adds is bounded below by k · min_i w_i
  (``ewc_curvature_floor``), which is where min_o w_{o,s} enters the rate;
* the replay point satisfies the moment conditions Σ_X Pr_α(X) 1[s∈X] p(o|X) = Pr_α(s, o) ("the optimum of the
  α-mixture statistics"). ``mixture_nb_optimum`` is the closed form U (§2.3) built from those statistics as if
  the mixture were naive Bayes (§2.6). It is exact whenever the mixture *is* naive Bayes — at α ∈ {0, 1}, and
  for every α when old and new worlds differ in one slot's emissions only, as ``make_continual_worlds`` builds
  them (Pr_α(s, r, o) = Pr(r|o) Pr_α(s, o)); it is not exact otherwise (e.g. the generative-replay proxy);
* rates and fluctuations are exact in the linearisation at the convergence point: the error obeys
  e(t+1) = (I − η H) e(t) − η g_t with H the Hessian of ℓ_{k,α} there and g_t the zero-mean minibatch gradient
  noise with covariance G/n (G = per-sample gradient covariance, = H only at a Bayes optimum).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float
from cfka_jax.theory.cpt import (ContinualWorlds, FactSet, active_block, cpt_grad, design, fact_prob,
                                       with_joint)
from cfka_jax.theory.dynamics import spectrum
from cfka_jax.theory.model import YZParams, yz_logits
from cfka_jax.theory.optimum import bayes_posterior, reference_optimum
from cfka_jax.theory.predictor import Predictor


def _model_probs(Y, worlds: ContinualWorlds) -> Float[Array, "C O"]:
    return jax.nn.softmax(yz_logits(YZParams(Y, worlds.Z), worlds.new.contexts, worlds.new.objects), axis=-1)


def objective_value(worlds: ContinualWorlds, joint, Y_star, fisher, k, Y) -> Float[Array, ""]:
    """ℓ_{k,α}(Y) = −Σ_{X,o} Pr_α(X,o) ln p_Y(o|X) + (k/2) Σ w (Y − Y*)²."""
    logits = yz_logits(YZParams(Y, worlds.Z), worlds.new.contexts, worlds.new.objects)
    return -jnp.sum(joint * jax.nn.log_softmax(logits, axis=-1)) + 0.5 * k * jnp.sum(fisher * (Y - Y_star) ** 2)


def objective_grad(worlds: ContinualWorlds, joint, Y_star, fisher, k, Y) -> Float[Array, " N"]:
    """∇_e ℓ_{k,α} = Σ_X A[X, s] (Pr_α(X) p_Y(o|X) − Pr_α(X, o)) + k w (Y − Y*), flattened (o, s)."""
    g = cpt_grad(active_block(Y, worlds), joint, design(worlds), active_block(Y_star, worlds),
                 active_block(fisher, worlds), k)
    return g.reshape(-1)


def objective_hessian(worlds: ContinualWorlds, joint, Y_star, fisher, k, Y) -> Float[Array, "N N"]:
    """H = ∇²ℓ_{k,α} = Σ_X Pr_α(X) (H̃_X ⊗ A_X A_Xᵀ) + k diag(w), H̃_X = diag(p) − p pᵀ at p_Y(·|X)."""
    A = design(worlds)
    probs = _model_probs(Y, worlds)
    px = jnp.sum(joint, axis=-1)
    h_COO = jax.vmap(lambda p: jnp.diag(p) - jnp.outer(p, p))(probs)
    H = jnp.einsum("c,cab,cs,ct->asbt", px, h_COO, A, A)
    n = A.shape[1] * probs.shape[1]
    return H.reshape(n, n) + k * jnp.diag(active_block(fisher, worlds).reshape(-1))


def minimise(worlds: ContinualWorlds, joint, Y_star, fisher, k, start, *, guess=None, iters: int = 40):
    """The point gradient descent on ℓ_{k,α} from ``start`` converges to (computed, float64-exact).

    Newton from ``guess`` (default ``start``): direction d = −H⁺ ∇ℓ, step 2⁻ʲ for the smallest j ≤ 40 with
    ℓ(Y + 2⁻ʲ d) ≤ ℓ(Y) + 10⁻⁴ 2⁻ʲ ∇ℓ·d, and full steps once the squared Newton decrement −∇ℓ·d < 10⁻⁶
    (quadratic convergence; there ℓ differences are below rounding). For k > 0 the minimiser is unique. For
    k = 0 it is unique modulo the logit-map null space, and GD never moves the null-space component of its
    start; the result's null component is therefore replaced by that of ``start`` (exact: ℓ is constant along
    the null space).
    A good ``guess`` (e.g. ``mixture_nb_optimum``) makes the solve a few steps.
    """
    Y = _newton(worlds, joint, Y_star, fisher, k, start if guess is None else guess, iters)
    H = objective_hessian(worlds, joint, Y_star, fisher, 0.0 * k, Y)
    spec = spectrum(H)
    diff = active_block(start - Y, worlds).reshape(-1)
    null_part = spec.evecs @ (jnp.where(spec.positive, 0.0, 1.0) * (spec.evecs.T @ diff))
    shape = active_block(Y, worlds).shape
    fix = jnp.where(k == 0.0, 1.0, 0.0).astype(Y.dtype) * null_part.reshape(shape)
    return Y.at[worlds.new.objects, : shape[1]].add(fix)


def _newton(worlds, joint, Y_star, fisher, k, Y0, iters):
    args = (worlds, joint, Y_star, fisher, k)
    steps = 0.5 ** jnp.arange(41, dtype=Y0.dtype)
    shape = active_block(Y0, worlds).shape

    def embed(Y, d):
        return Y.at[worlds.new.objects, : shape[1]].add(d.reshape(shape))

    def newton(Y, _):
        g, spec = objective_grad(*args, Y), spectrum(objective_hessian(*args, Y))
        inv = jnp.where(spec.positive, 1.0 / jnp.where(spec.positive, spec.evals, 1.0), 0.0)
        d = -(spec.evecs @ (inv * (spec.evecs.T @ g)))
        f0 = objective_value(*args, Y)
        f_t = jax.vmap(lambda t: objective_value(*args, embed(Y, t * d)))(steps)
        ok = f_t <= f0 + 1e-4 * steps * (g @ d)
        t = jnp.where(jnp.any(ok), steps[jnp.argmax(ok)], 0.0)
        t = jnp.where(-(g @ d) < 1e-6, 1.0, t)  # Newton decrement² < 1e-6: full steps (ℓ differences drown in rounding)
        return embed(Y, t * d), None

    Y, _ = jax.lax.scan(newton, Y0, None, length=iters)
    return Y


def ewc_curvature_floor(worlds: ContinualWorlds, fisher, k) -> Float[Array, ""]:
    """k · min_i w_i over the active block: λ_min(H_k) ≥ this, since H_k = H_0 + k diag(w) with H_0 ⪰ 0.

    In the null directions of H_0 (column shifts, slot transfers) the penalty is the only curvature, so the EWC
    rate there is set by k times the Fisher weights along them; for one token column the floor is
    k · min_o w_{o,s} (spec §2.7).
    """
    return k * jnp.min(active_block(fisher, worlds))


class Rate(NamedTuple):
    """Linearised convergence at a fixed point: per-step contraction of the slowest non-null mode."""

    lam_min_pos: Float[Array, ""]
    lam_max: Float[Array, ""]
    log_rate: Float[Array, ""]  # −ln|1 − η λ⁺_min| per step: ‖e(t)‖ ∝ exp(−log_rate · t) at late times


def linear_rate(H, eta_y) -> Rate:
    """Asymptotic rate of e(t+1) = (I − η H) e(t) (assumes η λ_max < 1 so the slowest mode is λ⁺_min)."""
    spec = spectrum(H)
    return Rate(spec.lam_min_pos, spec.lam_max, -jnp.log(jnp.abs(1.0 - eta_y * spec.lam_min_pos)))


def naive_old_prob(worlds: ContinualWorlds, facts: FactSet) -> Float[Array, ""]:
    """Closed form: old-fact probability after naive CPT converges, (1/F) Σ_f Pr_new(o_f | X_f)."""
    post = bayes_posterior(worlds.new)
    return jnp.mean(post[facts.context, facts.obj])


def mixture_nb_optimum(worlds: ContinualWorlds, joint) -> YZParams:
    """Closed-form candidate: U (§2.3) of the naive-Bayes world with the mixture's marginals Pr_α(o), Pr_α(s|o)."""
    stats = with_joint(worlds.new, joint)
    return YZParams(reference_optimum(stats, worlds.Z[:, worlds.new.query_token]), worlds.Z)


def moment_residual(Y, worlds: ContinualWorlds, joint) -> Float[Array, ""]:
    """max_{s,o} |Σ_X Pr_α(X) 1[s∈X] p_Y(o|X) − Pr_α(s, o)|: zero iff Y matches the mixture statistics."""
    world = worlds.new
    num_x = world.context_tokens.shape[0]
    probs = _model_probs(Y, worlds)
    onehot_CX = jax.nn.one_hot(world.contexts, num_x, dtype=joint.dtype).sum(axis=1)
    model = onehot_CX.T @ (jnp.sum(joint, axis=-1, keepdims=True) * probs)
    return jnp.max(jnp.abs(model - onehot_CX.T @ joint))


def gradient_covariance(worlds: ContinualWorlds, joint, Y) -> Float[Array, "N N"]:
    """G = Cov_{(X,o)~Pr_α}[∇_e CE] on the active block, exact by enumeration (G = K at a Bayes optimum).

    The per-sample gradient of CE at (X, o) is g[o', s] = A[X, s] (p_Y(o'|X) − 1[o' = o]).
    """
    probs = _model_probs(Y, worlds)
    A = design(worlds)
    resid_COO = probs[:, None, :] - jnp.eye(probs.shape[-1], dtype=probs.dtype)[None, :, :]  # [c, o_true, o']
    g_COOX = resid_COO[..., None] * A[:, None, None, :]
    g_PN = g_COOX.reshape(joint.size, -1)
    w = joint.reshape(-1)
    mean = w @ g_PN
    return (g_PN * w[:, None]).T @ g_PN - jnp.outer(mean, mean)


def sgd_covariance(H, G, eta_y, batch_size: int) -> Predictor:
    """Factory: Cov e(t) of e(t+1) = (I − ηH) e(t) − η g_t, Cov g = G/n, from e(0) = 0.

    In the eigenbasis of H (a_i = 1 − η λ_i): Σ̃_ij(t) = (η²/n) G̃_ij (1 − (a_i a_j)^t) / (1 − a_i a_j); null modes
    carry no noise (G̃ vanishes there). t → ∞ gives the stationary Lyapunov solution, per mode η G̃_ii /
    (n λ_i (2 − η λ_i)) — which is ``dynamics.stationary_covariance`` when G = H.
    """
    spec = spectrum(H)
    a = 1.0 - eta_y * jnp.where(spec.positive, spec.evals, 0.0)
    aa = a[:, None] * a[None, :]
    mask = spec.positive[:, None] & spec.positive[None, :]
    Gt = spec.evecs.T @ G @ spec.evecs
    denom = jnp.where(mask, 1.0 - aa, 1.0)

    def at(t):  # scalar t
        growth = jnp.where(mask, (1.0 - aa**t) / denom, 0.0)
        return spec.evecs @ (eta_y**2 / batch_size * Gt * growth) @ spec.evecs.T

    def predict(t):
        t = jnp.asarray(t, H.dtype)
        return jax.vmap(at)(t.reshape(-1)).reshape(t.shape + H.shape)

    return predict


def token_block_indices(worlds: ContinualWorlds, s: int) -> jax.Array:
    """Flat indices (o, s) of token s's column y_s inside the active block."""
    num_x = worlds.new.context_tokens.shape[0]
    return jnp.arange(worlds.new.objects.shape[0]) * num_x + s


def token_curvature(worlds: ContinualWorlds, joint, Y, s: int) -> Float[Array, "O O"]:
    """H̃_s = E_{Pr_α}[diag(p) − p pᵀ | s ∈ X] at the model's posterior p = p_Y(·|X) (spec §2.4, mixture form)."""
    world = worlds.new
    probs = _model_probs(Y, worlds)
    h_COO = jax.vmap(lambda p: jnp.diag(p) - jnp.outer(p, p))(probs)
    w_C = jnp.sum(joint, axis=-1) * jnp.any(world.contexts == s, axis=-1).astype(joint.dtype)
    return jnp.einsum("c,cij->ij", w_C, h_COO) / jnp.sum(w_C)


def old_prob_at(worlds: ContinualWorlds, Y, facts: FactSet | None = None) -> Float[Array, ""]:
    """Old-fact probability of the model (Y, Z) (all PT facts unless ``facts`` is given)."""
    return fact_prob(YZParams(Y, worlds.Z), worlds.old, worlds.old_facts if facts is None else facts)


def ewc_first_order_shift(worlds: ContinualWorlds, Y_star, fisher, Y_naive, facts: FactSet) -> Float[Array, ""]:
    """Δ'(0): d/dk of the old-fact probability at the EWC convergence point, at k = 0⁺ (closed form).

    As k → 0⁺ the EWC minimiser tends to θ₀₊ = argmin_{θ ∈ θ_naive + null} ‖θ − θ*‖²_W (the W-closest naive
    optimum, same logits as θ_naive), and dθ_k/dk = −H₀⁺ W (θ₀₊ − θ*) with H₀ the new-data Hessian. Hence
    Δ(k) = P_old(θ_k) − P_old(θ_naive) = k Δ'(0) + O(k²): EWC moves the convergence point at first order in k
    unless W (θ₀₊ − θ*) lies in the null space, which needs w ≈ 0 on the moved coordinates (not only min_o w).
    """
    joint = worlds.new.joint
    spec = spectrum(objective_hessian(worlds, joint, Y_star, fisher, 0.0, Y_naive))
    null = spec.evecs * jnp.where(spec.positive, 0.0, 1.0)[None, :]
    w = active_block(fisher, worlds).reshape(-1)
    e_star = active_block(Y_star - Y_naive, worlds).reshape(-1)
    c = jnp.linalg.lstsq((null.T * w[None, :]) @ null, (null.T * w[None, :]) @ e_star)[0]
    d = null @ c - e_star
    inv = jnp.where(spec.positive, 1.0 / jnp.where(spec.positive, spec.evals, 1.0), 0.0)
    dtheta = -(spec.evecs @ (inv * (spec.evecs.T @ (w * d))))
    shape = active_block(Y_naive, worlds).shape
    grad_p = jax.grad(lambda e: old_prob_at(worlds, Y_naive.at[worlds.new.objects, : shape[1]].add(e.reshape(shape)),
                                            facts))(jnp.zeros_like(w))
    return grad_p @ dtheta
