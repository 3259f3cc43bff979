"""Energy bounds (token_force.md §5.1–§5.2) on 10⁵ random distributions, their tight cases and the threshold table.

With ``s = 1 − π_y`` and ``m = max_{k≠y} π_k``: ``E = ‖e_y − π‖² = s² + Σ_{k≠y} π_k²``. Claims (float64; violations
are measured as the largest amount by which a bound is exceeded, tolerance 1e-12 for rounding):

1. range: ``0 ≤ E ≤ 2``; the energy computed from log-probabilities is ``‖g‖²``;
2. competitor bound: ``E > 1 ⇒ m ≥ E − 1``;
3. target bounds: ``1 − √E ≤ π_y ≤ 1 − √(E/2)``, measured in their squared form ``s² ≤ E ≤ 2s²`` (the square
   root turns a 1e-16 rounding of E near 0 into a 1e-8 error);
4. tightness: ``π = e_k`` (k ≠ y) gives ``E = 2`` and ``m = E − 1`` exactly; a two-point distribution
   ``(1 − s)e_y + s·e_k`` gives ``π_y = 1 − √(E/2)`` exactly; ``π = e_y`` gives ``E = 0``;
5. the spec's threshold table: ``1 − √(τ/2)`` = 0.051 / 0.134 / 0.293 for τ = 1.8 / 1.5 / 1.0 (to the table's
   three decimals) and the rival bounds 0.8 / 0.5 for τ = 1.8 / 1.5.

Draws: logits ``N(0, σ²)`` with σ log-uniform in [0.1, 30] (near-uniform to near-one-hot) and Dirichlet(α) with α
log-uniform in [0.01, 10], V ∈ {2, 3, 7, 50}; the target is drawn uniformly.

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_geometry_energy runs/proofs
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry.force import (
    energy_from_logprobs,
    force_from_logprobs,
    rival_max,
    target_bound,
)
from cfka_jax.proofs_check.common import holds, main_for, require_x64, save_figure

DRAWS = 100_000
TOL = 1e-12
TABLE = {1.8: (0.8, 0.051), 1.5: (0.5, 0.134), 1.0: (None, 0.293)}


def draws(seed: int, n: int, vocab: int) -> tuple[jax.Array, jax.Array]:
    """``(log π [n, V], y [n])``: half softmax of scaled Gaussians, half Dirichlet (numpy sampling)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    sigma = np.exp(rng.uniform(np.log(0.1), np.log(30.0), (half, 1)))
    lp_gauss = jax.nn.log_softmax(jnp.asarray(sigma * rng.standard_normal((half, vocab))), axis=-1)
    alpha = np.exp(rng.uniform(np.log(0.01), np.log(10.0), n - half))
    p_dir = np.stack([rng.dirichlet(np.full(vocab, a)) for a in alpha])
    lp_dir = jnp.log(jnp.clip(jnp.asarray(p_dir), 1e-300, 1.0))
    return jnp.concatenate([lp_gauss, lp_dir]), jnp.asarray(rng.integers(0, vocab, n), jnp.int32)


def violations(lp, y) -> dict[str, float]:
    """Largest excess over each bound (≤ 0 when every draw satisfies it)."""
    e = energy_from_logprobs(lp, y)
    g = force_from_logprobs(lp, y)
    probs = jnp.exp(lp)
    pi_y = jnp.take_along_axis(probs, y[:, None], axis=-1)[:, 0]
    m = rival_max(probs, y)
    return {
        "energy_is_norm": float(jnp.max(jnp.abs(e - jnp.sum(g * g, axis=-1)))),
        "range": float(jnp.maximum(jnp.max(-e), jnp.max(e - 2.0))),
        "competitor": float(jnp.max(jnp.where(e > 1.0, (e - 1.0) - m, -jnp.inf))),
        "target_upper": float(jnp.max(e - 2.0 * (1.0 - pi_y) ** 2)),  # E ≤ 2s²  ⇔  π_y ≤ 1 − √(E/2)
        "target_lower": float(jnp.max((1.0 - pi_y) ** 2 - e)),  # E ≥ s²  ⇔  π_y ≥ 1 − √E
    }, (np.asarray(e), np.asarray(pi_y), np.asarray(m))


def tight_cases() -> float:
    """Largest deviation from equality over the tight cases of claim 4 (V = 5, y = 0)."""
    y = jnp.zeros((1,), jnp.int32)
    def log(p):
        return jnp.log(jnp.clip(jnp.asarray([p], jnp.float64), 1e-300, 1.0))
    one_hot_k = log([0.0, 0.0, 1.0, 0.0, 0.0])
    dev = [abs(float(energy_from_logprobs(one_hot_k, y)[0]) - 2.0),
           abs(float(rival_max(jnp.exp(one_hot_k), y)[0]) - 1.0),
           abs(float(energy_from_logprobs(log([1.0, 0, 0, 0, 0]), y)[0]))]
    for s in (0.1, 0.37, 0.8, 1.0):
        lp = log([1.0 - s, 0.0, 0.0, s, 0.0])
        dev.append(abs(float(target_bound(energy_from_logprobs(lp, y))[0]) - (1.0 - s)))
    return max(dev)


def table_error() -> float:
    errs = []
    for tau, (rival, pi_bound) in TABLE.items():
        errs.append(abs(float(target_bound(jnp.asarray(tau))) - pi_bound) - 5e-4)
        if rival is not None:
            errs.append(abs((tau - 1.0) - rival))
    return max(errs)


def _plot(out_dir, e, pi_y, m):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    idx = np.random.default_rng(0).choice(len(e), 20_000, replace=False)
    grid = np.linspace(0, 2, 200)
    ax[0].scatter(e[idx], pi_y[idx], s=1, alpha=0.3)
    ax[0].plot(grid, 1 - np.sqrt(grid / 2), "r", label="π_y ≤ 1 − √(E/2)")
    ax[0].plot(grid, np.clip(1 - np.sqrt(grid), 0, 1), "g", label="π_y ≥ 1 − √E")
    ax[0].set(xlabel="E", ylabel="π_y", title="target bounds")
    ax[1].scatter(e[idx], m[idx], s=1, alpha=0.3)
    ax[1].plot(grid[grid > 1], grid[grid > 1] - 1, "r", label="m ≥ E − 1")
    ax[1].set(xlabel="E", ylabel="max rival π_k", title="competitor bound")
    for a in ax:
        for band in (0.8, 1.8):
            a.axvline(band, color="k", lw=0.5, ls=":")
        a.legend(fontsize=8)
    save_figure(fig, out_dir, "geometry_energy")


def run(out_dir):
    require_x64()
    worst: dict[str, float] = {}
    pooled = []
    for i, vocab in enumerate((2, 3, 7, 50)):
        lp, y = draws(i, DRAWS // 4, vocab)
        v, arrays = violations(lp.astype(jnp.float64), y)
        worst = {k: max(worst.get(k, -np.inf), x) for k, x in v.items()}
        pooled.append(arrays)
    e, pi_y, m = (np.concatenate(a) for a in zip(*pooled))
    detail = f"{DRAWS} draws, V ∈ {{2, 3, 7, 50}}; E > 1 in {np.mean(e > 1):.1%}, E > 1.8 in {np.mean(e > 1.8):.1%}"
    claims = [
        holds("geometry-energy", "E = ‖e_y − π‖² computed from log-probabilities", worst["energy_is_norm"], TOL),
        holds("geometry-energy", "range 0 ≤ E ≤ 2 (largest violation)", worst["range"], TOL, detail),
        holds("geometry-energy", "E > 1 ⇒ some rival π_k ≥ E − 1 (largest violation)", worst["competitor"], TOL),
        holds("geometry-energy", "π_y ≤ 1 − √(E/2), i.e. E ≤ 2s² (largest violation)", worst["target_upper"], TOL),
        holds("geometry-energy", "π_y ≥ 1 − √E, i.e. E ≥ s² (largest violation)", worst["target_lower"], TOL),
        holds("geometry-energy", "tight cases: e_k (E = 2, m = E − 1), two-point, e_y (E = 0)", tight_cases(), TOL),
        holds("geometry-energy", "threshold table (τ = 1.8/1.5/1.0) reproduces to its rounding", table_error(), TOL),
    ]
    _plot(out_dir, e, pi_y, m)
    return claims


if __name__ == "__main__":
    main_for(run, "runs/proofs")
