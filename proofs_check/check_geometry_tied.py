"""Lemma (token_force.md §3.2, tied heads): the readout-block lemma on a *functionally untied* Qwen, and the
decomposition of the literal shared-tensor block.

A tied head's tensor is both the input embedding and the readout. The spec's rule (pitfall 7): CH1 is the block
of a functionally untied head (a separate copy of the embedding used only as the readout, release flag
``--readout_sanity functional_untied``); the literal shared-tensor gradient gives
``CH1 + tied_in_in + tied_out_in + tied_in_out`` (``--readout_sanity tied_decomp``), whose extras are reported
separately and never added to CH1 + CH2. Claims (tiny random-init Qwen2 port with tied embeddings, the 30 pairs of
``check_geometry_readout``; normwise relative errors):

1. functionally untied: CH1 = readout block, ≤ 1e-5 (float32, precision ``highest``) and ≤ 1e-10 (float64);
2. literal shared-tensor block = CH1 + tied_in_in + tied_out_in + tied_in_out (float64, ≤ 1e-10);
3. REFUTED: "the tied shared-tensor gradient block is CH1" — off by far more than the float64 tolerance.

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_geometry_tied runs/proofs
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry import channels, onestep
from cfka_jax.geometry.net import Net, param_roles
from cfka_jax.proofs_check.check_geometry_readout import (
    OBS,
    ROWS,
    SEQ,
    TOL_F32,
    TOL_F64,
    UPD,
    _factors,
    rel_err,
)
from cfka_jax.proofs_check.common import holds, main_for, refuted, require_x64, save_figure
from cfka_jax.proofs_check.geometry_models import (
    build,
    float64_ports,
    qwen_cfg,
    random_tokens,
    untied_copy,
)


def _untied_lemma(tied, tokens, tol, tag):
    factors = _factors(untied_copy(tied), tokens)
    net, params, fo, fu, go, gu, _ = factors
    ch1 = channels.ch1(fo, fu)
    block = onestep.scope_sum(onestep.block_grams(go, gu), param_roles(params, net.cfg), "readout_only")
    claim = holds("geometry-tied", f"Qwen (tied), functionally untied: CH1 = readout block ({tag})",
                  rel_err(ch1, block), tol)
    return claim, ch1, onestep.tied_decomposition(go, gu, net.cfg)


def _literal_block(tied, tokens):
    net, params = Net.split(tied)
    both = onestep.TokenSet(tokens, jnp.asarray([r for r, _ in OBS + UPD], jnp.int32),
                            jnp.asarray([p for _, p in OBS + UPD], jnp.int32))
    grads = jax.jit(functools.partial(onestep.token_grads, net=net))(params, both)
    n = len(OBS)
    go, gu = jax.tree.map(lambda x: x[:n], grads), jax.tree.map(lambda x: x[n:], grads)
    return onestep.scope_sum(onestep.block_grams(go, gu), param_roles(params, net.cfg), "readout_only")


def _plot(out_dir, terms):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ch1 = np.asarray(terms["ch1"]).ravel()
    for name in ("tied_in_in", "tied_out_in", "tied_in_out", "literal"):
        ax.scatter(ch1, np.asarray(terms[name]).ravel(), s=12, label=name)
    ax.axline((0, 0), slope=1, color="k", lw=0.8, ls="--")
    ax.set(xlabel="CH1 (functionally untied readout block)", ylabel="term value",
           title="tied head: shared-tensor terms vs CH1 (float64)")
    ax.legend(fontsize=8)
    save_figure(fig, out_dir, "geometry_tied")


def run(out_dir):
    require_x64()
    tokens = random_tokens(jax.random.key(0), 37, ROWS, SEQ)
    claims = [_untied_lemma(build(qwen_cfg()), tokens, TOL_F32, "float32")[0]]
    with float64_ports():
        tied = build(qwen_cfg(jnp.float64))
        claim, ch1, terms = _untied_lemma(tied, tokens, TOL_F64, "float64")
        literal = _literal_block(tied, tokens)
    extras = terms["tied_in_in"] + terms["tied_out_in"] + terms["tied_in_out"]
    claims += [
        claim,
        holds("geometry-tied", "tied: shared-tensor block = CH1 + in_in + out_in + in_out (float64)",
              rel_err(terms["literal"], literal), TOL_F64),
        refuted("geometry-tied", "quoted naive form: tied shared-tensor block = CH1 (pitfall 7)",
                rel_err(ch1, literal), TOL_F64, f"max |tied extras| = {float(jnp.max(jnp.abs(extras))):.3g}, "
                f"max |CH1| = {float(jnp.max(jnp.abs(ch1))):.3g}"),
    ]
    _plot(out_dir, terms)
    return claims


if __name__ == "__main__":
    main_for(run, "runs/proofs")
