"""The Section-3 validation of one-step influence and its summaries (spec §3.4, §8).

For update tokens U and observed tokens O (their Cartesian product, optionally subsampled to ``max_pairs`` with
``random.Random(pair_seed)``), every pair gets ``ch1``, every CH2 variant, ``ch2_exact_backbone``,
``approx_raw = CH1 + ch2`` and ``approx = η·approx_raw`` (``ch2`` = the Sec. 3 variant), ``first_order_exact`` in
each scope, the actual ``delta_logp`` / ``delta_p`` after one SGD step on u, and the zero-step ``noise`` of the
re-score (:func:`pair_table`).

Summaries (:func:`summarize`): the §8 comparisons A = ``delta_logp`` vs ``first_order_exact``, B =
``first_order_exact`` vs ``approx``, C = ``delta_logp`` vs ``approx`` (Pearson, signed Spearman, Spearman of |·|,
sign agreement, slope through the origin), the same for CH1 alone, the Hoyer sparsity and density of each
quantity, the fp32 noise floor and the fraction of pairs below it (flagged, spec §8).
"""

from __future__ import annotations

import functools
import random

import jax
import numpy as np

from cfka_jax.geometry import channels, onestep
from cfka_jax.geometry.net import Net, param_roles
from cfka_jax.geometry.stats import compare, hoyer

QUANTITIES = ("ch1", "approx", "first_order_exact", "delta_logp")


def factors(params, obs: onestep.TokenSet, upd: onestep.TokenSet, *, net: Net) -> tuple:
    """``(features_o, features_u, grads_o, grads_u)``: forward factors and per-token gradients (jitted)."""
    feats, grads = onestep.jitted(onestep.token_features, net), onestep.jitted(onestep.token_grads, net)
    return feats(params, obs), feats(params, upd), grads(params, obs), grads(params, upd)


def pair_table(params, obs: onestep.TokenSet, upd: onestep.TokenSet, *, net: Net, eta: float,
               ch2_variant: str = "ch2", precomputed: tuple | None = None) -> dict[str, np.ndarray]:
    """Every per-pair quantity as ``[n_o, n_u]`` numpy arrays (float64 copies of the device values).

    ``precomputed``: the :func:`factors` of ``(obs, upd)`` when the caller already has them.
    """
    fo, fu, go, gu = precomputed if precomputed is not None else factors(params, obs, upd, net=net)
    grams = jax.jit(onestep.block_grams)(go, gu)
    roles = param_roles(params, net.cfg)
    out = {"ch1": channels.ch1(fo, fu)}
    out.update({v: channels.ch2(fo, fu, v) for v in channels.CH2_VARIANTS})
    out["ch2_exact_backbone"] = onestep.scope_sum(grams, roles, "backbone")
    for scope in onestep.SCOPES:
        if scope != "backbone":
            out[f"first_order_exact_{scope}"] = onestep.first_order_exact(grams, roles, scope, eta)
    out["first_order_exact"] = out["first_order_exact_all"]
    out["approx_raw"] = out["ch1"] + out[ch2_variant]
    out["approx"] = eta * out["approx_raw"]
    out.update(onestep.jitted(onestep.one_step_change, net)(params, obs, gu, eta))
    out["logp_o"] = np.broadcast_to(np.asarray(out.pop("logp"))[:, None], out["ch1"].shape)
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def block_accuracy(fo, fu, go, gu, params, *, net: Net) -> dict[str, float]:
    """App. B.2: Pearson of each block's CH2 term ``⟨Wᵀg_o, Wᵀg_u⟩·Σ_s⟨h̃_{s,o}, h̃_{s,u}⟩`` (its attention and MLP
    inputs) with the exact gradient product of that block's parameters, and of the full ``ch2`` with
    ``ch2_exact_backbone``."""
    from cfka_jax.geometry.stats import pearson

    grams = onestep.block_grams(go, gu)
    gw = channels.gwwg(fo, fu)
    out = {}
    for layer in range(net.num_layers):
        exact = functools.reduce(lambda a, b: a + b, [g for p, g in grams.items() if p[:2] == ("layers", layer)])
        sim = sum(np.einsum("od,ud->ou", getattr(fo, s)[:, layer], getattr(fu, s)[:, layer])
                  for s in ("norm_attn", "norm_mlp"))
        out[f"block{layer}"] = pearson(np.asarray(gw) * sim, exact)
    out["full"] = pearson(channels.ch2(fo, fu, "ch2"), onestep.scope_sum(grams, param_roles(params, net.cfg),
                                                                          "backbone"))
    return out


def subsample(n_o: int, n_u: int, max_pairs: int | None, pair_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(o, u) index arrays of the Cartesian product, subsampled to ``max_pairs`` with ``Random(pair_seed)``."""
    pairs = [(o, u) for u in range(n_u) for o in range(n_o)]
    if max_pairs is not None and len(pairs) > max_pairs:
        pairs = random.Random(pair_seed).sample(pairs, max_pairs)
    o, u = zip(*pairs)
    return np.asarray(o), np.asarray(u)


def flatten(table: dict[str, np.ndarray], o: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
    """The selected pairs of every quantity, as 1-D arrays."""
    return {k: v[o, u] for k, v in table.items()}


def summarize(pairs: dict[str, np.ndarray], *, eta: float) -> dict:
    """§8 comparisons, Hoyer sparsity/density and the noise floor of one flattened pair table (step ``eta``)."""
    d, fo, ap = pairs["delta_logp"], pairs["first_order_exact"], pairs["approx"]
    eta_ch1 = eta * pairs["ch1"]
    floor = float(np.max(np.abs(pairs["noise"])))
    ulp = float(np.max(np.spacing(np.abs(pairs["logp_o"]).astype(np.float32))))
    out = {"A_delta_vs_first_order": compare(d, fo), "B_first_order_vs_approx": compare(fo, ap),
           "C_delta_vs_approx": compare(d, ap), "C1_delta_vs_eta_ch1": compare(d, eta_ch1),
           "noise_floor": floor, "fp32_ulp_logp": ulp,
           "below_noise_fraction": float(np.mean(np.abs(d) <= max(floor, ulp))), "pairs": int(d.size)}
    out["hoyer"] = {k: hoyer(pairs[k]) for k in QUANTITIES}
    out["density"] = {k: 1.0 - v for k, v in out["hoyer"].items()}
    return out
