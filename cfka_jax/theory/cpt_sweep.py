"""Vmapped sweeps of continual training over EWC strength k × new-data fraction α × seeds (spec §2.7, §2.9).

One jitted call runs P = |k| · |α| · seeds CPT runs (``run_grid``); ``theory_grid`` computes, for every (k, α),
the exact convergence point of ℓ_{k,α} and the linearised predictions at it (rate, SGD covariance of the probe
column y_s, λ⁺_min of the mixture H̃_s). Time convention as in ``theory/cpt.py``: t counts SGD steps of size
η_Y on Y, Z fixed. Runs whose Hessian would make η_Y λ_max ≥ 1 use η = 1/λ_max instead (reported per row).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.shapes import Array, Float
from cfka_jax.theory.cpt import (ContinualWorlds, Method, Trace, active_block, diagonal_fisher, generative_joint,
                                       mixture_joint, pretrained, run_cpt)
from cfka_jax.theory.cpt_predictions import (gradient_covariance, linear_rate, minimise, mixture_nb_optimum,
                                              objective_hessian, old_prob_at, sgd_covariance, token_block_indices,
                                              token_curvature)
from cfka_jax.theory.train import SGDConfig
from cfka_jax.values import check_float, check_floats, check_int

REPLAY_KINDS = ("true", "generative")


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """A k × α × seeds grid and the SGD settings shared by every run.

    Attributes:
      ks: EWC strengths (0 = no penalty).
      alphas: new-data fractions (1 = no replay).
      num_seeds: minibatch seeds per (k, α).
      steps: SGD steps per run; log_every: logging period.
      batch_size: minibatch size (None = population gradient descent).
      eta_y: step size (capped at 1/λ_max of the (k, α) Hessian).
      replay: 'true' (old samples) or 'generative' (the PT model's labels on uniform contexts).
      start: 'pt' (CPT from θ*) or 'optimum' (start at the (k, α) convergence point, to measure fluctuations).
    """

    ks: tuple[float, ...] = (0.0, 0.1, 1.0, 10.0)
    alphas: tuple[float, ...] = (0.5, 0.67, 0.8, 0.9, 1.0)
    num_seeds: int = 16
    steps: int = 2000
    log_every: int = 100
    batch_size: int | None = 16
    eta_y: float = 0.5
    replay: str = "true"
    start: str = "pt"

    def __post_init__(self):
        check_floats(self.ks, "ks (EWC strengths)", lo=0.0)  # finite, >= 0, no repeated grid point
        check_floats(self.alphas, "alphas (new-data fractions)", lo=0.0, lo_open=True, hi=1.0)
        check_int(self.num_seeds, "num_seeds", lo=1)
        check_float(self.eta_y, "eta_y (step size)", lo=0.0, lo_open=True)
        if self.replay not in REPLAY_KINDS or self.start not in ("pt", "optimum"):
            raise ValueError(f"replay in {REPLAY_KINDS}, start in ('pt', 'optimum'); got {self.replay}, {self.start}")
        SGDConfig(self.steps, self.batch_size, self.log_every)  # validates steps / log_every / batch_size

    @property
    def num_runs(self) -> int:
        return len(self.ks) * len(self.alphas) * self.num_seeds

    @property
    def sgd(self) -> SGDConfig:
        return SGDConfig(self.steps, self.batch_size, self.log_every)


class Theory(NamedTuple):
    """Predictions per (k, α) point, leading axis G = |k| · |α| (k major)."""

    k: Float[Array, " G"]
    alpha: Float[Array, " G"]
    eta: Float[Array, " G"]  # step size used (capped)
    Y: Float[Array, "G M M"]  # exact convergence point
    old_prob: Float[Array, " G"]
    new_prob: Float[Array, " G"]
    changed_prob: Float[Array, " G"]
    log_rate: Float[Array, " G"]  # −ln(1 − η λ⁺_min(H)) per step
    probe_var: Float[Array, " G"]  # tr Cov(y_s) predicted at time ``steps`` from a start at the optimum
    probe_var_inf: Float[Array, " G"]  # stationary tr Cov(y_s)
    htilde_lam_min: Float[Array, " G"]  # λ⁺_min(H̃_s) of the probe token at the optimum


def replay_joint(worlds: ContinualWorlds, kind: str) -> Float[Array, "C O"]:
    """Pr_replay: the old joint ('true') or the generative proxy of the PT model ('generative')."""
    return worlds.old.joint if kind == "true" else generative_joint(pretrained(worlds), worlds.old)


def _theory_point(worlds, fisher, replay, k, alpha, eta, batch_size, steps):
    theta = pretrained(worlds)
    joint = mixture_joint(worlds.new.joint, replay, alpha)
    guess = jnp.where(k == 0.0, mixture_nb_optimum(worlds, joint).Y, theta.Y)
    Y = minimise(worlds, joint, theta.Y, fisher, k, theta.Y, guess=guess)
    H = objective_hessian(worlds, joint, theta.Y, fisher, k, Y)
    eta = jnp.minimum(eta, 1.0 / jnp.max(jnp.linalg.eigvalsh(H)))
    idx = token_block_indices(worlds, worlds.probe_token)
    noise = gradient_covariance(worlds, joint, Y) * (0.0 if batch_size is None else 1.0)
    cov = sgd_covariance(H, noise, eta, batch_size or 1)
    ev = jnp.linalg.eigvalsh(token_curvature(worlds, joint, Y, worlds.probe_token))
    probs = [old_prob_at(worlds, Y, f) for f in (worlds.old_facts, worlds.new_facts, worlds.changed)]
    return (eta, Y, *probs, linear_rate(H, eta).log_rate, jnp.trace(cov(steps)[idx][:, idx]),
            jnp.trace(cov(jnp.inf)[idx][:, idx]), ev[1])


def grid_axes(spec: SweepSpec):
    """(k_G, α_G) of the |k| · |α| grid, k major."""
    kk, aa = np.meshgrid(np.asarray(spec.ks, float), np.asarray(spec.alphas, float), indexing="ij")
    return kk.reshape(-1), aa.reshape(-1)


def theory_grid(worlds: ContinualWorlds, spec: SweepSpec, fisher=None) -> Theory:
    """Exact convergence points and linearised predictions for every (k, α) of ``spec`` (one jitted vmap).

    ``probe_var`` uses the batch size of ``spec`` (1 for population GD, where the noise is zero anyway).
    ``fisher``: the EWC weights (default the exact diagonal Fisher of the old data at θ*; ``cpt.premise_fisher``
    for the weights of §2.7's premise).
    """
    k_G, a_G = grid_axes(spec)
    dtype = worlds.Z.dtype
    fisher = diagonal_fisher(pretrained(worlds), worlds.old) if fisher is None else fisher
    replay = replay_joint(worlds, spec.replay)
    k_G, a_G = jnp.asarray(k_G, dtype), jnp.asarray(a_G, dtype)
    out = _theory_vmapped(worlds, fisher, replay, k_G, a_G, jnp.asarray(spec.eta_y, dtype), spec.batch_size, spec.steps)
    return Theory(k_G, a_G, *out)


_theory_vmapped = jax.jit(jax.vmap(_theory_point, in_axes=(None, None, None, 0, 0, None, None, None)),
                          static_argnums=(6, 7))


def run_grid(worlds: ContinualWorlds, spec: SweepSpec, theory: Theory, key, mesh=None, fisher=None
             ) -> tuple[Float[Array, "P M M"], Trace]:
    """All P = G · seeds runs of the G grid points in ``theory`` in one ``jit(vmap(run_cpt))`` call.

    Run p = g · seeds + seed. ``theory`` may be a slice of ``theory_grid(worlds, spec)`` (chunked sweeps). With a
    ``mesh`` the run axis is split over its devices (P must be a multiple of the device count). ``fisher``: the
    EWC weights, as in ``theory_grid`` (pass the same ones).
    """
    fisher = diagonal_fisher(pretrained(worlds), worlds.old) if fisher is None else fisher
    replay = replay_joint(worlds, spec.replay)
    reps = lambda x: jnp.repeat(x, spec.num_seeds, axis=0)
    num_runs = theory.k.shape[0] * spec.num_seeds
    keys = jax.random.split(key, num_runs)
    start = reps(theory.Y) if spec.start == "optimum" else jnp.broadcast_to(pretrained(worlds).Y,
                                                                             (num_runs,) + theory.Y.shape[1:])

    per_run = (reps(theory.k), reps(theory.alpha), reps(theory.eta), start, keys)
    if mesh is not None:
        from cfka_jax.parallel.rules import shard_leading

        per_run = shard_leading(per_run, mesh)
    return _runs_vmapped(worlds, fisher, replay, *per_run, spec.sgd)


def _one_run(worlds, fisher, replay, k, alpha, eta, Y0, key, cfg):
    return run_cpt(worlds, Method(k, alpha, replay), key, eta_y=eta, cfg=cfg, Y0=Y0, fisher=fisher)


_runs_vmapped = jax.jit(jax.vmap(_one_run, in_axes=(None, None, None, 0, 0, 0, 0, 0, None)), static_argnums=(8,))


def summarise(worlds: ContinualWorlds, spec: SweepSpec, theory: Theory, final_Y, trace: Trace) -> list[dict]:
    """One row per (k, α): measured (mean ± s.e. over seeds, last log) vs predicted old/new-fact probability,
    distance of the mean final Y_OX from the convergence point, and probe-column fluctuation (measured ensemble
    tr Cov(y_s) at the last step vs the linearised prediction)."""
    rows = []
    S = spec.num_seeds
    for g in range(theory.k.shape[0]):
        sl = slice(g * S, (g + 1) * S)
        old, new = np.asarray(trace.old_prob[sl, -1]), np.asarray(trace.new_prob[sl, -1])
        col = np.asarray(trace.probe_column[sl, -1])
        var = float(np.trace(np.cov(col.T))) if S > 1 else float("nan")
        dist = np.linalg.norm(np.asarray(active_block(final_Y[sl].mean(0) - theory.Y[g], worlds)))
        se = lambda x: float(x.std(ddof=1) / np.sqrt(S)) if S > 1 else float("nan")
        rows.append(dict(k=float(theory.k[g]), alpha=float(theory.alpha[g]), eta=float(theory.eta[g]),
                         old_prob=float(old.mean()), old_prob_se=se(old), old_prob_theory=float(theory.old_prob[g]),
                         new_prob=float(new.mean()), new_prob_se=se(new), new_prob_theory=float(theory.new_prob[g]),
                         distance=float(dist), log_rate=float(theory.log_rate[g]), probe_var=var,
                         probe_var_theory=float(theory.probe_var[g]), htilde_lam_min=float(theory.htilde_lam_min[g])))
    return rows


def write_csv(rows: list[dict], path) -> None:
    """Writes ``rows`` (dicts with equal keys) as CSV, atomically (``jsonio.write_text_atomic``)."""
    import csv
    import io

    from cfka_jax.jsonio import write_text_atomic

    fh = io.StringIO(newline="")
    writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, fh.getvalue())
