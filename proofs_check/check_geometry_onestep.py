"""One-step influence (token_force.md §3.1–§3.4, §8): η(CH1 + CH2) and the first-order term vs the actual change.

A tiny random-init Pythia port in float32 with matmul precision ``highest`` (the spec's one-step precision); 20
update tokens × 20 observed tokens (4 rows × 5 positions each, 400 pairs); η = 1e-4; ``ch2`` = the Sec. 3 variant.
Claims:

1. Comparison A: the exact first-order term ``η⟨∇log p_o, ∇log p_u⟩`` is the one-step change: Pearson with
   ``delta_logp`` ≥ 0.99, and sign agreement ≥ 0.99 on the pairs whose |delta_logp| is above the noise floor
   (the zero-step re-score difference, or the float32 spacing of log p when that is larger).
2. Comparison C: ``η(CH1 + ch2)`` carries the rank of the actual change: Spearman > 0 at p ≤ 1e-3 (Pearson,
   Spearman, sign agreement and slope in the detail line, with the noise floor).
3. App. B.2's accuracy statement [CODE]: the shared readout-force approximation is better in the final block
   than in the first block, and better than the full sum over blocks (Pearson of each block's
   ``⟨Wᵀg_o, Wᵀg_u⟩·Σ_s⟨h̃_s⟩`` with the exact gradient product of that block's parameters).

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_geometry_onestep runs/proofs
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry import onestep, validation
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.stats import compare, pearson, sign_agreement
from cfka_jax.proofs_check.common import at_least, holds, main_for, require_x64, save_figure
from cfka_jax.proofs_check.geometry_models import build, pythia_cfg, random_tokens

ETA = 1e-4
POSITIONS = np.arange(2, 12, 2)


def _token_set(tokens) -> onestep.TokenSet:
    rows = np.repeat(np.arange(tokens.shape[0]), len(POSITIONS))
    pos = np.tile(POSITIONS, tokens.shape[0])
    return onestep.TokenSet(jnp.asarray(tokens), jnp.asarray(rows, jnp.int32), jnp.asarray(pos, jnp.int32))


def _plot(out_dir, pairs):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(12, 3.8))
    d = pairs["delta_logp"]
    for a, key, label in zip(ax, ("first_order_exact", "approx", "ch1"),
                             ("η⟨∇log p_o, ∇log p_u⟩", "η(CH1 + ch2)", "CH1")):
        x = pairs[key] * (ETA if key == "ch1" else 1.0)
        a.scatter(x, d, s=6, alpha=0.6)
        a.axhline(0, color="k", lw=0.5)
        a.axvline(0, color="k", lw=0.5)
        a.set(xlabel=label if key != "ch1" else "η·CH1", ylabel="actual Δlog p_o",
              title=f"r = {pearson(x, d):.3f}, sign agr. = {sign_agreement(x, d):.2f}")
    save_figure(fig, out_dir, "geometry_onestep")


def run(out_dir):
    require_x64()
    tokens = np.asarray(random_tokens(jax.random.key(1), 37, 8, 12))
    net, params = Net.split(build(pythia_cfg()))
    obs, upd = _token_set(tokens[4:]), _token_set(tokens[:4])
    fac = validation.factors(params, obs, upd, net=net)
    table = validation.pair_table(params, obs, upd, net=net, eta=ETA, precomputed=fac)
    pairs = {k: v.ravel() for k, v in table.items()}
    summary = validation.summarize(pairs, eta=ETA)
    a, c = summary["A_delta_vs_first_order"], summary["C_delta_vs_approx"]
    floor = max(summary["noise_floor"], summary["fp32_ulp_logp"])
    above = np.abs(pairs["delta_logp"]) > floor
    sign_above = compare(pairs["delta_logp"][above], pairs["first_order_exact"][above])["sign_agreement"]
    acc = validation.block_accuracy(*fac, params, net=net)
    per_block, full = [acc[f"block{i}"] for i in range(net.num_layers)], acc["full"]
    c_detail = (f"Pearson {c['pearson']:.3f}, Spearman {c['spearman']:.3f} (p = {c['spearman_p']:.1e}), "
                f"sign agreement {c['sign_agreement']:.3f}, slope {c['slope']:.3f}; noise floor {floor:.2e}, "
                f"{summary['below_noise_fraction']:.1%} of {summary['pairs']} pairs at or below it")
    blocks = ", ".join(f"block {i}: {r:.3f}" for i, r in enumerate(per_block)) + f", full sum: {full:.3f}"
    claims = [
        at_least("geometry-onestep", "A: Pearson(Δlog p, η⟨∇log p_o, ∇log p_u⟩) (float32, highest)", a["pearson"],
                 0.99, f"Spearman {a['spearman']:.4f}, slope {a['slope']:.4f}"),
        at_least("geometry-onestep", "A: sign agreement above the noise floor", sign_above, 0.99,
                 f"{int(above.sum())} of {above.size} pairs above {floor:.2e}"),
        holds("geometry-onestep", "C: η(CH1 + ch2) vs Δlog p: Spearman > 0 (p-value)",
              c["spearman_p"] if c["spearman"] > 0 else 1.0, 1e-3, c_detail),
        holds("geometry-onestep", "App. B.2: final block better approximated than block 0 (r_0 − r_last)",
              per_block[0] - per_block[-1], 0.0, blocks),
        holds("geometry-onestep", "App. B.2: final block better approximated than the full sum (r_full − r_last)",
              full - per_block[-1], 0.0, blocks),
    ]
    _plot(out_dir, pairs)
    return claims


if __name__ == "__main__":
    main_for(run, "runs/proofs")
