"""Independent route (diffrax): the gradient flow integrated by an adaptive 8th-order solver beside our RK4.

Every other check integrates the flow with ``theory/train.rk4_step`` or runs GD; an error shared by the model code
and that integrator would go unseen. Here the same vector fields are integrated by diffrax's Dopri8 (adaptive,
rtol = atol = 1e-12) and compared with the closed forms and with our RK4:

1. Conservation (spec §2.5; world and rates of ``check_conservation``): c_s = z_s²/η_Z − Σ_o y_os²/η_Y along the
   Dopri8 flow over τ = 20 (rel. drift, as in that check).
2. Our RK4 (dt = 0.05) and Dopri8 reach the same (Y, Z) at τ = 20 (max |Δ| / max |·|).
3. Taylor evolution (spec §2.4; world of ``check_taylor``, Z fixed, Y from U + ε·noise): the Dopri8 flow follows
   exp(−η K τ) e(0) for τ ∈ [0, 400] (max ‖Δe‖ / ‖e(0)‖, O(ε) linearisation error).
4. Our RK4 (dt = 0.1) on the same Y-flow agrees with Dopri8 (max ‖Δe‖ / ‖e(0)‖).
5. Continual convergence points (spec §2.7; worlds of ``check_continual_*``): the CPT flow Ẏ = −∇(ℓ_α + (k/2)‖Y −
   Y*‖²_w) from θ* integrated to τ = 4·10⁴ reaches the Newton minimiser θ_{k,α} for true replay α ∈ {0.5, 0.9,
   1} (k = 0) and EWC k ∈ {1, 10} (α = 1): max |old-fact prob gap|. (k = 100 is left out: it is stiff,
   ~10⁵ explicit steps; an implicit solver reaches it but costs ~25 s of compilation.)

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_diffrax runs/proofs
"""

from __future__ import annotations

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.theory import dynamics as dyn
from cfka_jax.theory.conservation import derived_quantity, relative_drift
from cfka_jax.theory.cpt import (ContinualConfig, active_block, cpt_grad, design, diagonal_fisher,
                                 make_continual_worlds, mixture_joint, pretrained)
from cfka_jax.theory.cpt_predictions import old_prob_at
from cfka_jax.theory.cpt_sweep import SweepSpec, replay_joint, theory_grid
from cfka_jax.theory.model import YZParams, init_yz
from cfka_jax.theory.train import Rates, SGDConfig, flow_field, gradient_flow
from cfka_jax.proofs_check import check_conservation as cons
from cfka_jax.proofs_check import check_taylor as tay
from cfka_jax.proofs_check.common import holds, main_for, require_x64, save_figure
from cfka_jax.proofs_check.worlds import small_world

RTOL = ATOL = 1e-12
TOL_RK4 = 1e-8  # as check_conservation: RK4 at dt = 0.05 is O(dt⁴) ≈ 6e-6 · C; measured far below
TAYLOR_T, TAYLOR_DT = 400.0, 0.1
CPT_T = 4e4
CPT_POINTS = ((0.0, 0.5), (0.0, 0.9), (0.0, 1.0), (1.0, 1.0), (10.0, 1.0))  # (k, α)
TOL_CONVERGED = 1e-6  # as check_continual_*: slowest rate ≥ 5e-4 per unit τ, so e^{−20} of an O(1) gap at τ = 4e4


def _solve(field, y0, t1, ts=None, max_steps=20_000):
    saveat = dfx.SaveAt(ts=ts) if ts is not None else dfx.SaveAt(t1=True)
    return dfx.diffeqsolve(dfx.ODETerm(lambda t, y, args: field(y)), dfx.Dopri8(), 0.0, t1, None, y0, saveat=saveat,
                           stepsize_controller=dfx.PIDController(rtol=RTOL, atol=ATOL), max_steps=max_steps)


def _conservation():
    world = small_world()
    rates = Rates(cons.ETA_Y, cons.ETA_Z)
    p0 = init_yz(jax.random.key(7), world.vocab_size, scale=cons.INIT)
    ts = jnp.linspace(0.0, cons.TAU, 41)
    sol = jax.jit(lambda p: _solve(lambda y: flow_field(y, world, rates), p, cons.TAU, ts))(p0)
    c = jax.vmap(lambda Y, Z: derived_quantity(YZParams(Y, Z), world, cons.ETA_Y, cons.ETA_Z))(sol.ys.Y, sol.ys.Z)
    drift = relative_drift(c, sol.ys.Z[:, :, world.query_token] ** 2 / cons.ETA_Z)
    cfg = SGDConfig(steps=int(round(cons.TAU / cons.RK4_DT)), log_every=int(round(cons.TAU / cons.RK4_DT)))
    rk4, _ = jax.jit(lambda p: gradient_flow(p, world, rates, cons.RK4_DT, cfg=cfg,
                                             observe=lambda q: jnp.zeros(())))(p0)
    gap = max(float(jnp.max(jnp.abs(a - b[-1])) / jnp.max(jnp.abs(b[-1]))) for a, b in zip(rk4, sol.ys))
    return drift, gap, int(sol.stats["num_steps"]), (np.asarray(ts), np.asarray(c))


def _taylor():
    world, z, Z, U, K = tay._setup()
    Y0 = tay._perturb(world, U, jax.random.key(1), tay.EPS)
    e0 = dyn.flatten_error(Y0, U, world)
    rates = Rates(tay.ETA, 0.0)
    field = lambda D: flow_field(YZParams(U + D, Z), world, rates).Y  # integrate D = Y − U: tolerances act on e
    ts = jnp.linspace(0.0, TAYLOR_T, 21)
    sol = jax.jit(lambda d: _solve(field, d, TAYLOR_T, ts))(Y0 - U)
    e_dfx = jax.vmap(lambda D: dyn.flatten_error(U + D, U, world))(sol.ys)
    pred = dyn.error_evolution(K, e0, tay.ETA, mode="flow")(ts)
    steps = int(round(TAYLOR_T / TAYLOR_DT))
    cfg = SGDConfig(steps=steps, log_every=steps // 20)
    _, e_rk4 = jax.jit(lambda p: gradient_flow(p, world, rates, TAYLOR_DT, cfg=cfg,
                                               observe=lambda q: dyn.flatten_error(q.Y, U, world)))(YZParams(Y0, Z))
    rel = lambda a, b: float(jnp.max(jnp.linalg.norm(a - b, axis=-1)) / jnp.linalg.norm(e0))
    return rel(e_dfx, pred), rel(e_rk4, e_dfx), (np.asarray(ts), np.asarray(e_dfx), np.asarray(pred))


def _continual():
    worlds = make_continual_worlds(ContinualConfig())
    theta = pretrained(worlds)
    fisher = diagonal_fisher(theta, worlds.old)
    A, ystar, W = design(worlds), active_block(theta.Y, worlds), active_block(fisher, worlds)
    replay = replay_joint(worlds, "true")
    base = dict(num_seeds=1, steps=20, log_every=20, batch_size=None, eta_y=4.0)  # only θ is used
    spec = SweepSpec(ks=tuple(sorted({k for k, _ in CPT_POINTS})), alphas=tuple(sorted({a for _, a in CPT_POINTS})),
                     **base)
    th = theory_grid(worlds, spec)
    grid = list(zip(np.asarray(th.k).tolist(), np.asarray(th.alpha).tolist()))
    points = [(k, a, th.Y[grid.index((k, a))]) for k, a in CPT_POINTS]

    @jax.jit
    def endpoint(k, alpha):
        joint = mixture_joint(worlds.new.joint, replay, alpha)
        sol = _solve(lambda y: -cpt_grad(y, joint, A, ystar, W, k), ystar, CPT_T)
        return sol.ys[-1], sol.stats["num_steps"]

    rows = []
    for k, a, Y_theory in points:
        Y_end, n = endpoint(jnp.asarray(k, A.dtype), jnp.asarray(a, A.dtype))
        p_end = float(old_prob_at(worlds, theta.Y.at[worlds.new.objects, : A.shape[1]].set(Y_end)))
        rows.append((k, a, abs(p_end - float(old_prob_at(worlds, Y_theory))),
                     float(jnp.max(jnp.abs(Y_end - active_block(Y_theory, worlds)))), int(n)))
    return rows


def run(out_dir):
    require_x64()
    drift, rk4_gap, n_cons, cons_curve = _conservation()
    lin_err, rk4_taylor, taylor_curve = _taylor()
    cpt = _continual()
    _plot(out_dir, cons_curve, taylor_curve, cpt)
    cpt_text = ", ".join(f"k={k:g} α={a:g}: |ΔP_old|={g:.1e} max|ΔY|={d:.1e} ({n} steps)" for k, a, g, d, n in cpt)
    return [
        holds("diffrax", "derived c_s constant along the Dopri8 flow (rtol=atol=1e-12, rel. drift)", drift, TOL_RK4,
              f"{n_cons} adaptive steps over τ={cons.TAU:g}"),
        holds("diffrax", "our RK4 (dt=0.05) and Dopri8 reach the same (Y, Z) at τ=20 (max rel. diff)", rk4_gap, TOL_RK4),
        holds("diffrax", f"Dopri8 flow of Y (Z fixed) follows exp(−ηKτ) e0, τ ≤ {TAYLOR_T:g} (ε={tay.EPS}, rel.)",
              lin_err, tay.TOL_LINEAR),
        holds("diffrax", f"our RK4 (dt={TAYLOR_DT}) Taylor flow = Dopri8 flow (max ‖Δe‖/‖e0‖)", rk4_taylor, TOL_RK4),
        holds("diffrax", "Dopri8 CPT flow reaches the Newton θ_{k,α} (replay α, EWC k; |ΔP_old|)",
              max(r[2] for r in cpt), TOL_CONVERGED, cpt_text),
    ]


def _plot(out_dir, cons_curve, taylor_curve, cpt):
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(14, 4))
    ts, cs = cons_curve
    for s in range(0, cs.shape[1], 2):
        a.plot(ts, cs[:, s] - cs[0, s], label=f"token {s}")
    a.set(xlabel="τ (Dopri8, η_Y=1, η_Z=0.2)", ylabel="c_s(τ) − c_s(0)", title="Conservation along the diffrax flow")
    a.legend(fontsize=7)
    ts, e_dfx, pred = taylor_curve
    for i in range(0, e_dfx.shape[1], 6):
        (ln,) = b.plot(ts, pred[:, i] / tay.EPS, "-", lw=1)
        b.plot(ts, e_dfx[:, i] / tay.EPS, "o", ms=3, color=ln.get_color())
    b.set(xlabel="τ (Z fixed)", ylabel="e[o, s](τ) / ε", title="Taylor: exp(−ηKτ)e0 (lines) vs Dopri8 (dots)")
    c.semilogy(range(len(cpt)), [max(r[3], 1e-17) for r in cpt], "o", label="max |Y_diffrax − θ_Newton|")
    c.semilogy(range(len(cpt)), [max(r[2], 1e-17) for r in cpt], "x", label="|ΔP_old|")
    c.set_xticks(range(len(cpt)), [f"k={k:g}\nα={a:g}" for k, a, *_ in cpt], fontsize=7)
    c.axhline(TOL_CONVERGED, color="k", ls="--", label="tolerance")
    c.set(title=f"CPT flow endpoint (τ={CPT_T:g}) vs Newton", ylabel="gap")
    c.legend(fontsize=7)
    save_figure(fig, out_dir, "diffrax")


if __name__ == "__main__":
    main_for(run, "runs/proofs")
