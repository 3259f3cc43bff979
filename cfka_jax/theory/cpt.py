"""Continual fact learning in the theory model: PT on old facts, CPT on new facts (spec cfka_stoc.md §2.7, §2.9).

Worlds. One token layout [subject names | relations | template | query | objects] is shared by an *old* and a
*new* fact world. Each subject s has one object f(s, r) per relation r; object o belongs to exactly one relation
rel(o). A world is a set P of (subject, relation) pairs drawn uniformly, with o = f(s, r):

    Pr(s, r, o) = |P|⁻¹ 1[(s, r) ∈ P, f(s, r) = o] = Pr(o) Pr(s | o) 1[r = rel(o)],

which is exactly naive Bayes because r is a function of o. Every emission is then smoothed,
Pr(v | o) ← (1 − ε) Pr(v | o) + ε / |slot|, and Pr(o) ← (1 − ε) Pr(o) + ε / O, so ln Pr(s | o) is finite and the
reference optimum U (§2.3) exists. The new world holds new subjects (all relations) and *changed* old subjects
whose relation-0 object is replaced (time-variant facts); relation, template and query tokens are shared.

Protocol and time convention. Z is fixed (η_Z = 0, the η_Y ≫ η_Z limit) with attention z_s = Z[s, q] drawn once
per world. PT is taken to convergence: θ* = Y_PT = U_old (an exact minimiser of the old population loss, so the
PT model's posterior is exactly Pr_old(o | X)). CPT runs ``t`` SGD steps of size η_Y on Y of

    ℓ_CPT(Y) = Σ_{X,o} Pr_α(X, o) CE(Y; X, o) + (k/2) Σ_i w_i (Y_i − Y*_i)²,
    Pr_α = α Pr_new + (1 − α) Pr_replay,

which covers every method: naive (α = 1, k = 0), EWC (α = 1, k > 0, w the diagonal Fisher of the old data at
θ*), replay of true old samples (Pr_replay = Pr_old, α < 1) and the generative-replay proxy (Pr_replay =
ρ(X) p_θ*(o | X) with ρ uniform over contexts: the PT model labels contexts it did not necessarily see).
Minibatches draw each sample from Pr_α independently, i.e. a sample is new with probability α.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.shapes import Array, Float, Int
from cfka_jax.theory.model import YZParams, yz_logits
from cfka_jax.theory.optimum import reference_optimum
from cfka_jax.theory.train import SGDConfig, scan_logged
from cfka_jax.theory.world import FactWorld, world_from_emissions


@dataclasses.dataclass(frozen=True)
class ContinualConfig:
    """Sizes of an old/new fact-world pair.

    Attributes:
      num_old_subjects: subjects known after PT.
      num_new_subjects: subjects first seen in CPT.
      num_changed: old subjects whose relation-0 object changes in the new data (≤ num_old_subjects).
      num_relations: R; objects are split evenly between relations.
      objects_per_relation: candidate objects of each relation (≥ 2 so that a fact can change).
      smoothing: ε mixed into every emission and into Pr(o).
      attention: (min, max) of the fixed attention z_s, drawn uniformly per token.
      seed: numpy seed of facts and attention.
    """

    num_old_subjects: int = 4
    num_new_subjects: int = 2
    num_changed: int = 2
    num_relations: int = 2
    objects_per_relation: int = 3
    smoothing: float = 0.1
    attention: tuple[float, float] = (0.6, 1.4)
    seed: int = 0

    def __post_init__(self):
        if self.num_old_subjects < 1 or self.num_new_subjects < 0 or self.num_relations < 1:
            raise ValueError(f"bad subject/relation counts in {self}")
        if not 0 <= self.num_changed <= self.num_old_subjects:
            raise ValueError(f"num_changed must be in [0, num_old_subjects], got {self.num_changed}")
        if self.num_new_subjects + self.num_changed < 1:
            raise ValueError("the new world needs at least one fact")
        if self.objects_per_relation < 2:
            raise ValueError(f"objects_per_relation must be >= 2, got {self.objects_per_relation}")
        if not 0.0 < self.smoothing < 1.0:
            raise ValueError(f"smoothing must be in (0, 1), got {self.smoothing}")
        lo, hi = self.attention
        if not 0.0 < lo <= hi:
            raise ValueError(f"attention range must satisfy 0 < min <= max, got {self.attention}")

    @property
    def num_subjects(self) -> int:
        return self.num_old_subjects + self.num_new_subjects

    @property
    def num_objects(self) -> int:
        return self.num_relations * self.objects_per_relation


class FactSet(NamedTuple):
    """A list of facts: context index into ``world.contexts`` and object index into ``world.objects``."""

    context: Int[Array, " F"]
    obj: Int[Array, " F"]


class ContinualWorlds(NamedTuple):
    """Old and new worlds on one layout, fixed attention and the fact lists used for the metrics.

    Attributes:
      old, new: the two enumerated worlds (same contexts and token ids).
      Z: fixed attention matrix, Z[:, q] = z and zero elsewhere.
      old_facts: every PT fact; new_facts: every CPT fact; changed: the PT facts that CPT overwrites.
      probe_token: token id of the first changed subject (or first new subject), whose column y_s is tracked.
    """

    old: FactWorld
    new: FactWorld
    Z: Float[Array, "M M"]
    old_facts: FactSet
    new_facts: FactSet
    changed: FactSet
    probe_token: int


def _facts(rng, cfg: ContinualConfig):
    """f_old, f_new as (subject, relation) -> object dicts; objects of relation r are r·k .. r·k + k − 1."""
    k, R = cfg.objects_per_relation, cfg.num_relations
    f_old = {(s, r): r * k + int(rng.integers(k)) for s in range(cfg.num_old_subjects) for r in range(R)}
    f_new = {(s, r): r * k + int(rng.integers(k)) for s in range(cfg.num_old_subjects, cfg.num_subjects)
             for r in range(R)}
    for s in range(cfg.num_changed):
        old_o = f_old[(s, 0)]
        f_new[(s, 0)] = (old_o + 1 + int(rng.integers(k - 1))) % k
    return f_old, f_new


def _world_from_facts(facts: dict, cfg: ContinualConfig) -> FactWorld:
    """The smoothed naive-Bayes world of a fact dict (see the module docstring)."""
    N, R, O, eps = cfg.num_subjects, cfg.num_relations, cfg.num_objects, cfg.smoothing
    counts = np.zeros((N, O))
    for (s, _), o in facts.items():
        counts[s, o] += 1.0
    pr_o = (1 - eps) * counts.sum(0) / counts.sum() + eps / O
    names = np.where(counts.sum(0) > 0, counts / np.maximum(counts.sum(0), 1.0), 1.0 / N)
    rel = (np.arange(O)[None, :] // cfg.objects_per_relation == np.arange(R)[:, None]).astype(float)
    emissions = [(1 - eps) * m + eps / m.shape[0] for m in (names, rel, np.ones((1, O)), np.ones((1, O)))]
    return world_from_emissions(pr_o, emissions, ("name", "relation", "template", "query"))


def _fact_set(facts: dict, cfg: ContinualConfig, keys) -> FactSet:
    keys = list(keys)
    return FactSet(jnp.asarray([s * cfg.num_relations + r for s, r in keys], jnp.int32),
                   jnp.asarray([facts[k] for k in keys], jnp.int32))


def make_continual_worlds(cfg: ContinualConfig) -> ContinualWorlds:
    """Builds the old/new world pair, the fixed attention and the fact lists (deterministic in ``cfg.seed``)."""
    rng = np.random.default_rng(cfg.seed)
    f_old, f_new = _facts(rng, cfg)
    old, new = _world_from_facts(f_old, cfg), _world_from_facts(f_new, cfg)
    z = rng.uniform(*cfg.attention, size=old.vocab_size)
    Z = jnp.zeros((old.vocab_size,) * 2, old.joint.dtype).at[:, old.query_token].set(jnp.asarray(z, old.joint.dtype))
    changed_keys = [(s, 0) for s in range(cfg.num_changed)]
    probe = 0 if cfg.num_changed else cfg.num_old_subjects
    return ContinualWorlds(old, new, Z, _fact_set(f_old, cfg, sorted(f_old)), _fact_set(f_new, cfg, sorted(f_new)),
                           _fact_set(f_old, cfg, changed_keys), probe)


def pretrained(worlds: ContinualWorlds) -> YZParams:
    """θ* = (U_old, Z): the converged PT model (an exact minimiser of the old population loss)."""
    return YZParams(reference_optimum(worlds.old, worlds.Z[:, worlds.old.query_token]), worlds.Z)


def with_joint(world: FactWorld, joint: Float[Array, "C O"]) -> FactWorld:
    """``world`` with another joint over the same contexts; pr_o and Pr(s|o) become that joint's marginals.

    The marginals are the "statistics" of the joint (§2.6); the joint itself need not be naive Bayes.
    """
    pr_o = jnp.sum(joint, axis=0)
    num_x = world.context_tokens.shape[0]
    onehot_CX = jax.nn.one_hot(world.contexts, num_x, dtype=joint.dtype).sum(axis=1)
    pr_s = (onehot_CX.T @ joint) / pr_o[None, :]
    pr_s_given_o = jnp.zeros_like(world.pr_s_given_o).at[:num_x].set(pr_s)
    return dataclasses.replace(world, joint=joint, pr_o=pr_o, pr_s_given_o=pr_s_given_o)


def generative_joint(params: YZParams, world: FactWorld) -> Float[Array, "C O"]:
    """Generative-replay proxy: ρ(X) p_θ(o | X), contexts uniform (ρ = 1/C), labels from the model's posterior."""
    probs = jax.nn.softmax(yz_logits(params, world.contexts, world.objects), axis=-1)
    return probs / world.contexts.shape[0]


def mixture_joint(new_joint, replay_joint, alpha) -> Float[Array, "C O"]:
    """Pr_α = α Pr_new + (1 − α) Pr_replay (α is the new-data fraction, spec §4.3)."""
    return alpha * new_joint + (1.0 - alpha) * replay_joint


def fact_prob(params: YZParams, world: FactWorld, facts: FactSet) -> Float[Array, ""]:
    """Mean model probability of the listed facts: (1/F) Σ_f p_θ(o_f | X_f)."""
    logits = yz_logits(params, world.contexts[facts.context], world.objects)
    return jnp.mean(jnp.take_along_axis(jax.nn.softmax(logits, axis=-1), facts.obj[:, None], axis=-1))


def diagonal_fisher(params: YZParams, world: FactWorld) -> Float[Array, "M M"]:
    """Exact empirical diagonal Fisher of the data of ``world`` at ``params``: w = E_{(X,o)~Pr}[(∂_Y CE)²].

    The per-example gradient is ∂CE/∂Y[o', s] = z_s 1[s∈X] (p(o'|X) − 1[o' = o]), so, enumerating contexts,

        w_{o',s} = Σ_X z_s² 1[s∈X] (Pr(X) p(o'|X)² − 2 p(o'|X) Pr(X, o') + Pr(X, o')),

    zero outside the active block (object rows, context-token columns). At a Bayes optimum (θ* = U_old) this is
    z_s² Σ_{X∋s} Pr(X) p(o'|X)(1 − p(o'|X)), the diagonal of the error Hessian K (``dynamics.error_hessian``).
    """
    num_x = world.context_tokens.shape[0]
    z = params.Z[:num_x, world.query_token]
    A2_CX = jax.nn.one_hot(world.contexts, num_x, dtype=world.joint.dtype).sum(axis=1) * (z**2)[None, :]
    probs = jax.nn.softmax(yz_logits(params, world.contexts, world.objects), axis=-1)
    px = jnp.sum(world.joint, axis=-1, keepdims=True)
    per_CO = px * probs**2 - 2.0 * probs * world.joint + world.joint
    w_OX = per_CO.T @ A2_CX
    return jnp.zeros_like(params.Y).at[world.objects, :num_x].set(w_OX)


def fact_support(worlds: ContinualWorlds) -> Float[Array, "M M"]:
    """m[o, s] = 1 where some PT fact puts token s in its context with object o, else 0 (unsmoothed support).

    The coordinates (o, s) with m = 1 are the ones the old facts occupy (spec §2.7: "factual knowledge occupies
    few coordinates of y_s"); for a subject-name token they are its own facts' objects, for a relation token the
    objects of the old facts of that relation, for the template and query tokens every object of an old fact.
    """
    world = worlds.old
    tokens_FL = world.contexts[worlds.old_facts.context]
    objects_FL = jnp.broadcast_to(world.objects[worlds.old_facts.obj][:, None], tokens_FL.shape)
    M = world.vocab_size
    return jnp.zeros((M, M), world.joint.dtype).at[objects_FL.reshape(-1), tokens_FL.reshape(-1)].set(1.0)


def premise_fisher(fisher: Float[Array, "M M"], worlds: ContinualWorlds, delta) -> Float[Array, "M M"]:
    """The EWC weights of the paper's premise (spec §2.7): w^δ = w ⊙ (m + δ (1 − m)), m = ``fact_support``.

    §2.7 bounds the EWC term through min_o w_{o,s} and argues it is ≈ 0 because a fact occupies few coordinates
    of y_s. The exact Fisher of the smoothed worlds does not have that property: at θ* = U_old every weight is
    z_s² Σ_{X∋s} Pr(X) p(o|X)(1 − p(o|X)), which is O(ε) on the facts' own coordinates *and* on the others
    (min_o w_{o,s} / max_o w_{o,s} ≈ 0.1 for ε from 0.1 down to 10⁻³). This keeps the weights of the occupied
    coordinates and scales the others by ``delta``, so min_o w_{o,s} / max_o w_{o,s} ≈ δ · 0.1 for a subject token;
    ``delta`` = 1 gives ``fisher`` back.
    """
    support = fact_support(worlds)
    return fisher * (support + delta * (1.0 - support))


def ewc_penalty(Y, Y_star, fisher, k) -> Float[Array, ""]:
    """(k/2) Σ_i w_i (Y_i − Y*_i)² (spec §2.7, §4.5)."""
    return 0.5 * k * jnp.sum(fisher * (Y - Y_star) ** 2)


class Method(NamedTuple):
    """A CPT method as arrays (so sweeps vmap over it): naive, EWC, replay or generative replay.

    Attributes:
      k: EWC strength (0 = no penalty).
      alpha: new-data fraction (1 = no replay).
      replay_joint: Pr_replay(X, o): ``old.joint`` for true replay, ``generative_joint`` for the proxy.
    """

    k: jax.Array | float
    alpha: jax.Array | float
    replay_joint: Float[Array, "C O"]


def design(worlds: ContinualWorlds) -> Float[Array, "C X"]:
    """A[c, s] = z_s 1[s ∈ X_c], so that logits_CO = A Y_OXᵀ with Y_OX the active block of Y."""
    world = worlds.new
    num_x = world.context_tokens.shape[0]
    onehot_CX = jax.nn.one_hot(world.contexts, num_x, dtype=worlds.Z.dtype).sum(axis=1)
    return onehot_CX * worlds.Z[:num_x, world.query_token][None, :]


def active_block(Y: Float[Array, "M M"], worlds: ContinualWorlds) -> Float[Array, "O X"]:
    """Y_OX = Y[objects, context tokens]: the only entries the logits depend on."""
    return Y[worlds.new.objects, : worlds.new.context_tokens.shape[0]]


def embed_block(Y: Float[Array, "M M"], Y_OX: Float[Array, "O X"], worlds: ContinualWorlds) -> Float[Array, "M M"]:
    """Y with its active block replaced by ``Y_OX``."""
    return Y.at[worlds.new.objects, : Y_OX.shape[1]].set(Y_OX)


def cpt_grad(Y_OX, joint_CO, A_CX, Ystar_OX, W_OX, k) -> Float[Array, "O X"]:
    """∇ of Σ_{X,o} q(X, o) CE + (k/2) Σ w (Y − Y*)² on the active block, for any weights q (population or batch).

    ∇ = Σ_X A[X, s] (q(X) p(o|X) − q(X, o)) + k w (Y − Y*): the same as ``jax.grad`` of ``yz_loss`` (tested).
    """
    probs_CO = jax.nn.softmax(A_CX @ Y_OX.T, axis=-1)
    resid_CO = jnp.sum(joint_CO, axis=-1, keepdims=True) * probs_CO - joint_CO
    return resid_CO.T @ A_CX + k * W_OX * (Y_OX - Ystar_OX)


def batch_weights(joint_CO, key, batch_size: int | None) -> Float[Array, "C O"]:
    """The population joint (``batch_size`` None) or the empirical weights counts/B of B i.i.d. draws from it.

    Same distribution as ``world.sample_batch``, written as a (context, object) histogram so that the step is
    dense over the C enumerated contexts.
    """
    if batch_size is None:
        return joint_CO
    cdf = jnp.cumsum(joint_CO.reshape(-1))
    u = jax.random.uniform(key, (batch_size,), dtype=joint_CO.dtype) * cdf[-1]
    draws = jnp.minimum(jnp.searchsorted(cdf, u, side="right"), joint_CO.size - 1)  # inverse-CDF sampling
    counts = jnp.bincount(draws, length=joint_CO.size).astype(joint_CO.dtype)
    return counts.reshape(joint_CO.shape) / batch_size


class Trace(NamedTuple):
    """Observations along a CPT run (leading axis R = steps/log_every + 1)."""

    old_prob: Float[Array, " R"]
    new_prob: Float[Array, " R"]
    changed_prob: Float[Array, " R"]
    probe_column: Float[Array, "R O"]


def _mean_fact_prob(probs_CO, facts: FactSet):
    return jnp.mean(probs_CO[facts.context, facts.obj])


def observe_block(Y_OX, worlds: ContinualWorlds, A_CX) -> Trace:
    """Old-, new- and overwritten-fact probabilities and the probe token's column y_s (object rows)."""
    probs = jax.nn.softmax(A_CX @ Y_OX.T, axis=-1)
    return Trace(_mean_fact_prob(probs, worlds.old_facts), _mean_fact_prob(probs, worlds.new_facts),
                 _mean_fact_prob(probs, worlds.changed), Y_OX[:, worlds.probe_token])


def run_cpt(worlds: ContinualWorlds, method: Method, key, *, eta_y, cfg: SGDConfig, Y0=None, fisher=None):
    """CPT from θ* (or ``Y0``) with Z fixed; returns (final Y, Trace).

    Args:
      worlds: the world pair.
      method: k, α and replay joint (arrays; vmap over them for sweeps).
      key: PRNG key for minibatches.
      eta_y: SGD step size on Y (may be an array).
      cfg: steps, batch size (None = population gradient descent) and logging period.
      Y0: start of CPT (default the PT optimum U_old).
      fisher: EWC weights (default ``diagonal_fisher`` of the old data at θ*).
    """
    theta = pretrained(worlds)
    fisher = diagonal_fisher(theta, worlds.old) if fisher is None else fisher
    A_CX, W_OX, Ystar_OX = design(worlds), active_block(fisher, worlds), active_block(theta.Y, worlds)
    joint = mixture_joint(worlds.new.joint, method.replay_joint, method.alpha)
    start = theta.Y if Y0 is None else Y0

    def step(Y_OX, k_):
        q = batch_weights(joint, k_, cfg.batch_size)
        return Y_OX - eta_y * cpt_grad(Y_OX, q, A_CX, Ystar_OX, W_OX, method.k)

    final, trace = scan_logged(step, active_block(start, worlds), jax.random.split(key, cfg.steps), cfg=cfg,
                               observe=lambda Y_OX: observe_block(Y_OX, worlds, A_CX))
    return embed_block(start, final, worlds), trace
