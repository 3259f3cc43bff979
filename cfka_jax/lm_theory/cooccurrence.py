"""(token, object) co-occurrence statistics of a corpus, read the way the theory's naive-Bayes world reads them.

An *example* is one object occurrence with its context: the object o (a fact's value, or the token the model must
predict) and the token types of the context that precedes it, up to and including the query position q (the
token whose next-token prediction is the object; the theory's query is the last context token, spec §2.2).
Counting over examples (optionally weighted),

    n(o)      = Σ_examples of o w,                               Pr(o) = n(o) / N,
    n(s, o)   = Σ_examples of o whose context contains s  w,     Pr(s | o) = n(s, o) / n(o),
    L         = mean number of distinct token types per context.

Pr(s | o) is the probability that s appears in a context of o. In the theory's world (``theory/world.py``) every
token type belongs to one slot and appears once per context, so this is exactly its emission Pr(x_k = s | o): an
enumerated world counted with weights Pr(X, o) gives back its own ``pr_s_given_o`` and ``pr_o`` (tested).

Smoothing. Pairs never seen have n(s, o) = 0 and ln Pr = −∞. The smoothed emission mixes in the token's base rate
b_s = Σ_o n(s, o) / N with weight ε (the world's smoothing, with the token's base rate as the floor):

    Pr_ε(s | o) = (1 − ε) n(s, o) / n(o) + ε b_s,       Pr_ε(o) = (1 − ε) Pr(o) + ε / O.

Support (``theory/diversity.support_mask``, decision #3): 'cooccur' keeps, for token s, the objects with
n(s, o) > 0 — the pairs above the smoothing floor — and 'all' keeps every object (then ε > 0 is required); a
token type that occurs in no context has an empty support (v_s = 0).
Shapes: M token types (the vocabulary), O objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.shapes import Array, Float

SUPPORTS = ("cooccur", "all")


@dataclasses.dataclass(frozen=True)
class CoOccurrence:
    """Co-occurrence counts of one corpus (module docstring).

    Attributes:
      counts: n(s, o), float64 (M, O) (weighted counts; integers for a plain corpus).
      n_o: n(o), float64 (O,).
      mean_length: L, the mean number of distinct token types per context.
    """

    counts: np.ndarray
    n_o: np.ndarray
    mean_length: float

    def __post_init__(self):
        if self.counts.ndim != 2 or self.n_o.shape != (self.counts.shape[1],):
            raise ValueError(f"counts must be (M, O) and n_o (O,), got {self.counts.shape}, {self.n_o.shape}")
        if not self.mean_length > 0:
            raise ValueError(f"mean context length must be > 0, got {self.mean_length}")

    @property
    def total(self) -> float:
        """N, the (weighted) number of examples."""
        return float(self.n_o.sum())

    @property
    def n_s(self) -> np.ndarray:
        """Σ_o n(s, o): the (weighted) number of examples whose context contains s, (M,)."""
        return self.counts.sum(axis=1)


def count_cooccurrence(contexts: Sequence[np.ndarray], objects: np.ndarray, *, num_tokens: int, num_objects: int,
                       weights: np.ndarray | None = None) -> CoOccurrence:
    """Count n(s, o) (token presence per context), n(o) and L over examples.

    Args:
      contexts: one int array of token ids per example (repeats allowed; presence is counted).
      objects: int (n,) object id of each example, in [0, num_objects).
      num_tokens, num_objects: M and O.
      weights: optional (n,) example weights (default 1).

    Raises:
      ValueError: mismatched lengths, ids out of range, or no examples.
    """
    objects = np.asarray(objects, np.int64)
    weights = np.ones(len(objects)) if weights is None else np.asarray(weights, np.float64)
    if len(contexts) != len(objects) or len(weights) != len(objects) or not len(objects):
        raise ValueError(f"need as many contexts, objects and weights (>= 1), got {len(contexts)}, "
                         f"{len(objects)}, {len(weights)}")
    if objects.min() < 0 or objects.max() >= num_objects:
        raise ValueError(f"object ids must lie in [0, {num_objects})")
    counts, n_o, lengths = np.zeros((num_tokens, num_objects)), np.zeros(num_objects), np.zeros(len(objects))
    for i, (ctx, o, w) in enumerate(zip(contexts, objects, weights)):
        present = np.unique(np.asarray(ctx, np.int64))
        if present.size and (present[0] < 0 or present[-1] >= num_tokens):
            raise ValueError(f"example {i}: token ids must lie in [0, {num_tokens})")
        counts[present, o] += w
        n_o[o] += w
        lengths[i] = present.size
    return CoOccurrence(counts, n_o, float(np.average(lengths, weights=weights)))


def _f(x) -> Array:
    return jnp.asarray(x, dtype=jax.dtypes.canonicalize_dtype(np.float64))


def probabilities(co: CoOccurrence, *, smoothing: float = 0.0) -> tuple[Float[Array, "M O"], Float[Array, " O"]]:
    """(Pr_ε(s | o), Pr_ε(o)) (module docstring); objects never seen get Pr(s | o) = ε b_s."""
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    counts, n_o = _f(co.counts), _f(co.n_o)
    emission = jnp.where(n_o[None, :] > 0, counts / jnp.maximum(n_o, 1e-30)[None, :], 0.0)
    base = jnp.sum(counts, axis=1, keepdims=True) / co.total
    pr_o = n_o / co.total
    return (1.0 - smoothing) * emission + smoothing * base, (1.0 - smoothing) * pr_o + smoothing / n_o.shape[0]


def support_mask(co: CoOccurrence, *, support: str = "cooccur") -> Float[Array, "M O"]:
    """1 where object o counts for token s: n(s, o) > 0 ('cooccur') or every object ('all'); a token in no
    context at all has an empty support either way (it says nothing about any object)."""
    if support not in SUPPORTS:
        raise ValueError(f"support must be one of {SUPPORTS}, got {support!r}")
    counts = _f(co.counts)
    if support == "cooccur":
        return (counts > 0).astype(counts.dtype)
    seen = jnp.sum(counts, axis=1, keepdims=True) > 0
    return jnp.broadcast_to(seen, counts.shape).astype(counts.dtype)


def log_prior_terms(co: CoOccurrence, *, support: str = "cooccur", smoothing: float = 0.0) -> Float[Array, "M O"]:
    """v_{o,s} = ln Pr_ε(s | o) + L⁻¹ ln Pr_ε(o) on the support, 0 off it (token rows, object columns).

    Raises:
      ValueError: support 'all' without smoothing (ln 0 for unseen pairs).
    """
    if support == "all" and smoothing == 0.0 and np.any(co.counts[co.n_s > 0] == 0):
        raise ValueError("support 'all' needs smoothing > 0: some (token, object) pairs never co-occur")
    mask = support_mask(co, support=support)
    pr_s, pr_o = probabilities(co, smoothing=smoothing)
    v = jnp.log(jnp.where(mask > 0, pr_s, 1.0)) + jnp.log(jnp.where(pr_o > 0, pr_o, 1.0))[None, :] / co.mean_length
    return jnp.where(mask > 0, v, 0.0)
