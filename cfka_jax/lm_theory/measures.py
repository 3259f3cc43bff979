"""Attention measures per layer and head for the DI comparison: per context, per occurrence, per fact, STOC's column.

``attention.py`` measures one thing: the head-averaged mass the query puts on a token type, over the example's whole
context. The theory's z_s is the attention of the object-predicting query to one occurrence of s inside one fact
(subject + relation → object), so this module measures the alternatives side by side, per layer l and query head n
(``|A|`` per head: the identity for softmax, the magnitude of a linear head's score, whose sign is not identifiable).

Example k: chunk b_k, query q_k (the position predicting the object), context C_k = start_k … q_k (the document up
to the query), fact span F_k = f_k … q_k ⊆ C_k (the subject + relation tokens of the query's own sentence,
``biography.fact_starts``). With a_k(t) = |A^{l,n}[b_k, q_k, t]| and c_k(t) = #{t' ∈ C_k : tok(t') = tok(t)} (the
in-context repeat count of t's token type):

    context      z_s = (1/n_s)   Σ_k Σ_{t ∈ C_k, tok(t) = s} a_k(t)             n_s   = #{k : s ∈ C_k}
    occurrence   z_s = (1/n_s)   Σ_k Σ_{t ∈ C_k, tok(t) = s} a_k(t) / c_k(t)    (mass on s per occurrence of s)
    fact         z_s = (1/n^F_s) Σ_k Σ_{t ∈ F_k, tok(t) = s} a_k(t)             n^F_s = #{k : s ∈ F_k}
    column_j1    z_s = (1/N_s)   Σ_{(b, j) : tok(b, j) = s} Σ_{i ≥ j} A[b, i, j] / (j + 1)
    column_nq    the same with ÷ (T − j)                                          N_s   = occurrences of s

The two column scores are STOC's token scores (``continual/stoc.scores_from_colsum``: ``j_plus_1``, the reference,
and ``n_queries``) of every position of every chunk, averaged over the occurrences of each token type; they use all
queries, not only the object-predicting ones. ``context`` per head averaged over heads is ``attention.py``'s z^l_s.
The maps are ``attention.layer_maps``: a Gated DeltaNet layer's (Qwen3.5) is its row-normalised mixing matrix per
value head, the others the attention weights.

Shapes: L layers, N query heads, B chunks, S query / T key positions, E examples, M token types.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.data.packing import Packed
from cfka_jax.eval.batches import row_blocks
from cfka_jax.lm_theory.attention import layer_maps
from cfka_jax.shapes import Array, Float, Int

MEASURES = ("context", "occurrence", "fact", "column_j1", "column_nq")
"""The attention measures, in table order (module docstring)."""

SCOPE = {"context": "context", "occurrence": "context", "fact": "fact", "column_j1": "context",
         "column_nq": "context"}
"""The example scope each measure is compared in: its DI, eligibility and covariates come from these contexts."""


def repeat_counts(tokens_ET: Int[Array, "E T"], keep_ET: Array) -> Float[Array, "E T"]:
    """c_k(t): how many kept positions of row k hold t's token (0 where t itself is not kept)."""
    same_ETT = (tokens_ET[:, :, None] == tokens_ET[:, None, :]) & keep_ET[:, None, :]
    return jnp.where(keep_ET, jnp.sum(same_ETT, axis=-1), 0).astype(jnp.float32)


def head_masses(attentions: tuple[Float[Array, "B N S T"], ...], tokens_BS: Int[Array, "B S"], ex: dict,
                rows_B: Array, *, num_tokens: int) -> dict[str, Float[Array, "L N M"]]:
    """The numerators of every measure (module docstring), summed per token type, for every layer and head.

    Args:
      attentions: per layer, the attention weights (or a linear head's scores) of the block's chunks.
      tokens_BS: the chunks' tokens.
      ex: the block's examples: ``b`` (row), ``q`` (query), ``start`` (context start), ``fact`` (fact span start),
        ``valid`` (padding marks), each (E,).
      rows_B: which rows are real chunks (the column scores skip fill rows).
      num_tokens: M.
    """
    heads = sorted({a.shape[1] for a in attentions})
    if len(heads) > 1:
        raise ValueError(f"the layers' maps have different head counts {heads}: per-head measures need one count")
    a_LNBST = jnp.stack([jnp.abs(a.astype(jnp.float32)).transpose(1, 0, 2, 3) for a in attentions])
    num_l, num_n, _, _, num_t = a_LNBST.shape
    t_T = jnp.arange(num_t)
    rows_LNET = a_LNBST[:, :, ex["b"], ex["q"], :]
    tok_ET = tokens_BS[ex["b"]]
    before_ET = (t_T[None, :] <= ex["q"][:, None]) & ex["valid"][:, None]
    ctx_ET = before_ET & (t_T[None, :] >= ex["start"][:, None])
    fact_ET = before_ET & (t_T[None, :] >= ex["fact"][:, None])
    count_ET = repeat_counts(tok_ET, ctx_ET)
    weights = {"context": ctx_ET.astype(jnp.float32),
               "occurrence": jnp.where(ctx_ET, 1.0 / jnp.maximum(count_ET, 1.0), 0.0),
               "fact": fact_ET.astype(jnp.float32)}

    def by_type(vals_LNX, ids_X):
        flat = vals_LNX.reshape(num_l * num_n, -1)
        out = jax.vmap(lambda v: jax.ops.segment_sum(v, ids_X, num_segments=num_tokens))(flat)
        return out.reshape(num_l, num_n, num_tokens)

    out = {name: by_type(rows_LNET * w[None, None], tok_ET.reshape(-1)) for name, w in weights.items()}
    colsum_LNBT = jnp.sum(a_LNBST, axis=3) * rows_B[None, None, :, None].astype(jnp.float32)
    for name, denom_T in (("column_j1", t_T + 1), ("column_nq", num_t - t_T)):
        out[name] = by_type(colsum_LNBT / denom_T.astype(jnp.float32)[None, None, None, :], tokens_BS.reshape(-1))
    return out


def _masses_pure(graphdef, params, rest, batch: dict, ex: dict, rows_B, *, num_tokens: int) -> dict:
    model = nnx.merge(graphdef, params, rest)
    maps = layer_maps(model, batch["tokens"], positions_BS=batch["positions"],
                      segment_ids_BS=batch.get("segment_ids"))
    return head_masses(maps, batch["tokens"], ex, rows_B, num_tokens=num_tokens)


@functools.lru_cache(maxsize=8)
def _compiled(graphdef, num_tokens: int):
    return jax.jit(functools.partial(_masses_pure, graphdef, num_tokens=num_tokens))


def _block(chunks: np.ndarray, rows: np.ndarray, ex_arrays: dict, width: int) -> dict:
    """The examples of the block's chunks (row in block, query, starts), padded to ``width``."""
    row_of = {int(c): i for i, c in enumerate(chunks[rows])}
    sel = np.flatnonzero(np.isin(ex_arrays["chunk"], chunks[rows]))
    out = {k: np.zeros(width, np.int32) for k in ("b", "q", "start", "fact")}
    out["b"][:sel.size] = [row_of[int(c)] for c in ex_arrays["chunk"][sel]]
    for k in ("q", "start", "fact"):
        out[k][:sel.size] = ex_arrays[k][sel]
    valid = np.zeros(width, bool)
    valid[:sel.size] = True
    return {k: jnp.asarray(v) for k, v in out.items()} | {"valid": jnp.asarray(valid)}


def measure_masses(graphdef, params, rest, packed: Packed, ex_chunk: np.ndarray, ex_query: np.ndarray,
                   ex_start: np.ndarray, ex_fact: np.ndarray, *, num_tokens: int, batch_size: int = 8
                   ) -> dict[str, np.ndarray]:
    """Every measure's numerator (module docstring), float64 (L, N, M), over the chunks holding the examples.

    Args:
      graphdef, params, rest: the port (``nnx.split(model, nnx.Param, ...)``).
      packed: the packed corpus the examples point into.
      ex_chunk, ex_query, ex_start, ex_fact: int (E,) chunk, query, context start and fact span start.
      num_tokens: M.
      batch_size: chunks per forward pass.

    Raises:
      ValueError: a fact span that starts before its context or after its query.
    """
    if np.any(ex_fact < ex_start) or np.any(ex_fact > ex_query):
        raise ValueError("every fact span must lie inside its context: start <= fact <= query")
    chunks = np.unique(ex_chunk)
    width = int(np.bincount(np.searchsorted(chunks, ex_chunk)).max()) * batch_size
    arrays = {"chunk": ex_chunk, "q": ex_query, "start": ex_start, "fact": ex_fact}
    fn, total = _compiled(graphdef, num_tokens), None
    for block in row_blocks(len(chunks), batch_size):
        idx = chunks[block.rows]
        batch = {"tokens": jnp.asarray(packed.tokens[idx], jnp.int32),
                 "positions": jnp.asarray(packed.positions[idx], jnp.int32)}
        if packed.doc_mask:
            batch["segment_ids"] = jnp.asarray(packed.segment_ids[idx], jnp.int32)
        ex = _block(chunks, block.rows[block.valid], arrays, width)
        rows_B = jnp.asarray(block.valid)
        mass = {k: np.asarray(v, np.float64) for k, v in fn(params, rest, batch, ex, rows_B).items()}
        total = mass if total is None else {k: total[k] + mass[k] for k in total}
    return total


def denominators(tokens_BS: np.ndarray, ex_chunk: np.ndarray, ex_query: np.ndarray, ex_start: np.ndarray,
                 ex_fact: np.ndarray, *, num_tokens: int) -> dict[str, np.ndarray]:
    """n_s, n^F_s and N_s of every measure (module docstring), float64 (M,)."""
    n_ctx, n_fact = np.zeros(num_tokens), np.zeros(num_tokens)
    for c, s, f, q in zip(ex_chunk, ex_start, ex_fact, ex_query):
        n_ctx[np.unique(tokens_BS[c, s:q + 1])] += 1
        n_fact[np.unique(tokens_BS[c, f:q + 1])] += 1
    n_col = np.bincount(tokens_BS[np.unique(ex_chunk)].reshape(-1), minlength=num_tokens).astype(np.float64)
    return {"context": n_ctx, "occurrence": n_ctx, "fact": n_fact, "column_j1": n_col, "column_nq": n_col}


def per_type(masses: dict[str, np.ndarray], denoms: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """z of every measure, (L, N, M): numerator / denominator, 0 where the denominator is 0."""
    return {k: np.where(denoms[k] > 0, m / np.maximum(denoms[k], 1e-30), 0.0) for k, m in masses.items()}


def covariates(tokens_BS: np.ndarray, ex_chunk: np.ndarray, ex_query: np.ndarray, ex_first: np.ndarray, *,
               num_tokens: int) -> np.ndarray:
    """(M, 2) per token type over the examples' spans first_k … q_k: the mean in-span repeat count (over the
    examples holding the type) and the mean distance q_k − t to the query (over its occurrences); 0 for unseen
    types. The confounds the partial correlations control for."""
    rep, held, dist, occ = (np.zeros(num_tokens) for _ in range(4))
    for c, f, q in zip(ex_chunk, ex_first, ex_query):
        span = tokens_BS[c, f:q + 1]
        types, counts = np.unique(span, return_counts=True)
        rep[types] += counts
        held[types] += 1
        np.add.at(dist, span, q - np.arange(f, q + 1))
        np.add.at(occ, span, 1)
    return np.stack([rep / np.maximum(held, 1), dist / np.maximum(occ, 1)], axis=1)
