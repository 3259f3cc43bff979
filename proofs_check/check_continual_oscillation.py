"""Claim 3 (spec §2.4, §2.7): the stationary SGD fluctuation of e_s and λ⁺_min of the mixture H̃_s.

Setting as in ``check_continual_replay``; each run starts *at* the exact α-mixture optimum θ_α and runs
minibatch SGD (batch n = 16, η_Y = 0.5, T = 2000 steps) on Pr_α; 128 seeds × 5 values of α = 640 runs in one
vmapped call. The probe token s is the first overwritten subject. Linear prediction (exact to first order in e):
e(t+1) = (I − ηH) e(t) − η g_t with Cov g = G/n, G the exact per-sample gradient covariance at θ_α, so
Cov e(T) = ``sgd_covariance(H, G, η, n)(T)`` (at T = 2000 within 0.5 % of its stationary value). G = H holds at a
Bayes optimum; the true-replay mixture of these worlds is naive Bayes, so θ_α is one and G = H (row 5), which
makes the stationary variance per mode η/(n(2 − ηλ)) (``dynamics.stationary_covariance``).

Rows:
1. tr Cov(e_s)(T) measured over seeds vs predicted, every α: max |z| with z = (measured − predicted)/s.e.,
   s.e. = √(2 tr Σ_s²/(R − 1)) (Gaussian fourth moments). Tolerance 4 (five tests; P(|z| > 4) ≈ 6e-5 each).
2. Fitted slope of ln A vs ln λ⁺_min(H̃_s) across α (A = √tr Cov(e_s)): measured vs predicted, in s.e. of the
   measured slope (propagated from the per-α s.e.). Tolerance 4.
3. Quoted: "the fluctuation grows with λ⁺_min(H̃)": the predicted slope is ≥ 0 (detail: how weakly).
4. The oscillation that matters for recall, Var of the overwritten old facts' probability, measured vs the
   linearised prediction ∇Pᵀ Σ ∇P, every α: max |z| with s.e. = Var √(2/(R − 1)). Tolerance 4.
5. G = H at θ_α for every α (max |G − H|; float64 rounding).

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_continual_oscillation runs/proofs
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.theory.cpt import (ContinualConfig, active_block, design, diagonal_fisher, make_continual_worlds,
                                       mixture_joint, pretrained)
from cfka_jax.theory.cpt_sweep import SweepSpec, run_grid, theory_grid
from cfka_jax.theory.cpt_predictions import gradient_covariance, objective_hessian, sgd_covariance, token_block_indices
from cfka_jax.proofs_check.common import at_least, holds, main_for, require_x64, save_figure

ALPHAS = (0.5, 0.67, 0.8, 0.9, 1.0)
SEEDS, STEPS, LOG_EVERY, BATCH, ETA = 128, 2000, 100, 16, 0.5
TOL_Z = 4.0
TOL_EXACT = 1e-12  # float64 rounding of O(1) sums


def _predicted(worlds, theory, times):
    """Σ(t) of the whole active block per α, ∇P_changed at θ_α and max |G − H|."""
    theta = pretrained(worlds)
    fisher = diagonal_fisher(theta, worlds.old)
    A = design(worlds)

    def one(alpha, eta, Y):
        joint = mixture_joint(worlds.new.joint, worlds.old.joint, alpha)
        H = objective_hessian(worlds, joint, theta.Y, fisher, 0.0, Y)
        G = gradient_covariance(worlds, joint, Y)
        cov = sgd_covariance(H, G, eta, BATCH)(times)
        def p_changed(y):  # mean probability of the overwritten old facts, y = vec(Y_OX)
            probs = jax.nn.softmax(A @ y.reshape(-1, A.shape[1]).T, axis=-1)
            return jnp.mean(probs[worlds.changed.context, worlds.changed.obj])

        grad = jax.grad(p_changed)(active_block(Y, worlds).reshape(-1))
        return cov, grad, jnp.max(jnp.abs(G - H))

    return jax.jit(jax.vmap(one))(theory.alpha, theory.eta, theory.Y)


def _slope(x, y, se):
    """Weighted least-squares slope of y on x and its standard error."""
    w = 1.0 / se**2
    xm = np.sum(w * x) / np.sum(w)
    sxx = np.sum(w * (x - xm) ** 2)
    return float(np.sum(w * (x - xm) * y) / sxx), float(1.0 / np.sqrt(sxx))


def _plot(out_dir, t, meas_t, pred_t, lam, amp_m, amp_se, amp_p, slopes, sd_m, sd_p):
    import matplotlib.pyplot as plt

    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 4.4))
    for i, a in enumerate(ALPHAS):
        line, = ax.plot(t, meas_t[i], "o", ms=3, label=f"α = {a:g} measured")
        ax.plot(t, pred_t[i], "-", lw=1, color=line.get_color())
    ax.set(xlabel="SGD step t from θ_α (n = 16, η_Y = 0.5)", ylabel="tr Cov(e_s) over 128 seeds",
           title="Fluctuation of the probe column e_s\n(lines: linear theory Σ(t), exact G ≠ H)")
    ax.legend(fontsize=7)
    bx.errorbar(lam, amp_m, yerr=amp_se, fmt="o", label=f"measured (slope {slopes[0]:.2f} ± {slopes[1]:.2f})")
    bx.plot(lam, amp_p, "k+", ms=12, label=f"predicted (slope {slopes[2]:.3f})")
    for i, (x, y, a) in enumerate(zip(lam, amp_p, ALPHAS)):
        bx.annotate(f"α={a:g}", (x, y), fontsize=7, xytext=(4, -12 - 9 * i), textcoords="offset points")
    bx.set(xlabel="λ⁺_min(H̃_s) at θ_α", ylabel="amplitude A = √tr Cov(e_s) at t = 2000",
           title="e_s amplitude vs λ⁺_min of the mixture H̃_s\n(ln-ln slopes fitted across α)")
    bx.xaxis.set_major_locator(plt.MaxNLocator(4))
    bx.legend(fontsize=7)
    cx.plot(ALPHAS, sd_m, "o", label="measured (128 seeds)")
    cx.plot(ALPHAS, sd_p, "k+", ms=12, label="linear theory √(∇Pᵀ Σ ∇P)")
    cx.set(xlabel="new-data fraction α", ylabel="sd of overwritten-old-fact probability at t = 2000",
           title="Amplitude vs α: the 'reminder' oscillation\nof the overwritten facts' probability")
    cx.legend(fontsize=7)
    return save_figure(fig, out_dir, "continual_oscillation")


def run(out_dir):
    require_x64()
    worlds = make_continual_worlds(ContinualConfig())
    spec = SweepSpec(ks=(0.0,), alphas=ALPHAS, num_seeds=SEEDS, steps=STEPS, log_every=LOG_EVERY, batch_size=BATCH,
                     eta_y=ETA, start="optimum")
    theory = theory_grid(worlds, spec)
    _, trace = run_grid(worlds, spec, theory, jax.random.key(0))
    t = np.arange(STEPS // LOG_EVERY + 1) * LOG_EVERY
    cov, grad, g_minus_h = _predicted(worlds, theory, jnp.asarray(t, worlds.Z.dtype))
    idx = np.asarray(token_block_indices(worlds, worlds.probe_token))
    cols = np.asarray(trace.probe_column).reshape(len(ALPHAS), SEEDS, t.size, -1)
    cov = np.asarray(cov)
    sig_T = cov[:, -1][:, idx][:, :, idx]
    pred_t = np.trace(cov[:, :, idx][:, :, :, idx], axis1=2, axis2=3)
    meas_t = np.array([[np.trace(np.cov(cols[i, :, j].T)) for j in range(t.size)] for i in range(len(ALPHAS))])
    se = np.sqrt(2 * np.einsum("aij,aji->a", sig_T, sig_T) / (SEEDS - 1))
    z_cov = (meas_t[:, -1] - pred_t[:, -1]) / se
    lam = np.asarray(theory.htilde_lam_min)
    amp_m, amp_p = np.sqrt(meas_t[:, -1]), np.sqrt(pred_t[:, -1])
    amp_se = se / (2 * amp_p)
    s_m, s_se = _slope(np.log(lam), np.log(amp_m), amp_se / amp_p)
    s_p, _ = _slope(np.log(lam), np.log(amp_p), amp_se / amp_p)
    changed = np.asarray(trace.changed_prob).reshape(len(ALPHAS), SEEDS, -1)[:, :, -1]
    var_m = changed.var(axis=1, ddof=1)
    var_p = np.einsum("ai,aij,aj->a", np.asarray(grad), cov[:, -1], np.asarray(grad))
    z_p = (var_m - var_p) / (var_p * np.sqrt(2 / (SEEDS - 1)))
    _plot(out_dir, t, meas_t, pred_t, lam, amp_m, amp_se, amp_p, (s_m, s_se, s_p), np.sqrt(var_m), np.sqrt(var_p))
    rows = ", ".join(f"α={a:g}: λ⁺_min={l:.4f} trCov meas {m:.4f} pred {p:.4f} (z={z:+.1f})"
                     for a, l, m, p, z in zip(ALPHAS, lam, meas_t[:, -1], pred_t[:, -1], z_cov))
    prob = ", ".join(f"α={a:g}: sd meas {np.sqrt(m):.4f} pred {np.sqrt(p):.4f} (z={z:+.1f})"
                     for a, m, p, z in zip(ALPHAS, var_m, var_p, z_p))
    rel_a = amp_p.max() / amp_p.min() - 1
    rel_l = lam.max() / lam.min() - 1
    return [
        holds("continual-oscillation", "tr Cov(e_s)(T) under SGD = linear theory (max |z| over α)", np.max(np.abs(z_cov)),
              TOL_Z, rows),
        holds("continual-oscillation", "slope d ln A / d ln λ⁺_min(H̃_s): measured vs predicted (|z|)",
              abs(s_m - s_p) / s_se, TOL_Z, f"measured {s_m:.3f} ± {s_se:.3f}, predicted {s_p:.4f}"),
        at_least("continual-oscillation",
                 "the linear theory predicts a fluctuation growing with λ⁺_min(H̃) (slope ≥ 0)", s_p, 0.0,
                 f"holds in sign only: across α, λ⁺_min(H̃_s) varies by {rel_l:.0%} but the predicted amplitude by "
                 f"{rel_a:.1%} (per-mode variance ≈ η/(2n) when G ≈ H, almost independent of λ); a prediction only: the "
                 "paper's statement is judged on the measured amplitude by the claim cfka.theory.replay-oscillation"),
        holds("continual-oscillation", "sd of overwritten-old-fact probability = linear theory (max |z| over α)",
              np.max(np.abs(z_p)), TOL_Z, prob),
        holds("continual-oscillation", "gradient-noise covariance G = Hessian H at θ_α (max |G − H| over α)",
              float(np.max(np.asarray(g_minus_h))), TOL_EXACT, "true-replay mixtures of these worlds are naive Bayes"),
    ]


if __name__ == "__main__":
    main_for(run, "runs/proofs")
