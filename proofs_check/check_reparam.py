"""Lemma (spec §2.2): the raw layer (E, W_Q, W_K, W_V, W_O) and the (Y, Z) reparameterisation give the same
logits and loss: Y = E W_O W_Vᵀ Eᵀ, Z = E W_K W_Qᵀ Eᵀ/√H.

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_reparam runs/proofs
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cfka_jax.theory.model import init_raw, raw_logits, raw_loss, raw_to_yz, yz_logits, yz_loss
from cfka_jax.theory.world import full_batch
from cfka_jax.proofs_check.common import holds, main_for, require_x64, save_figure
from cfka_jax.proofs_check.worlds import small_world

TOL = 1e-10  # relative, float64: pure algebra, only rounding separates the two forms


def run(out_dir):
    require_x64()
    world = small_world()
    tokens, targets = full_batch(world)
    errs_logit, errs_loss, pairs = [], [], []
    for seed in range(8):
        raw = init_raw(jax.random.key(seed), world.vocab_size, width=7, head_dim=5, scale=0.5)
        yz = raw_to_yz(raw)
        a = raw_logits(raw, tokens, world.objects)
        b = yz_logits(yz, tokens, world.objects)
        errs_logit.append(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a)))
        la, lb = raw_loss(raw, tokens, targets, world.objects), yz_loss(yz, tokens, targets, world.objects)
        errs_loss.append(jnp.abs(la - lb) / jnp.abs(la))
        pairs.append((a.ravel(), b.ravel()))
    _plot(pairs, out_dir)
    return [
        holds("reparam", "raw and (Y,Z) logits agree (max rel. err over 8 inits)", max(errs_logit), TOL),
        holds("reparam", "raw and (Y,Z) population losses agree", max(errs_loss), TOL),
    ]


def _plot(pairs, out_dir):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4))
    for a, b in pairs:
        ax.plot(a, b, ".", ms=3)
    lim = max(float(jnp.max(jnp.abs(a))) for a, _ in pairs)
    ax.plot([-lim, lim], [-lim, lim], "k-", lw=0.6, label="y = x")
    ax.set(xlabel="logit, raw layer (E, W_Q, W_K, W_V, W_O)", ylabel="logit, (Y, Z) form",
           title="Reparameterisation: raw vs (Y, Z) logits")
    ax.legend()
    save_figure(fig, out_dir, "reparam")


if __name__ == "__main__":
    main_for(run, "runs/proofs")
