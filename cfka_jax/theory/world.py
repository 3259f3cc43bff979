"""Fact worlds for the single-layer theory model (spec cfka_stoc.md §2.1, §2.9).

A world has objects O and a context of L *slots*. Slot k owns its own token vocabulary (subject-name tokens,
relation tokens, template tokens, and one final query token), so a token type appears in a context at most once.
Samples follow the naive-Bayes generative model

    o ~ Pr(o),      x_k | o ~ Pr(x_k | o)   independently for every slot k,

which is exactly the model class whose Bayes posterior the reference optimum U (§2.3) represents:
ln Pr(o | X) = ln Pr(o) + Σ_k ln Pr(x_k | o) + const(X). A subject-name token co-occurs with a random subset of
the objects whose size is set by the slot's ``breadth``: narrow breadth = exclusive, low-diversity tokens; full
breadth = generic tokens. Relation tokens partition the objects (each object belongs to one relation). The
``smoothing`` mass gives every (token, object) pair positive probability, so ln Pr(s|o) is finite.

Token ids are laid out slot by slot, then objects: [slot 0 | slot 1 | ... | slot L-1 | objects]; M tokens in all.
The world is enumerated exactly: every context X (C of them) with its joint Pr(X, o), so full-batch training is
training on the population loss. Worlds are generated with numpy from an integer seed and are deterministic.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.shapes import Array, Float, Int

SLOT_KINDS = ("name", "relation", "template", "query")


@dataclasses.dataclass(frozen=True)
class SlotSpec:
    """One context slot.

    Attributes:
      kind: one of ``SLOT_KINDS``.
      size: number of token types in the slot (template and query slots are single tokens).
      breadth: (min, max) fraction of objects that each token co-occurs with ('name' slots only).
    """

    kind: str
    size: int
    breadth: tuple[float, float] = (1.0, 1.0)

    def __post_init__(self):
        if self.kind not in SLOT_KINDS:
            raise ValueError(f"slot kind {self.kind!r} not in {SLOT_KINDS}")
        if self.size < 1:
            raise ValueError(f"slot size must be >= 1, got {self.size}")
        if self.kind in ("template", "query") and self.size != 1:
            raise ValueError(f"{self.kind} slots hold exactly one token, got size {self.size}")
        lo, hi = self.breadth
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"breadth must satisfy 0 < min <= max <= 1, got {self.breadth}")


@dataclasses.dataclass(frozen=True)
class WorldConfig:
    """Sizes and skew of a fact world.

    Attributes:
      num_objects: |O|.
      slots: the context slots in order; the last one must be the single query slot.
      object_skew: Zipf exponent of Pr(o) ∝ (rank+1)^(-skew); 0 gives uniform objects.
      smoothing: probability mass mixed into every (token, object) pair of a slot, in [0, 1).
      seed: numpy seed; the world is a deterministic function of the config.
      max_contexts: refuse worlds whose exact enumeration would exceed this many contexts.
    """

    num_objects: int = 5
    slots: tuple[SlotSpec, ...] = (
        SlotSpec("name", 4, (0.2, 0.6)),
        SlotSpec("name", 3, (0.3, 1.0)),
        SlotSpec("template", 1),
        SlotSpec("query", 1),
    )
    object_skew: float = 0.5
    smoothing: float = 0.05
    seed: int = 0
    max_contexts: int = 200_000

    def __post_init__(self):
        if self.num_objects < 2:
            raise ValueError(f"a world needs >= 2 objects, got {self.num_objects}")
        if not self.slots or self.slots[-1].kind != "query":
            raise ValueError("the last slot must be the query slot (kind='query')")
        if sum(s.kind == "query" for s in self.slots) != 1:
            raise ValueError("exactly one query slot is allowed (the theory's z_s = Z[s, q] needs one query)")
        if not 0.0 <= self.smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {self.smoothing}")
        if self.object_skew < 0:
            raise ValueError(f"object_skew must be >= 0, got {self.object_skew}")
        for s in self.slots:
            if s.kind == "relation" and s.size > self.num_objects:
                raise ValueError(f"{s.size} relations cannot partition {self.num_objects} objects")
        if self.num_contexts > self.max_contexts:
            raise ValueError(f"{self.num_contexts} contexts exceed max_contexts={self.max_contexts}")

    @property
    def context_length(self) -> int:
        """L, the number of context tokens (query included)."""
        return len(self.slots)

    @property
    def num_context_tokens(self) -> int:
        """X, the number of non-object token types."""
        return sum(s.size for s in self.slots)

    @property
    def vocab_size(self) -> int:
        """M = X + O."""
        return self.num_context_tokens + self.num_objects

    @property
    def num_contexts(self) -> int:
        """C = Π_k |slot k|."""
        return int(np.prod([s.size for s in self.slots]))


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["contexts", "joint", "pr_o", "pr_s_given_o", "objects", "context_tokens"],
    meta_fields=["token_kinds", "query_token"],
)
@dataclasses.dataclass(frozen=True)
class FactWorld:
    """An enumerated fact world (a pytree; ``token_kinds`` and ``query_token`` are static).

    Attributes:
      contexts: every context, token ids, the query last.
      joint: Pr(X, o); sums to 1.
      pr_o: Pr(o).
      pr_s_given_o: Pr(x_k = s | o) for context tokens s; zero rows for object tokens.
      objects: token ids of the objects.
      context_tokens: token ids of the non-object tokens (0..X-1).
      token_kinds: kind of every token id ('name', 'relation', 'template', 'query', 'object').
      query_token: token id of the query.
    """

    contexts: Int[Array, "C J"]
    joint: Float[Array, "C O"]
    pr_o: Float[Array, " O"]
    pr_s_given_o: Float[Array, "M O"]
    objects: Int[Array, " O"]
    context_tokens: Int[Array, " X"]
    token_kinds: tuple[str, ...]
    query_token: int

    @property
    def context_length(self) -> int:
        return self.contexts.shape[-1]

    @property
    def vocab_size(self) -> int:
        return len(self.token_kinds)


def _zipf(n: int, skew: float) -> np.ndarray:
    w = (np.arange(n) + 1.0) ** (-skew)
    return w / w.sum()


def _name_emission(rng: np.random.Generator, size: int, num_objects: int, breadth) -> np.ndarray:
    """Unnormalised co-occurrence weights (size, O): token v co-occurs with a random subset of objects."""
    m = np.zeros((size, num_objects))
    for v in range(size):
        k = int(np.clip(round(rng.uniform(*breadth) * num_objects), 1, num_objects))
        support = rng.choice(num_objects, size=k, replace=False)
        m[v, support] = rng.exponential(size=k) + 0.1
    for o in np.flatnonzero(m.sum(0) == 0):  # every object needs a token in every slot
        m[rng.integers(size), o] = rng.exponential() + 0.1
    return m


def _slot_emission(rng, slot: SlotSpec, num_objects: int, smoothing: float) -> np.ndarray:
    """Pr(v | o) for one slot, shape (size, O); columns sum to 1."""
    if slot.kind == "relation":
        m = np.zeros((slot.size, num_objects))
        m[np.arange(num_objects) % slot.size, np.arange(num_objects)] = 1.0
    elif slot.kind == "name":
        m = _name_emission(rng, slot.size, num_objects, slot.breadth)
    else:
        m = np.ones((1, num_objects))
    m = m / m.sum(0, keepdims=True)
    return (1.0 - smoothing) * m + smoothing / slot.size


def make_world(cfg: WorldConfig) -> FactWorld:
    """Builds the enumerated world described by ``cfg`` (deterministic in ``cfg.seed``)."""
    rng = np.random.default_rng(cfg.seed)
    pr_o = _zipf(cfg.num_objects, cfg.object_skew)[rng.permutation(cfg.num_objects)]
    emissions = [_slot_emission(rng, s, cfg.num_objects, cfg.smoothing) for s in cfg.slots]
    return world_from_emissions(pr_o, emissions, tuple(s.kind for s in cfg.slots))


def world_from_emissions(pr_o: np.ndarray, emissions: list[np.ndarray], slot_kinds: tuple[str, ...]) -> FactWorld:
    """Enumerates Pr(X, o) = Pr(o) Π_k Pr(x_k | o) over every context of per-slot emissions.

    Args:
      pr_o: Pr(o), shape (O,).
      emissions: one (size_k, O) matrix Pr(v | o) per slot, columns summing to 1; the last slot is the query.
      slot_kinds: the kind of each slot (``SLOT_KINDS``).
    """
    num_o = pr_o.shape[0]
    sizes = [em.shape[0] for em in emissions]
    offsets = np.cumsum([0] + sizes)
    local = np.array(list(itertools.product(*[range(n) for n in sizes])), dtype=np.int64).reshape(-1, len(sizes))
    joint = np.broadcast_to(pr_o, (local.shape[0], num_o)).copy()
    for k, em in enumerate(emissions):
        joint *= em[local[:, k]]
    num_x = int(offsets[-1])
    pr_s = np.zeros((num_x + num_o, num_o))
    pr_s[:num_x] = np.concatenate(emissions, axis=0)
    kinds = tuple(kind for kind, n in zip(slot_kinds, sizes) for _ in range(n)) + ("object",) * num_o
    fdt = jax.dtypes.canonicalize_dtype(np.float64)
    return FactWorld(
        contexts=jnp.asarray(local + offsets[:-1], dtype=jnp.int32),
        joint=jnp.asarray(joint / joint.sum(), dtype=fdt),
        pr_o=jnp.asarray(pr_o, dtype=fdt),
        pr_s_given_o=jnp.asarray(pr_s, dtype=fdt),
        objects=jnp.arange(num_x, num_x + num_o, dtype=jnp.int32),
        context_tokens=jnp.arange(num_x, dtype=jnp.int32),
        token_kinds=kinds,
        query_token=num_x - 1,
    )


def sample_batch(world: FactWorld, key, batch_size: int) -> tuple[Int[Array, "B J"], Float[Array, "B O"]]:
    """Draws ``batch_size`` (context, object) pairs from Pr(X, o).

    Returns:
      tokens_BJ: the sampled contexts; targets_BO: one-hot objects scaled by 1/B, so that
      ``Σ_b Σ_o targets[b, o] · CE`` is the minibatch mean loss (the same form as the full-batch targets).
    """
    num_c, num_o = world.joint.shape
    cdf = jnp.cumsum(world.joint.reshape(-1))
    u = jax.random.uniform(key, (batch_size,), dtype=cdf.dtype) * cdf[-1]
    flat = jnp.minimum(jnp.searchsorted(cdf, u, side="right", method="compare_all"), num_c * num_o - 1)  # inverse-CDF sampling
    tokens_BJ = world.contexts[flat // num_o]
    targets_BO = jax.nn.one_hot(flat % num_o, num_o, dtype=world.joint.dtype) / batch_size
    return tokens_BJ, targets_BO


def sample_counts(world: FactWorld, key, batch_size: int) -> Float[Array, "C O"]:
    """A minibatch of ``batch_size`` draws as count weights n_{X,o}/B over the enumerated contexts.

    Σ_{X,o} (n_{X,o}/B) CE(X, o) equals the minibatch mean loss of ``sample_batch`` for the same draws, so the
    two forms give the same SGD step; this one costs C contexts instead of B samples (cheaper when C ≤ B).
    """
    num_c, num_o = world.joint.shape
    cdf = jnp.cumsum(world.joint.reshape(-1))
    u = jax.random.uniform(key, (batch_size,), dtype=cdf.dtype) * cdf[-1]
    flat = jnp.minimum(jnp.searchsorted(cdf, u, side="right", method="compare_all"), num_c * num_o - 1)
    counts = jnp.sum(jax.nn.one_hot(flat, num_c * num_o, dtype=cdf.dtype), axis=0)
    return (counts / batch_size).reshape(num_c, num_o)


def full_batch(world: FactWorld) -> tuple[Int[Array, "C J"], Float[Array, "C O"]]:
    """The population 'batch': every context with its joint weights as soft targets."""
    return world.contexts, world.joint


def log_prior_terms(world: FactWorld) -> Float[Array, "M O"]:
    """v_{o,s} = ln Pr(s|o) + L⁻¹ ln Pr(o) for context tokens s (rows), zero rows for object tokens.

    This is the numerator of the reference optimum U (spec §2.3) and the vector whose norm enters the
    Diversity Index (§2.6).
    """
    num_x = world.context_tokens.shape[0]
    v = jnp.log(world.pr_s_given_o[:num_x]) + jnp.log(world.pr_o)[None, :] / world.context_length
    return jnp.zeros_like(world.pr_s_given_o).at[:num_x].set(v)


# The multi-relation world of the Diversity Index lemma (``check_diversity``, ``experiments/di_optimizer``):
# 8 objects in 2 relations, 19 subject-name tokens of varied breadth.
MULTI_RELATION = WorldConfig(
    num_objects=8,
    slots=(
        SlotSpec("name", 10, (0.1, 1.0)),
        SlotSpec("name", 9, (0.1, 1.0)),
        SlotSpec("relation", 2),
        SlotSpec("template", 1),
        SlotSpec("query", 1),
    ),
    object_skew=0.5,
    smoothing=0.02,
    seed=3,
)

