"""Lemma (token_force.md §3.2): CH1 is the readout block of the gradient inner product, and its corollaries.

For an untied bias-free readout ``z = Wh``, ``∇_W log p_y = g hᵀ``, so
``⟨∇_W log p_o, ∇_W log p_u⟩_F = (g_o·g_u)(h_o·h_u) = CH1`` exactly. Claims on a tiny random-init Pythia port
(untied ``embed_out``), 30 (o, u) pairs drawn within and across sequences; the error of a matrix of pair values
is normwise, ``max |a − b| / max |b|`` (a per-pair ratio is not a rounding bound: CH1 is a product of inner
products that can cancel to near zero):

1. CH1 = readout block, ≤ 1e-5 in float32 with matmul precision ``highest`` and ≤ 1e-10 in float64 (the port's
   own code re-run in float64, ``proofs_check/geometry_models.py``).
2. Corollary 1: ``first_order_exact(readout_only) = η·CH1`` (float64).
3. Corollary 2 (untied): ``first_order_exact(all)/η = CH1 + input-embedding block + ch2_exact_backbone`` (float64).
4. Order test (float64): ``|delta_logp − first_order_exact|`` scales as η² for η ∈ {1e-3, 1e-4, 1e-5}
   (log–log slope within 2 ± 0.1).

Tied heads: ``check_geometry_tied.py``.

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_geometry_readout runs/proofs
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry import channels, onestep
from cfka_jax.geometry.net import Net, param_roles
from cfka_jax.proofs_check.common import holds, main_for, require_x64, save_figure
from cfka_jax.proofs_check.geometry_models import build, float64_ports, pythia_cfg, random_tokens

TOL_F32, TOL_F64 = 1e-5, 1e-10
ETA = 1e-4
ETAS = (1e-3, 1e-4, 1e-5)
ROWS, SEQ = 3, 9
OBS = ((0, 2), (0, 5), (1, 3), (1, 8), (2, 1), (2, 6))  # (row, target position): within and across rows
UPD = ((0, 4), (1, 3), (1, 7), (2, 2), (2, 8))  # 6 × 5 = 30 pairs, 10 of them within one row


def _token_set(tokens, picks):
    rows, pos = zip(*picks)
    return onestep.TokenSet(tokens, jnp.asarray(rows, jnp.int32), jnp.asarray(pos, jnp.int32))


def rel_err(a, b) -> float:
    """Normwise relative error ``max |a − b| / max |b|`` of two matrices of pair values."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def pair_err(a, b) -> float:
    """Median per-pair relative error (reported, not claimed)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.median(np.abs(a - b) / np.abs(b)))


def _factors(model, tokens):
    """Features and per-token gradients of the observed and update tokens (jitted, precision highest).

    Both token sets go through one call (one compilation) and are split afterwards.
    """
    net, params = Net.split(model)
    both = _token_set(tokens, OBS + UPD)
    n = len(OBS)
    feats = jax.jit(functools.partial(onestep.token_features, net=net))(params, both)
    grads = jax.jit(functools.partial(onestep.token_grads, net=net))(params, both)
    head, tail = (lambda t: jax.tree.map(lambda x: x[:n], t)), (lambda t: jax.tree.map(lambda x: x[n:], t))
    return net, params, head(feats), tail(feats), head(grads), tail(grads), _token_set(tokens, OBS)


def _lemma_claim(factors, tol, tag):
    net, params, fo, fu, go, gu, _ = factors
    grams, roles = onestep.block_grams(go, gu), param_roles(params, net.cfg)
    ch1 = channels.ch1(fo, fu)
    block = onestep.scope_sum(grams, roles, "readout_only")
    detail = (f"{ch1.size} pairs, max |CH1| = {float(jnp.max(jnp.abs(ch1))):.3g}, median per-pair relative "
              f"error {pair_err(ch1, block):.2e} ({tag})")
    claim = holds("geometry-readout", f"Pythia: CH1 = readout block of ⟨∇log p_o, ∇log p_u⟩ ({tag})",
                  rel_err(ch1, block), tol, detail)
    return claim, ch1, grams, roles


def _corollaries(ch1, grams, roles):
    fo1 = onestep.first_order_exact(grams, roles, "readout_only", ETA)
    total = onestep.first_order_exact(grams, roles, "all", ETA) / ETA
    emb = sum(g for p, g in grams.items() if roles[p] == "embedding")
    parts = ch1 + emb + onestep.scope_sum(grams, roles, "backbone")
    return [holds("geometry-readout", "corollary 1: first_order_exact(readout_only) = η·CH1 (float64)",
                  rel_err(fo1, ETA * ch1), TOL_F64),
            holds("geometry-readout", "corollary 2: first_order_exact(all)/η = CH1 + embedding + ch2_exact_backbone",
                  rel_err(parts, total), TOL_F64, f"embedding block max {float(jnp.max(jnp.abs(emb))):.3g}")]


def _order_claim(factors, grams, roles):
    net, params, _, _, _, gu, obs = factors
    fo = onestep.first_order_exact(grams, roles, "all", 1.0)
    change = jax.jit(functools.partial(onestep.one_step_change, net=net))
    resid = []
    for eta in ETAS:
        ch = change(params, obs, gu, eta)
        resid.append(float(jnp.median(jnp.abs(ch["delta_logp"] - eta * fo))))
    slope = float(np.polyfit(np.log(ETAS), np.log(resid), 1)[0])
    detail = "median residuals " + ", ".join(f"η={e:g}: {r:.3g}" for e, r in zip(ETAS, resid))
    return holds("geometry-readout", "order test: |Δlog p − first_order_exact| ∝ η² (|slope − 2|, float64)",
                 abs(slope - 2.0), 0.1, f"slope {slope:.4f}; {detail}"), resid


def _plot(out_dir, pythia_pairs, resid):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.8))
    ch1, block = pythia_pairs
    ax[0].scatter(block.ravel(), ch1.ravel(), s=14)
    lim = np.abs(block).max() * 1.1
    ax[0].plot([-lim, lim], [-lim, lim], "k--", lw=0.8)
    ax[0].set(xlabel="readout block ⟨∇_W log p_o, ∇_W log p_u⟩", ylabel="CH1 = (g_o·g_u)(h_o·h_u)",
              title="readout-block lemma (Pythia, float64)")
    ax[1].loglog(ETAS, resid, "o-", label="median |Δlog p − first order|")
    ax[1].loglog(ETAS, resid[1] * (np.asarray(ETAS) / ETAS[1]) ** 2, "k--", lw=0.8, label="slope 2")
    ax[1].set(xlabel="η", title="second-order remainder", ylabel="residual")
    ax[1].legend(fontsize=8)
    save_figure(fig, out_dir, "geometry_readout")


def run(out_dir):
    require_x64()
    tokens = random_tokens(jax.random.key(0), 37, ROWS, SEQ)
    claim32 = _lemma_claim(_factors(build(pythia_cfg()), tokens), TOL_F32, "float32")[0]
    with float64_ports():
        factors = _factors(build(pythia_cfg(jnp.float64)), tokens)
        claim64, ch1, grams, roles = _lemma_claim(factors, TOL_F64, "float64")
        order, resid = _order_claim(factors, grams, roles)
    block = onestep.scope_sum(grams, roles, "readout_only")
    _plot(out_dir, (np.asarray(ch1), np.asarray(block)), resid)
    return [claim32, claim64, *_corollaries(ch1, grams, roles), order]


if __name__ == "__main__":
    main_for(run, "runs/proofs")
