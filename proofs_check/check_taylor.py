"""Lemma (spec §2.4): Taylor error evolution e(t) = Y(t) − U around the reference optimum, Z fixed.

Closed form (``cfka_jax/theory/dynamics.py``): E e(t) = (I − η_Y K)^t e(0) with K the Hessian of the population
loss at U; Cov e(t) of minibatch SGD from the Lyapunov recursion with gradient-noise covariance K/n.

Claims checked (float64, small world, attention z_s drawn in [0.5, 2] so that z_s ≠ 1):
1. t = 0 returns e(0); a vectorised t equals pointwise evaluation.
2. Full-batch GD from U + ε·noise follows the closed form (error O(ε) relative).
3. t → ∞: GD reaches the projection of e(0) on null(K) (the identifiable part of e decays to 0).
4. Rates: the slowest mode decays by 1 − η λ⁺_min(K) per step, the fastest by |1 − η λ_max(K)|;
   GD is stable iff η < 2/λ_max.
5. Minibatch SGD: the mean over seeds follows the closed form and the covariance follows the Lyapunov
   formula, within Monte-Carlo error.
6. Single-token form: one step of e_s is (I − η z_s² δ̄_s H̃_s) e_s (derived, PASS); the quoted
   (I − η z_s δ̄_s H̃_s) is REFUTED when z_s ≠ 1.

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_taylor runs/proofs
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from cfka_jax.theory import dynamics as dyn
from cfka_jax.theory.model import YZParams
from cfka_jax.theory.optimum import reference_optimum
from cfka_jax.theory.train import Rates, SGDConfig, train_sgd
from cfka_jax.proofs_check.common import holds, main_for, refuted, require_x64, save_figure
from cfka_jax.proofs_check.worlds import small_world

EPS = 1e-4  # size of the initial perturbation for the deterministic checks
TOL_LINEAR = 10 * EPS  # O(ε) relative linearisation error
TOL_EXACT = 1e-12
ETA = 1.0
SEEDS, BATCH, ETA_SGD, EPS_SGD, T_SGD = 512, 16, 0.02, 0.02, 200
Z_SCORE = 5.0  # max |mean − prediction| / standard error over coordinates (≈ 3 expected for 45 coords)


def _setup():
    world = small_world()
    z = jax.random.uniform(jax.random.key(0), (world.vocab_size,), minval=0.5, maxval=2.0)
    Z = jnp.zeros((world.vocab_size,) * 2).at[:, world.query_token].set(z)
    U = reference_optimum(world, z)
    return world, z, Z, U, dyn.error_hessian(world, U, Z)


def _perturb(world, U, key, eps, column=None):
    noise = jax.random.normal(key, U.shape)
    if column is not None:
        noise = jnp.zeros_like(U).at[:, column].set(noise[:, column])
    mask = jnp.zeros_like(U).at[world.objects, : world.context_tokens.shape[0]].set(1.0)
    return U + eps * noise * mask


@functools.partial(jax.jit, static_argnames=("steps", "log_every", "batch"))
def _run(world, Y0, Z, U, eta, key, *, steps, log_every, batch):
    cfg = SGDConfig(steps=steps, log_every=log_every, batch_size=batch)
    obs = lambda p: dyn.flatten_error(p.Y, U, world)
    return train_sgd(YZParams(Y0, Z), world, key, Rates(eta, 0.0), cfg=cfg, observe=obs)[1]


def _gd_errors(world, Y0, Z, U, eta, steps, log_every=1, batch=None, key=None):
    """Errors e(t) = vec(Y(t) − U) every ``log_every`` steps of (minibatch) GD on Y with Z fixed."""
    key = jax.random.key(0) if key is None else key
    return _run(world, Y0, Z, U, jnp.asarray(eta, U.dtype), key, steps=steps, log_every=log_every, batch=batch)


def _deterministic_claims(world, Z, U, K):
    Y0 = _perturb(world, U, jax.random.key(1), EPS)
    e0 = dyn.flatten_error(Y0, U, world)
    predict = dyn.error_evolution(K, e0, ETA)
    ts = jnp.arange(0, 401, 20)
    vec_err = jnp.max(jnp.abs(predict(ts) - jnp.stack([predict(t) for t in ts])))
    sim = _gd_errors(world, Y0, Z, U, ETA, 400, log_every=20)
    lin_err = jnp.max(jnp.linalg.norm(sim - predict(ts), axis=-1)) / jnp.linalg.norm(e0)
    long = _gd_errors(world, Y0, Z, U, ETA, 8_000, log_every=8_000)[-1]
    lim_err = jnp.linalg.norm(long - dyn.null_projection(K, e0)) / jnp.linalg.norm(e0)
    return [
        holds("taylor", "t=0 returns e(0)", jnp.max(jnp.abs(predict(0) - e0)), TOL_EXACT),
        holds("taylor", "vectorised t equals pointwise evaluation", vec_err, TOL_EXACT),
        holds("taylor", f"full-batch GD follows (I−ηK)^t e0 (ε={EPS}, 400 steps, rel.)", lin_err, TOL_LINEAR),
        holds("taylor", "t→∞: GD reaches the null-space projection of e0 (rel.)", lim_err, TOL_LINEAR),
    ], (ts, sim, predict(ts))


def _mode_factor(world, Z, U, K, eta, vec, steps):
    """Per-step factor of the error component along eigenvector ``vec``, measured over ``steps`` GD steps."""
    Y0 = U.at[world.objects, : world.context_tokens.shape[0]].add(dyn.unflatten_error(1e-6 * vec, world))
    traj = _gd_errors(world, Y0, Z, U, eta, steps, log_every=steps)
    ratio = (traj @ vec)[-1] / (traj @ vec)[0]
    return jnp.sign(ratio) * jnp.abs(ratio) ** (1.0 / steps)


def _rate_claims(world, Z, U, K):
    spec = dyn.spectrum(K)
    i_min = jnp.argmin(jnp.where(spec.positive, spec.evals, jnp.inf))
    slow = _mode_factor(world, Z, U, K, ETA, spec.evecs[:, i_min], 2000)
    eta_bad = 2.1 / spec.lam_max
    fast = _mode_factor(world, Z, U, K, eta_bad, spec.evecs[:, -1], 51)
    pred_slow, pred_fast = 1 - ETA * spec.lam_min_pos, 1 - eta_bad * spec.lam_max
    return [
        holds("taylor", "slowest mode decays by 1 − η λ⁺_min(K) per step (rel. err of 1 − factor)",
              jnp.abs(slow - pred_slow) / (1 - pred_slow), TOL_LINEAR,
              f"λ⁺_min(K)={float(spec.lam_min_pos):.4e}: measured factor {float(slow):.7f}, "
              f"predicted {float(pred_slow):.7f}"),
        holds("taylor", "at η=2.1/λ_max the top mode grows by 1 − η λ_max(K) < −1 (rel. err)",
              jnp.abs(fast - pred_fast) / jnp.abs(pred_fast), TOL_LINEAR,
              f"λ_max(K)={float(spec.lam_max):.4f}: measured factor {float(fast):.5f}, predicted "
              f"{float(pred_fast):.5f} (GD is stable iff η < 2/λ_max)"),
    ]


def _sgd_claims(world, Z, U, K):
    e0 = dyn.flatten_error(_perturb(world, U, jax.random.key(3), EPS_SGD), U, world)
    Y0 = U.at[world.objects, : world.context_tokens.shape[0]].add(dyn.unflatten_error(e0, world))
    run = lambda k: _gd_errors(world, Y0, Z, U, ETA_SGD, T_SGD, log_every=T_SGD, batch=BATCH, key=k)[-1]
    finals = jax.vmap(run)(jax.random.split(jax.random.key(4), SEEDS))
    mean_pred = dyn.error_evolution(K, e0, ETA_SGD)(T_SGD)
    cov_pred = dyn.error_covariance(K, ETA_SGD, BATCH)(T_SGD)
    se = jnp.sqrt(jnp.diag(cov_pred) / SEEDS)
    active = se > 0
    zmax = jnp.max(jnp.where(active, jnp.abs(jnp.mean(finals, 0) - mean_pred) / jnp.where(active, se, 1.0), 0.0))
    emp = jnp.cov(finals.T)
    tr_err = jnp.abs(jnp.trace(emp) - jnp.trace(cov_pred)) / jnp.trace(cov_pred)
    tr_tol = 4 * jnp.sqrt(2.0 / SEEDS)  # 4 standard errors of a variance estimate, the worst case of one mode
    return [
        holds("taylor", f"SGD mean over {SEEDS} seeds follows the closed form (max z-score)", zmax, Z_SCORE),
        holds("taylor", "SGD covariance trace follows the Lyapunov formula (rel.)", tr_err, float(tr_tol),
              f"trace Cov e({T_SGD}): measured {float(jnp.trace(emp)):.4e}, predicted "
              f"{float(jnp.trace(cov_pred)):.4e}"),
    ]


def _token_claims(world, z, Z, U, K):
    """One GD step from a perturbation of a single column s: exact to O(ε²) in the single-token form."""
    errs = {1: [], 2: []}
    details = []
    for s in range(world.context_tokens.shape[0]):
        Y0 = _perturb(world, U, jax.random.fold_in(jax.random.key(5), s), EPS, column=s)
        e_s0 = (Y0 - U)[world.objects, s]
        e_s1 = dyn.unflatten_error(_gd_errors(world, Y0, Z, U, ETA, 1)[-1], world)[:, s]
        block = dyn.token_block(world, z, s)
        for p in (1, 2):
            pred = dyn.token_factor(block, ETA, z_power=p) @ e_s0
            errs[p].append(jnp.linalg.norm(e_s1 - pred) / jnp.linalg.norm(e_s1 - e_s0))
        ev = jnp.linalg.eigvalsh(block.H_tilde)
        details.append(f"{world.token_kinds[s]}{s}: z={float(block.z):.2f} δ̄={float(block.delta):.2f} "
                       f"λmax(H̃)={float(ev[-1]):.3f} λ⁺min(H̃)={float(ev[ev > 1e-12][0]):.4f}")
    return [
        holds("taylor", "single-token step (I − η z_s² δ̄_s H̃_s) e_s (rel. err of the update)", max(errs[2]),
              TOL_LINEAR, "; ".join(details)),
        refuted("taylor", "quoted single-token step (I − η z_s δ̄_s H̃_s) e_s (rel. err of the update)",
                max(errs[1]), TOL_LINEAR, f"max rel. error of the quoted update over tokens: {float(max(errs[1])):.3f}"),
    ]


def run(out_dir):
    require_x64()
    world, z, Z, U, K = _setup()
    claims, curves = _deterministic_claims(world, Z, U, K)
    claims += _rate_claims(world, Z, U, K)
    claims += _sgd_claims(world, Z, U, K)
    claims += _token_claims(world, z, Z, U, K)
    _plot(*curves, out_dir)
    return claims


def _plot(ts, sim, pred, out_dir):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i in range(0, sim.shape[1], 6):
        (line,) = ax.plot(ts, pred[:, i] / EPS, "-", lw=1)
        ax.plot(ts, sim[:, i] / EPS, "o", ms=3, color=line.get_color())
    ax.set(xlabel="full-batch GD step (η_Y = 1, Z fixed)", ylabel="e[o, s](t) / ε",
           title="Taylor error evolution: closed form (lines) vs GD (dots)")
    save_figure(fig, out_dir, "taylor")


if __name__ == "__main__":
    main_for(run, "runs/proofs")
