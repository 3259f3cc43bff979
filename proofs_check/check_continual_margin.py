"""Claim 4 (spec §2.7): even α = 0.9 (10 % replay) keeps old-fact probability above the naive level.

Setting as in ``check_continual_replay``. The predicted margin is m = P_old(θ_0.9) − P_old^naive, with θ_0.9
the exact α-mixture optimum and P_old^naive = (1/F) Σ_f Pr_new(o_f | X_f) (closed form).

Rows:
1. The margin is positive by a clear amount: m ≥ 0.05 (five percentage points). (That GD reaches θ_α exactly is
   row 1 of ``check_continual_replay``.)
2. Minibatch SGD from θ* (n = 64, η_Y = 2, 4000 steps, 64 seeds per α, time average over the last 1000 steps):
   measured margin vs m in units of its standard error (seed-to-seed). The SGD mean is biased by O(η/n) =
   O(0.03) relative to θ_α at second order; the row reports the z-score with tolerance 4. After 4000 steps the
   slowest mode (η λ⁺_min ≈ 2e-3 per step) is down by e⁻⁸.
3. The SGD margin is positive: z = margin / s.e. ≥ 4.
4. Quoted: "about 10 % replay already preserves old facts". REFUTED if α = 0.9 loses more than 10 % of what
   naive CPT loses: lost fraction = (P_old(θ*) − P_old(θ_0.9)) / (P_old(θ*) − P_old^naive).

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_continual_margin runs/proofs
"""

from __future__ import annotations

import jax
import numpy as np

from cfka_jax.theory.cpt import ContinualConfig, make_continual_worlds, pretrained
from cfka_jax.theory.cpt_sweep import SweepSpec, run_grid, theory_grid
from cfka_jax.theory.cpt_predictions import naive_old_prob, old_prob_at
from cfka_jax.proofs_check.common import at_least, holds, main_for, refuted, require_x64, save_figure

ALPHAS = (0.9, 1.0)
TOL_Z = 4.0
TOL_PRESERVED = 0.1  # "preserves": loses at most 10 % of the naive loss
SGD = dict(num_seeds=64, steps=4000, log_every=100, batch_size=64, eta_y=2.0)
WINDOW = 10  # last 10 logs = last 1000 steps
MIN_MARGIN = 0.05


def _plot(out_dir, trace_sgd, theory, p_naive, p_star):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    t = np.arange(trace_sgd.old_prob.shape[1]) * SGD["log_every"]
    S = SGD["num_seeds"]
    for i, a in enumerate(ALPHAS):
        runs = np.asarray(trace_sgd.old_prob[i * S:(i + 1) * S])
        line, = ax.plot(t, runs.mean(0), label=f"α = {a:g}: SGD mean of {S} seeds (n = 64, η = 2)")
        ax.fill_between(t, np.percentile(runs, 10, 0), np.percentile(runs, 90, 0), alpha=0.2, color=line.get_color())
        ax.axhline(float(theory.old_prob[i]), ls="--", lw=1, color=line.get_color(), label=f"α = {a:g}: exact optimum")
    ax.axhline(p_star, color="gray", ls=":", label="after PT, P_old(θ*)")
    ax.axhline(p_naive, color="k", ls=":", label="naive closed form")
    ax.set(xlabel="CPT step t", ylabel="old-fact probability",
           title="10 % replay (α = 0.9) vs naive: margin above the naive level\n(band: 10–90 % of seeds)")
    ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "continual_margin")


def run(out_dir):
    require_x64()
    worlds = make_continual_worlds(ContinualConfig())
    spec_sgd = SweepSpec(ks=(0.0,), alphas=ALPHAS, **SGD)
    theory = theory_grid(worlds, spec_sgd)
    _, trace_sgd = run_grid(worlds, spec_sgd, theory, jax.random.key(1))
    p_naive = float(naive_old_prob(worlds, worlds.old_facts))
    p_star = float(old_prob_at(worlds, pretrained(worlds).Y))
    m_pred = float(theory.old_prob[0]) - p_naive
    S = SGD["num_seeds"]
    per_seed = np.asarray(trace_sgd.old_prob)[:, -WINDOW:].mean(axis=1).reshape(len(ALPHAS), S)
    m_sgd = per_seed[0].mean() - per_seed[1].mean()
    se = np.sqrt(per_seed[0].var(ddof=1) / S + per_seed[1].var(ddof=1) / S)
    lost = (p_star - float(theory.old_prob[0])) / (p_star - p_naive)
    _plot(out_dir, trace_sgd, theory, p_naive, p_star)
    return [
        at_least("continual-margin", "predicted α=0.9 margin m = P_old(θ_0.9) − P_old^naive ≥ 0.05", m_pred, MIN_MARGIN,
                 f"m = {float(theory.old_prob[0]):.6f} − {p_naive:.6f} = {m_pred:.6f}"),
        holds("continual-margin", "α=0.9 margin over naive, minibatch SGD = predicted m (|z|)", abs(m_sgd - m_pred) / se,
              TOL_Z, f"SGD margin {m_sgd:.4f} ± {se:.4f} vs m = {m_pred:.4f}"),
        at_least("continual-margin", "α=0.9 keeps old-fact prob above naive under SGD (margin / s.e.)", m_sgd / se, TOL_Z,
                 f"margin {m_sgd:.4f} ± {se:.4f}"),
        refuted("continual-margin", "a bar the paper does not set: 10 % replay loses ≤ 10 % of what naive loses",
                lost, TOL_PRESERVED,
                f"P_old: after PT {p_star:.4f}, α=0.9 {float(theory.old_prob[0]):.4f}, naive {p_naive:.4f}: α=0.9 loses "
                f"{lost:.0%} of what naive CPT loses (the paper's own statement, 'preserves old facts', is judged "
                "by the claim cfka.theory.replay-10pct)"),
    ]


if __name__ == "__main__":
    main_for(run, "runs/proofs")
