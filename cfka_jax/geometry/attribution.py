"""Forward-only sequence attribution: RH (CH1) and GH (CH2) scores in the token-Gram form (spec §4.1).

Per kept target position t of a sequence: ``g_t[V′]`` is the force restricted to a vocabulary subset V′ (zero
outside it, **not renormalised**, pitfall 16), ``h_t`` the final post-norm state, ``h̃_{l,t}`` the GH streams and
``P_t = W[V′]ᵀ g_t[V′]`` (each side with its own V′). The score of sequences a, b is

    S(a,b) = Σ_{t∈a, t'∈b} [⟨g_t, g_t'⟩_{V′_a∩V′_b}·⟨h_t, h_t'⟩ + ⟨P_t, P_t'⟩·Σ_l⟨h̃_{l,t}, h̃_{l,t'}⟩]
           = ⟨RH_a, RH_b⟩ + ⟨GH_a, GH_b⟩,   RH = Σ_t g_t ⊗ h_t,   GH = Σ_t P_t ⊗ concat_l h̃_{l,t}.

:func:`gram_scores` computes the first line (token Grams, chunked over b) and never materialises GH, which is
``d × (L−1)d`` per sequence (pitfall 20); :func:`explicit_scores` builds RH and GH and exists for the tests.

Presets (:data:`PRESETS`): ``ch1`` = RH only; ``ch1-ch2`` = RH + ``gh_raw``; ``ch1-ch2-inputln`` = RH +
``gh_inputln``; ``gh`` = GH only (``gh_inputln`` streams).

Kept targets (spec §2 label masking, attribution): every target whose token has ``attention_mask = 1``, the
prompt included, no likelihood filter. The release also keeps one "predict pad/eos" target per padded sequence
(its valid mask is ``attention_mask[:, :-1]``); the project drops it unless ``keep_pad_target=True`` (pitfall 4).

Vocabulary modes: ``full`` (all rows of W); ``total_unique`` (:func:`total_unique_mask`, the sorted union of the
ids of all texts plus special ids); ``topk_unique`` (:func:`topk_unique_masks`, the union of the top-k predicted
ids over the kept positions of each batch of 4 in a fixed order — it depends on the batching, pitfall 15).
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry.force import force_from_logprobs, target_logprobs, to_targets
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.onestep import highest
from cfka_jax.geometry.readout import readout_matrix, readout_projection
from cfka_jax.geometry.streams import forward_streams
from cfka_jax.shapes import Array, Bool, Float, Int

PRESETS = {"ch1": (True, None), "ch1-ch2": (True, "gh_raw"), "ch1-ch2-inputln": (True, "gh_inputln"),
           "gh": (False, "gh_inputln")}
GH_STREAMS = {"gh_raw": "resid_attn", "gh_inputln": "norm_attn"}


@flax.struct.dataclass
class SeqFeatures:
    """Forward-only factors of N sequences, keyed by target position (zero at positions that are not kept).

    Attributes:
        g: ``[N, S, V]`` force on V′ (kept targets only).
        h: ``[N, S, D]`` final post-norm state that scored each target.
        p: ``[N, S, D]`` ``W[V′]ᵀ g[V′]``.
        streams: ``[N, S, L−1, D]`` the GH streams (inputs of blocks 1..L−1), or ``[N, S, 0, D]`` for RH only.
        keep: ``[N, S]`` 1 at kept targets.
    """

    g: Float[Array, "N S V"]
    h: Float[Array, "N S D"]
    p: Float[Array, "N S D"]
    streams: Float[Array, "N S l D"]
    keep: Float[Array, "N S"]


def attribution_mask(attention_mask_NS: Int[Array, "N S"], *, keep_pad_target: bool = False, dtype=jnp.float32
                     ) -> Float[Array, "N S"]:
    """Kept targets keyed by target position: ``p ≥ 1`` and ``attention_mask[p] = 1``; with ``keep_pad_target``
    the release's rule ``attention_mask[p − 1] = 1`` (one extra pad/eos target per right-padded sequence)."""
    m = attention_mask_NS.astype(dtype)
    return to_targets(m) if keep_pad_target else m * to_targets(jnp.ones_like(m))


def total_unique_mask(token_arrays, vocab_size: int, extra_ids=()) -> np.ndarray:
    """``total_unique`` V′: every id occurring in ``token_arrays`` plus ``extra_ids`` (special tokens), ``[V]``."""
    ids = np.unique(np.concatenate([np.ravel(np.asarray(t)) for t in token_arrays] + [np.asarray(extra_ids, int)]))
    mask = np.zeros(vocab_size, bool)
    mask[ids[(ids >= 0) & (ids < vocab_size)]] = True
    return mask


def topk_unique_masks(lp_NSV: Float[Array, "N S V"], keep_NS: Float[Array, "N S"], k: int, *, group: int = 4
                      ) -> Bool[Array, "N V"]:
    """``topk_unique`` V′: per consecutive group of ``group`` sequences, the union of the top-k ids at their kept
    positions (the same mask for every sequence of the group)."""
    n, _, v = lp_NSV.shape
    top = jax.lax.top_k(lp_NSV, k)[1]
    hit = jnp.zeros((n, v), bool).at[jnp.arange(n)[:, None, None], top].max(keep_NS[:, :, None] > 0)
    pad = (-n) % group
    grouped = jnp.pad(hit, ((0, pad), (0, 0))).reshape(-1, group, v).any(axis=1)
    return jnp.repeat(grouped, group, axis=0)[:n]


@highest
def sequence_features(params, batch: dict, *, net: Net, gh: str | None = "gh_inputln", vocab_mask=None,
                      vocab_ids=None, keep_pad_target: bool = False, chunk: int | None = None) -> SeqFeatures:
    """RH/GH factors of the sequences of ``batch`` (``tokens``, optional ``attention_mask``; one forward pass).

    ``vocab_mask``: None (full V), a ``[V]`` mask shared by all sequences or per-sequence ``[N, V]`` masks; g is
    stored at the full width V, zero outside V′.
    ``vocab_ids``: instead of a mask, the sorted ids of one V′ shared by all sequences; g is then stored
    **compacted**, ``g[..., k] = g_full[..., vocab_ids[k]]`` (``[N, S, |V′|]``) and ``P_t = W[V′]ᵀ g_t[V′]`` from
    the same rows. Every score of two feature sets compacted to the same ids equals the masked full-V score
    (the dropped columns are zero there); only the storage shrinks from V to |V′| (at a 152k vocabulary and
    |V′| = 50, by 3,000×). The forward still computes the full-V softmax: g is not renormalised on V′.
    ``chunk``: run the forward ``chunk`` sequences at a time (``lax.map``), so the ``[chunk, S, V]`` logits are
    the largest buffer instead of ``[N, S, V]``; the features are the same.
    """
    if vocab_mask is not None and vocab_ids is not None:
        raise ValueError("pass vocab_mask or vocab_ids, not both")
    if gh is not None and gh not in GH_STREAMS:
        raise ValueError(f"unknown GH streams {gh!r}; choose from {sorted(GH_STREAMS)}")
    tokens = batch["tokens"]
    attn = batch.get("attention_mask")
    attn = jnp.ones_like(tokens) if attn is None else attn
    ids = None if vocab_ids is None else jnp.asarray(vocab_ids, jnp.int32)
    mask = None if vocab_mask is None else jnp.asarray(vocab_mask)
    w_VD = readout_matrix(params, net.cfg)
    w_VD = w_VD if ids is None else w_VD[ids]

    def features(tok_BS, attn_BS, mask_BV):
        st = forward_streams(net.model(params), tok_BS, attention_mask_BS=attn_BS)
        lp = target_logprobs(st.logits)
        if ids is None:
            g = force_from_logprobs(lp, tok_BS)
        else:  # e_y − p on the V′ columns only: the [B, S, V] force is never formed
            g = (tok_BS[..., None] == ids[None, None, :]).astype(lp.dtype) - jnp.exp(jnp.take(lp, ids, axis=-1))
        keep = attribution_mask(attn_BS, keep_pad_target=keep_pad_target, dtype=g.dtype)
        g = g * keep[..., None]
        if shared is not None:
            g = g * shared.astype(g.dtype)[None, None, :]
        if mask_BV is not None:
            g = g * mask_BV.astype(g.dtype)[:, None, :]
        p = readout_projection(w_VD.astype(g.dtype), g)
        h = to_targets(st.final).astype(g.dtype)
        streams = None if gh is None else to_targets(getattr(st, GH_STREAMS[gh])[:, :, 1:]).astype(g.dtype)
        return g, h, p, streams, keep

    n = tokens.shape[0]
    shared = mask if mask is not None and mask.ndim == 1 else None
    mask = None if shared is not None else mask
    if chunk is None or chunk >= n:
        g, h, p, streams, keep = features(tokens, attn, mask)
    else:
        one = lambda x: jax.tree.map(lambda a: a[0], features(*(None if a is None else a[None] for a in x)))
        g, h, p, streams, keep = jax.lax.map(one, (tokens, attn, mask), batch_size=chunk)
    if streams is None:
        streams = jnp.zeros(h.shape[:2] + (0, h.shape[-1]), h.dtype)
    return SeqFeatures(g=g, h=h, p=p, streams=streams, keep=keep)


def _pair_block(fa: SeqFeatures, fb: SeqFeatures, rh: bool, gh: bool) -> Float[Array, "a b"]:
    total = jnp.zeros((fa.g.shape[0], fb.g.shape[0]), fa.g.dtype)
    if rh:
        k_gg = jnp.einsum("atv,bsv->abts", fa.g, fb.g)
        total = total + jnp.sum(k_gg * jnp.einsum("atd,bsd->abts", fa.h, fb.h), axis=(2, 3))
    if gh:
        k_pp = jnp.einsum("atd,bsd->abts", fa.p, fb.p)
        total = total + jnp.sum(k_pp * jnp.einsum("atld,bsld->abts", fa.streams, fb.streams), axis=(2, 3))
    return total


@highest
def gram_scores(fa: SeqFeatures, fb: SeqFeatures, *, preset: str = "ch1", chunk: int = 16) -> Float[Array, "a b"]:
    """``S(a, b)`` for every pair (token-Gram form), chunked over the sequences of ``fb``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    rh, gh = PRESETS[preset][0], PRESETS[preset][1] is not None
    if gh and fa.streams.shape[2] == 0:
        raise ValueError(f"preset {preset!r} needs GH streams; build the features with gh=...")
    nb = fb.g.shape[0]
    pad = (-nb) % chunk
    padded = jax.tree.map(lambda x: jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1)), fb)
    blocks = jax.tree.map(lambda x: x.reshape(((nb + pad) // chunk, chunk) + x.shape[1:]), padded)
    out = jax.lax.map(lambda f: _pair_block(fa, f, rh, gh), blocks)  # [nb/chunk, a, chunk]
    return jnp.moveaxis(out, 0, 1).reshape(fa.g.shape[0], -1)[:, :nb]


@highest
def rh_scores(fa: SeqFeatures, fb: SeqFeatures, vocab_ids=None) -> Float[Array, "a b"]:
    """The RH (CH1) score through the materialised ``RH = Σ_t g_t ⊗ h_t`` restricted to the ids ``vocab_ids``
    (``|V′| × d`` per sequence, one matrix product for all pairs). RH is small, unlike GH (pitfall 20 concerns
    GH); the two forms of the CH1 score are equal (``tests/geometry/test_attribution.py``). ``vocab_ids`` must
    cover V′ (the columns where the features' g can be nonzero); None keeps all V rows."""
    ga, gb = (f.g if vocab_ids is None else f.g[..., jnp.asarray(vocab_ids)] for f in (fa, fb))
    rha = jnp.einsum("ntv,ntd->nvd", ga, fa.h).reshape(ga.shape[0], -1)
    rhb = jnp.einsum("ntv,ntd->nvd", gb, fb.h).reshape(gb.shape[0], -1)
    return rha @ rhb.T


def rh_gh(f: SeqFeatures) -> tuple[Float[Array, "N V D"], Float[Array, "N D E"]]:
    """The explicit ``RH = Σ_t g_t ⊗ h_t`` and ``GH = Σ_t P_t ⊗ concat_l h̃_{l,t}`` (tests only, pitfall 20)."""
    rh = jnp.einsum("ntv,ntd->nvd", f.g, f.h)
    cat = f.streams.reshape(f.streams.shape[:2] + (-1,))
    return rh, jnp.einsum("ntd,nte->nde", f.p, cat)


@highest
def explicit_scores(fa: SeqFeatures, fb: SeqFeatures, *, preset: str = "ch1") -> Float[Array, "a b"]:
    """``⟨RH_a, RH_b⟩ + ⟨GH_a, GH_b⟩`` from the materialised RH/GH (the reference for :func:`gram_scores`)."""
    rh, gh = PRESETS[preset][0], PRESETS[preset][1] is not None
    (rha, gha), (rhb, ghb) = rh_gh(fa), rh_gh(fb)
    total = jnp.zeros((fa.g.shape[0], fb.g.shape[0]), fa.g.dtype)
    if rh:
        total = total + jnp.einsum("avd,bvd->ab", rha, rhb)
    if gh:
        total = total + jnp.einsum("ade,bde->ab", gha, ghb)
    return total
