"""The reference optimum U and the identifiable part of Y (spec cfka_stoc.md §2.3).

    U = Σ_{o,s} (1/a_s) [ln Pr(s|o) + L⁻¹ ln Pr(o)] x_o x_sᵀ,      a_s = z_s = Z[s, q].

For any context X (L tokens, query included), Σ_{s∈X} a_s U[o, s] = ln Pr(o) + Σ_{s∈X} ln Pr(s|o) = ln Pr(o, X),
the naive-Bayes log joint, so softmax over o of the model's logits at Y = U is the Bayes posterior Pr(o | X).

U is *a* reference optimum: for fixed Z the loss depends on Y only through the logit map
Y ↦ (Σ_{s∈X} z_s Y[o, s])_{X,o} modulo per-context constants. Its null space contains the per-column shifts
Y[:, s] += c_s (the freedom the spec names) and, in worlds with two or more slots, transfers between slots
Y[o, s] += d_o / z_s, Y[o, s'] −= d_o / z_{s'} for s, s' in different slots (every context holds exactly one
token per slot). Training therefore converges to U only modulo that whole null space; ``logit_gap`` measures
distance in that quotient and ``column_centred_distance`` measures distance modulo column shifts alone.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float
from cfka_jax.theory.model import YZParams, yz_logits
from cfka_jax.theory.world import FactWorld, log_prior_terms


def query_attention(Z: Float[Array, "M M"], world: FactWorld) -> Float[Array, " M"]:
    """a_s = Z[s, q] for every token s (the single query q of the world)."""
    return Z[:, world.query_token]


def bayes_posterior(world: FactWorld) -> Float[Array, "C O"]:
    """Pr(o | X) for every enumerated context."""
    return world.joint / jnp.sum(world.joint, axis=-1, keepdims=True)


def reference_optimum(world: FactWorld, z: Float[Array, " M"]) -> Float[Array, "M M"]:
    """U[o, s] = v_{o,s} / z_s on object rows and context-token columns; zero elsewhere.

    Args:
      world: the fact world (needs Pr(s|o) > 0, i.e. ``smoothing > 0``, for a finite U).
      z: attention weights a_s = Z[s, q]; must be non-zero on context tokens.

    Returns:
      U as an M×M matrix in the layout of Y (rows = output tokens, columns = input tokens).
    """
    v_MO = log_prior_terms(world)
    num_x = world.context_tokens.shape[0]
    u_OX = (v_MO[:num_x] / z[:num_x, None]).T
    return jnp.zeros((world.vocab_size, world.vocab_size), v_MO.dtype).at[world.objects, :num_x].set(u_OX)


def logit_gap(Y: Float[Array, "M M"], U: Float[Array, "M M"], Z: Float[Array, "M M"], world: FactWorld):
    """max_X [max_o − min_o] of (logit_Y − logit_U)(o | X): zero iff Y ≡ U modulo the logit-map null space."""
    diff = yz_logits(YZParams(Y - U, Z), world.contexts, world.objects)
    return jnp.max(jnp.max(diff, axis=-1) - jnp.min(diff, axis=-1))


def column_centred_distance(Y: Float[Array, "M M"], U: Float[Array, "M M"], world: FactWorld):
    """‖P(Y − U)‖_F over object rows and context columns, P removing each column's mean over objects.

    Zero iff Y = U up to per-column shifts only.
    """
    num_x = world.context_tokens.shape[0]
    d = (Y - U)[world.objects, :num_x]
    return jnp.linalg.norm(d - jnp.mean(d, axis=0, keepdims=True))


def posterior_kl(params: YZParams, world: FactWorld):
    """E_X KL(Pr(·|X) ‖ model(·|X)): zero at any optimum (it is the excess population loss)."""
    post = bayes_posterior(world)
    logp = jax.nn.log_softmax(yz_logits(params, world.contexts, world.objects), axis=-1)
    weight = jnp.sum(world.joint, axis=-1)
    return jnp.sum(weight * jnp.sum(post * (jnp.log(post) - logp), axis=-1))
