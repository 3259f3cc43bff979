"""The attention a trained port pays to each token type, from the maps STOC averages (spec §2.8, §6.4).

For a packed corpus and its examples (object occurrences, ``lm_theory/biography.Examples``): example k has its
query at (chunk b_k, position q_k) — the position whose logits predict the object — and its context at positions
start_k … q_k of that chunk. With A^{l,n} the attention weights of layer l and query head n (post-softmax, or the
raw causal scores of a linear-attention port), let

    Ā^l[b, q, t] = mean_n |A^{l,n}[b, q, t]|                      (per layer; |·| is the identity for softmax),
    z^l_s        = Σ_k Σ_{t = start_k … q_k, token(b_k, t) = s} Ā^l[b_k, q_k, t] / n_s,

with n_s the number of examples whose context contains s: z^l_s is the attention mass the query puts on token
type s, averaged over the examples (occurrences) that hold s; the pooled z_s is the mean over layers, i.e. the same
computation on STOC's layer-and-head average (``continual/stoc.mean_attention``; equal for softmax ports, tested).
The magnitude is taken per head because the sign of a linear head's score is not identifiable: flipping W_K and
W_V of a head flips its scores and leaves the model unchanged (the theory's (z, y) → (−z, −y) symmetry).

**Gated DeltaNet layers** (Qwen3.5's ``linear_attention`` blocks, ``models/qwen3_5``) have no attention weights; their
map is the exact token-mixing matrix from a zero state (``GatedDeltaNet.token_mixing``, ``delta.mixing_matrix``),
per value head u, ``o_t = Σ_{j≤t} A^u[t, j] v_j`` with

    A^u = (Q Kᵀ ⊙ Γ) (I + Â)⁻¹ diag(β),    Γ_tj = Π_{j<i≤t} α_i,    Â_tj = β_t Γ_tj k_t·k_j  (j < t).

A's rows do not sum to one and its entries can be negative, so the received mass of source j at query t is the
row-normalised magnitude (:func:`received_mass`)

    P^u[t, j] = |A^u[t, j]| / Σ_{j' ≤ t} |A^u[t, j']|       (0 for an all-zero row),

a causal row-stochastic map like a softmax row, then treated exactly as softmax weights above. The normalisation
removes what scales a whole output row and is not a choice between sources (the query's norm; the decay common
to the whole prefix); what acts after the rule — the gated RMSNorm's 1/rms(o_t) per (t, u) and its channel gate
``w ⊙ silu(z_t)`` — is common to every source of row t and leaves A, hence P, unchanged. The magnitude, as for the
theory's linear heads, drops a sign that the layer can move into v. Layer kinds stay apart (:func:`layer_kinds`): a pooled z over a hybrid model's layers mixes the
two maps, so ``cfka di-attention`` reports each kind on its own.

What the cFKA theory covers (spec §2.6, §2.8): its model is one causal linear-attention layer without softmax,
``o_t = Σ_{j≤t} (q_t·k_j) v_j`` — the Gated DeltaNet map with α ≡ 1, β ≡ 1 and no correction (Â = 0). Each part
the theory lacks changes the map it predicts:

* the gate α_t (Γ): past sources are multiplied by the decay accumulated since them, so received mass falls with
  distance to the query independently of the token's DI (a recency prior the theory has not);
* the delta-rule correction (I + Â)⁻¹: a write along k_t first removes (by β_t) what the state already stores
  along k_t, so an occurrence whose key comes again later (the name that opens every sentence of a biography) is
  partly overwritten and the latest occurrence keeps the mass: a type's mass depends on how its occurrences
  repeat in the context, which the theory's per-type counts do not see;
* the write strength β_t: a per-token learned weight on each source column, a token-dependent prior on received
  mass that the theory's counts do not set;
* and, outside the rule, the causal short convolution before q, k, v (width Z): A mixes the convolved values, so
  the mass at j belongs to tokens j − Z + 1 … j, attributed here to j.

The full-attention layers of the same model are gated softmax attention (the sigmoid output gate acts after the
mixing and does not change the map), the softmax case of the panel.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.continual.stoc import mean_attention
from cfka_jax.data.packing import Packed
from cfka_jax.eval.batches import row_blocks
from cfka_jax.shapes import Array, Float, Int


LAYER_KINDS = ("full_attention", "linear_attention")
"""The kinds of token mixer a layer's map comes from: attention weights (softmax, or the theory's linear scores) or
a Gated DeltaNet layer's row-normalised mixing matrix (module docstring)."""


def layer_kinds(model: nnx.Module) -> tuple[str, ...]:
    """Every block's kind in layer order: the block's ``kind`` where it has one (Qwen3.5's ``layer_types``),
    ``"full_attention"`` for the families whose blocks all attend."""
    kinds = tuple(getattr(block, "kind", "full_attention") for block in model.layers)
    bad = sorted(set(kinds) - set(LAYER_KINDS))
    if bad:
        raise ValueError(f"layer kinds {bad} have no attention map (known: {LAYER_KINDS})")
    return kinds


def received_mass(a_BUSS: Float[Array, "B U S S"]) -> Float[Array, "B U S S"]:
    """P[t, j] = |A[t, j]| / Σ_j' |A[t, j']| over each output row (0 for an all-zero row): a mixing matrix as
    received attention mass, row-stochastic like softmax weights (module docstring)."""
    mag = jnp.abs(a_BUSS.astype(jnp.float32))
    total = jnp.sum(mag, axis=-1, keepdims=True)
    return jnp.where(total > 0, mag / jnp.where(total > 0, total, 1.0), 0.0)


def layer_maps(model: nnx.Module, tokens_BS: Int[Array, "B S"], *, positions_BS: Int[Array, "B S"],
               segment_ids_BS: Int[Array, "B S"] | None = None) -> tuple[Float[Array, "B N S T"], ...]:
    """One map per layer, in layer order: the attention weights of a full layer (``return_attn``), the
    :func:`received_mass` of a Gated DeltaNet layer's token-mixing matrix, computed from the block's normed input
    (the model's hidden states). A model without linear layers returns its ``attentions`` unchanged."""
    kinds = layer_kinds(model)
    hybrid = "linear_attention" in kinds
    out = model(tokens_BS, positions_BS=positions_BS, segment_ids_BS=segment_ids_BS, return_attn=True,
                return_hidden=hybrid)
    if not hybrid:
        return tuple(out.attentions)
    full, maps = iter(out.attentions), []
    for block, kind, x_BSD in zip(model.layers, kinds, out.hidden_states):
        if kind == "linear_attention":
            maps.append(received_mass(block.mixer().token_mixing(block.input_layernorm(x_BSD))))
        else:
            maps.append(next(full))
    return tuple(maps)


def layer_attention(attentions: tuple[Float[Array, "B N S T"], ...]) -> Float[Array, "L B S T"]:
    """Ā^l: the magnitude of the attention weights averaged over query heads, per layer
    (``continual/stoc.mean_attention`` per layer, of |A|)."""
    return mean_attention(attentions, per_layer=True, magnitude=True)


def type_mass(abar_LBST: Float[Array, "L B S T"], tokens_BS: Int[Array, "B S"], ex_b: Int[Array, " E"],
              ex_q: Int[Array, " E"], ex_start: Int[Array, " E"], ex_valid: Array, *,
              num_tokens: int) -> Float[Array, "L M"]:
    """Σ over the valid examples k and their context positions t of Ā^l[b_k, q_k, t], summed per token type."""
    t_T = jnp.arange(tokens_BS.shape[1])
    keep_ET = (t_T[None, :] >= ex_start[:, None]) & (t_T[None, :] <= ex_q[:, None]) & ex_valid[:, None]
    rows_LET = abar_LBST[:, ex_b, ex_q, :]
    ids = tokens_BS[ex_b].reshape(-1)
    vals_LX = jnp.where(keep_ET[None], rows_LET, 0.0).reshape(rows_LET.shape[0], -1)
    return jax.vmap(lambda v: jax.ops.segment_sum(v, ids, num_segments=num_tokens))(vals_LX)


def _mass_pure(graphdef, params, rest, batch: dict, ex: dict, *, num_tokens: int) -> Float[Array, "L M"]:
    model = nnx.merge(graphdef, params, rest)
    maps = layer_maps(model, batch["tokens"], positions_BS=batch["positions"],
                      segment_ids_BS=batch.get("segment_ids"))
    return type_mass(layer_attention(maps), batch["tokens"], ex["b"], ex["q"], ex["start"], ex["valid"],
                     num_tokens=num_tokens)


@functools.lru_cache(maxsize=8)
def _compiled(graphdef, num_tokens: int):
    return jax.jit(functools.partial(_mass_pure, graphdef, num_tokens=num_tokens))


def _block_examples(chunks: np.ndarray, block_rows: np.ndarray, ex_chunk, ex_q, ex_start, width: int) -> dict:
    """The examples of the block's chunks, as (row in block, query, start), padded to ``width`` (valid marks)."""
    row_of = {int(c): i for i, c in enumerate(chunks[block_rows])}
    sel = np.flatnonzero(np.isin(ex_chunk, chunks[block_rows]))
    b = np.zeros(width, np.int32)
    q, start, valid = np.zeros(width, np.int32), np.zeros(width, np.int32), np.zeros(width, bool)
    b[:sel.size] = [row_of[int(c)] for c in ex_chunk[sel]]
    q[:sel.size], start[:sel.size], valid[:sel.size] = ex_q[sel], ex_start[sel], True
    return {"b": jnp.asarray(b), "q": jnp.asarray(q), "start": jnp.asarray(start), "valid": jnp.asarray(valid)}


def attention_mass(graphdef, params, rest, packed: Packed, ex_chunk: np.ndarray, ex_query: np.ndarray,
                   ex_start: np.ndarray, *, num_tokens: int, batch_size: int = 8) -> np.ndarray:
    """Σ_k Σ_t Ā^l mass per layer and token type over all examples (module docstring), float64 (L, M).

    Args:
      graphdef, params, rest: the port (``nnx.split(model, nnx.Param, ...)``).
      packed: the packed corpus the examples point into.
      ex_chunk, ex_query, ex_start: int (E,) chunk, query position and context start of every example.
      num_tokens: M, the vocabulary size.
      batch_size: chunks per forward pass.
    """
    chunks = np.unique(ex_chunk)
    per_chunk = np.bincount(np.searchsorted(chunks, ex_chunk)).max()
    fn, total = _compiled(graphdef, num_tokens), None
    for block in row_blocks(len(chunks), batch_size):
        rows = block.rows[block.valid]
        batch = {"tokens": jnp.asarray(packed.tokens[chunks[block.rows]], jnp.int32),
                 "positions": jnp.asarray(packed.positions[chunks[block.rows]], jnp.int32)}
        if packed.doc_mask:
            batch["segment_ids"] = jnp.asarray(packed.segment_ids[chunks[block.rows]], jnp.int32)
        ex = _block_examples(chunks, rows, ex_chunk, ex_query, ex_start, width=int(per_chunk) * batch_size)
        mass = np.asarray(fn(params, rest, batch, ex), np.float64)
        total = mass if total is None else total + mass
    return total


def per_type(mass_LM: np.ndarray, n_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z^l_s per layer (L, M), pooled z_s (M,)) from the summed mass and the example counts n_s (0 where
    n_s = 0)."""
    z_LM = np.where(n_s[None, :] > 0, mass_LM / np.maximum(n_s[None, :], 1e-30), 0.0)
    return z_LM, z_LM.mean(axis=0)
