"""Per-token factors and the CH1 / named CH2 channels of one-step influence (spec §3.2–§3.3, §6.5).

For an observed token o and an update token u (a single-token SGD step ``θ' = θ + η∇θ log p_u``):

* ``CH1(o,u) = ⟨g_o, g_u⟩·⟨h_o, h_u⟩`` — raw dot products, h after the final norm. By the readout-block lemma it
  is exactly the readout block ``⟨∇_W log p_o, ∇_W log p_u⟩_F`` of an untied bias-free head (``∇_W log p = g hᵀ``).
* CH2 ("backbone channel") under the shared readout-force approximation ``δ ≈ Wᵀg`` along the residual:
  ``CH2(o,u) = ⟨Wᵀg_o, Wᵀg_u⟩·Σ_s⟨h̃_{s,o}, h̃_{s,u}⟩``. There is no generic CH2, only the named variants
  (pitfall 5), which differ in the streams s summed:

  ============  ===========================================================================================
  ch2           2L streams: ``input_layernorm(x_l)`` and the MLP input, l = 0..L−1 (learned γ, β)
  ch2_singleh   the L attention inputs only
  ch2_wo_rms    the raw pre-norm residuals at the attention and MLP inputs
  ch2_aggh      ``⟨Σ_s h̃_{s,o}, Σ_s h̃_{s,u}⟩`` over the 2L ``ch2`` streams (cross-stream terms kept)
  ch2_gwwg      ``⟨Wᵀg_o, Wᵀg_u⟩`` alone
  gh_raw        ``hidden_states[1..L−1]`` = raw inputs of blocks 1..L−1 (Sec. 4)
  gh_inputln    the same through ``layers[l].input_layernorm`` (Sec. 4)
  ============  ===========================================================================================

* ``seq5`` (Sec. 5.3): ``CH1 = gg·hh_l`` with ``hh_l`` the last block's normalised attention input, and
  ``CH2 = gwwg·(hh_oth + kembd)`` with ``hh_oth`` over blocks 0..L−2 and ``kembd`` an integer multiset overlap
  added without rescaling (pitfall 18; :func:`seq5`).

Every function returns a ``[n_o, n_u]`` matrix over all pairs of two token sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import flax.struct
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float

CH2_VARIANTS = ("ch2", "ch2_singleh", "ch2_wo_rms", "ch2_aggh", "ch2_gwwg", "gh_raw", "gh_inputln")


@flax.struct.dataclass
class TokenFeatures:
    """The forward-only factors of n tokens (one row each).

    Attributes:
        g: ``[n, V]`` force ``e_y − π``.
        h: ``[n, D]`` final post-norm state that scored the token.
        wtg: ``[n, D]`` readout projection ``Wᵀg``.
        logp: ``[n]`` ``log p(y)``.
        resid_attn, resid_mlp, norm_attn, norm_mlp: ``[n, L, D]`` block streams (``geometry/streams.py``).
    """

    g: Float[Array, "n V"]
    h: Float[Array, "n D"]
    wtg: Float[Array, "n D"]
    logp: Float[Array, " n"]
    resid_attn: Float[Array, "n L D"]
    resid_mlp: Float[Array, "n L D"]
    norm_attn: Float[Array, "n L D"]
    norm_mlp: Float[Array, "n L D"]


def gram(a_XD: Float[Array, "n D"], b_XD: Float[Array, "m D"]) -> Float[Array, "n m"]:
    return jnp.einsum("od,ud->ou", a_XD, b_XD)


def ch1(fo: TokenFeatures, fu: TokenFeatures) -> Float[Array, "o u"]:
    """``⟨g_o, g_u⟩·⟨h_o, h_u⟩`` for every pair."""
    return gram(fo.g, fu.g) * gram(fo.h, fu.h)


def gwwg(fo: TokenFeatures, fu: TokenFeatures) -> Float[Array, "o u"]:
    """``⟨Wᵀg_o, Wᵀg_u⟩`` for every pair."""
    return gram(fo.wtg, fu.wtg)


def streams_of(f: TokenFeatures, variant: str) -> Float[Array, "n s D"]:
    """The stack of streams h̃_s a CH2 / GH variant sums over."""
    table = {
        "ch2": lambda: jnp.concatenate([f.norm_attn, f.norm_mlp], axis=1),
        "ch2_aggh": lambda: jnp.concatenate([f.norm_attn, f.norm_mlp], axis=1),
        "ch2_singleh": lambda: f.norm_attn,
        "ch2_wo_rms": lambda: jnp.concatenate([f.resid_attn, f.resid_mlp], axis=1),
        "gh_raw": lambda: f.resid_attn[:, 1:],
        "gh_inputln": lambda: f.norm_attn[:, 1:],
    }
    if variant not in table:
        raise ValueError(f"variant {variant!r} has no streams; stream variants: {sorted(table)}")
    return table[variant]()


def stream_similarity(fo: TokenFeatures, fu: TokenFeatures, variant: str) -> Float[Array, "o u"]:
    """``Σ_s⟨h̃_{s,o}, h̃_{s,u}⟩`` (``ch2_aggh``: ``⟨Σ_s h̃_{s,o}, Σ_s h̃_{s,u}⟩``)."""
    so, su = streams_of(fo, variant), streams_of(fu, variant)
    if variant == "ch2_aggh":
        return gram(jnp.sum(so, axis=1), jnp.sum(su, axis=1))
    return jnp.einsum("osd,usd->ou", so, su)


def ch2(fo: TokenFeatures, fu: TokenFeatures, variant: str = "ch2") -> Float[Array, "o u"]:
    """A named CH2 variant (:data:`CH2_VARIANTS`) for every pair."""
    if variant not in CH2_VARIANTS:
        raise ValueError(f"unknown CH2 variant {variant!r}; choose from {CH2_VARIANTS} (no generic CH2)")
    if variant == "ch2_gwwg":
        return gwwg(fo, fu)
    return gwwg(fo, fu) * stream_similarity(fo, fu, variant)


def kembd(update_prefix: Sequence[int], observed: Sequence[int]) -> int:
    """``Σ_v count_u(v)·count_o(v)``: multiset overlap of the update prefix ``input_ids[:pos]`` and the prompt."""
    cu, co = Counter(int(t) for t in update_prefix), Counter(int(t) for t in observed)
    return sum(n * co[v] for v, n in cu.items())


def seq5(fo: TokenFeatures, fu: TokenFeatures, kembd_OU: Float[Array, "o u"]) -> dict[str, Float[Array, "o u"]]:
    """The Sec. 5.3 ``seq5`` terms: ``ch1 = gg·hh_l``, ``ch2 = gwwg·(hh_oth + kembd)``, ``ch2_no_kembd``, total."""
    hh_l = gram(fo.norm_attn[:, -1], fu.norm_attn[:, -1])
    hh_oth = jnp.einsum("osd,usd->ou", fo.norm_attn[:, :-1], fu.norm_attn[:, :-1])
    gg, gw = gram(fo.g, fu.g), gwwg(fo, fu)
    out = {"ch1": gg * hh_l, "ch2": gw * (hh_oth + kembd_OU.astype(gw.dtype)), "ch2_no_kembd": gw * hh_oth}
    out["total"] = out["ch1"] + out["ch2"]
    return out
