"""The cFKA paper's continual-learning corollaries (spec cfka_stoc.md §2.7) measured in the theory model, as records.

    python -m cfka_jax.experiments.continual_claims --out results

Setting (``cfka_jax/theory/cpt.py``): the single-layer linear-attention model with Z fixed (η_Z = 0), PT taken to
convergence (θ* = U_old) on an *old* fact world, then CPT on a *new* one (2 new subjects, 2 old subjects whose
relation-0 object changes); ``--worlds`` random worlds (``ContinualConfig(seed=w)``), float64. CPT is minibatch
SGD (n = ``batch_size``, η_Y = ``eta_y``, ``steps`` steps, ``seeds`` independent minibatch seeds per point; a run's
endpoint is its time average over the last quarter of the run) and population GD (``gd_steps``); every
convergence point is computed exactly (Newton, ``cpt_predictions.minimise``). Four records under ``OUT/cfka-theory/``, read by the rows of
``cfka_jax/claims/papers/cfka_theory.py``:

* ``replay`` — true replay at every α of ``--alphas`` (α = new-data fraction, α = 1 naive): per (world, α, seed)
  the SGD endpoint's old-fact probability (mean over the 8 PT facts), and the top-1 recall at the last step of the
  PT facts and of the 6 PT facts CPT does not overwrite; per (world, α) the exact α-mixture
  optimum θ_α, its closed form U(mixture statistics) and the GD endpoint. Claims: "the old-object mass (1 − α)
  enters the convergence point" (``cfka.theory.replay-point``) and "about 10 % replay (α = 0.9) already preserves
  old facts" (``cfka.theory.replay-10pct``).
* ``oscillation`` — SGD started at θ_α for ``osc_steps`` steps, ``osc_seeds`` seeds: the amplitude
  A = √tr Cov(e_s) of the probe token's column (the first overwritten subject) over seeds at every α, λ⁺_min(H̃_s)
  at θ_α, and the slope d ln A / d ln λ⁺_min fitted across α (per world, and pooled with one intercept per world),
  with 95 % bootstrap intervals over seeds (``bootstrap`` resamples); and the replay effect
  ln A(α) − ln A(1) averaged over α < 1 (per world and pooled), with its interval. Claim: "mixing raises λ⁺_min(H̃), which
  amplifies the oscillation" (``cfka.theory.replay-oscillation``).
* ``ewc_dense`` and ``ewc_premise`` — EWC at every k of ``--ks`` (α = 1): per (world, k, seed) the SGD endpoint;
  per (world, k) the exact EWC point θ_k, the GD endpoint, λ⁺_min(H_k) and the settling times of population GD
  (the last step at which the old-fact probability, resp. the probe column e_s = y_s − u_s, lies outside a band of
  ``settle`` × its initial distance to the convergence point). ``dense``: the exact diagonal Fisher of the old data
  (min_o w_{o,s} / max_o w_{o,s} ≈ 0.1: every coordinate of y_s weighted); ``premise``: the same weights with the
  coordinates no PT fact occupies scaled by ``delta`` (``cpt.premise_fisher``: min_o w_{o,s} ≈ 0, the premise of
  §2.7). Claims: "EWC does not move the convergence point" (``cfka.theory.ewc-point-dense`` / ``-premise``),
  "EWC only slows convergence" (``cfka.theory.ewc-slows``), "forgetting still happens" (``cfka.theory.ewc-forgets``).

At the defaults: about 1 minute of CPU (53 s; 2.7 minutes wall on a shared 2-core machine), about half of it compilation.
"""

from __future__ import annotations

import dataclasses
import sys

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.cli_gen import Flags
from cfka_jax.values import check_float, check_floats, check_int, check_unique

MODULE = "cfka_jax.experiments.continual_claims"
FOLDER = "cfka-theory"


@dataclasses.dataclass(frozen=True)
class Config:
    """What the records depend on (stored as the records' ``provenance.config``)."""

    out: str = "results"
    """the results folder; the records go to OUT/cfka-theory/"""
    worlds: tuple[int, ...] = (0, 1, 2, 3)
    """seeds of the random old/new world pairs (ContinualConfig.seed)"""
    smoothing: float = 0.1
    """the worlds' label smoothing ε"""
    alphas: tuple[float, ...] = (0.5, 0.67, 0.8, 0.9, 1.0)
    """new-data fractions of the replay runs (must hold 0.9 and 1 = naive)"""
    ks: tuple[float, ...] = (0.0, 0.1, 1.0, 10.0)
    """EWC strengths (must hold 0 = naive)"""
    delta: float = 1e-3
    """premise Fisher: the factor on the weights of the coordinates no PT fact occupies"""
    seeds: int = 8
    """minibatch seeds per (world, α) and (world, k)"""
    steps: int = 16000
    """SGD steps of every CPT run from θ*"""
    log_every: int = 400
    """logging period of the SGD runs"""
    batch_size: int = 16
    """minibatch size n"""
    eta_y: float = 0.5
    """SGD/GD step size on Y (the same for every method, so that times in steps compare)"""
    gd_steps: int = 40000
    """population-GD steps (convergence points and settling times)"""
    gd_log_every: int = 100
    """logging period of the GD runs (the resolution of the settling times)"""
    settle: float = 0.05
    """settled = within this fraction of the initial distance to the convergence point, for good"""
    osc_seeds: int = 128
    """seeds of the oscillation runs (started at θ_α)"""
    osc_steps: int = 2000
    """steps of the oscillation runs"""
    bootstrap: int = 1000
    """bootstrap resamples (over seeds) of the amplitude slope"""
    seed: int = 0
    """PRNG seed of the minibatches and of the bootstrap"""

    def __post_init__(self):
        check_unique(self.worlds, "worlds")
        for w in self.worlds:
            check_int(w, "worlds (each)", lo=0)
        if len(self.worlds) < 2:
            raise ValueError(f"worlds: at least 2 random worlds for a spread, got {self.worlds}")
        check_floats(self.alphas, "alphas", lo=0.0, lo_open=True, hi=1.0)
        check_floats(self.ks, "ks", lo=0.0)
        if 0.9 not in self.alphas or 1.0 not in self.alphas or 0.0 not in self.ks:
            raise ValueError(f"alphas must hold 0.9 and 1.0 and ks must hold 0.0; got {self.alphas}, {self.ks}")
        if len(self.alphas) < 3:
            raise ValueError(f"alphas: the amplitude slope needs at least 3 values, got {self.alphas}")
        check_float(self.smoothing, "smoothing", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        check_float(self.delta, "delta", lo=0.0, lo_open=True, hi=1.0)
        check_float(self.eta_y, "eta_y", lo=0.0, lo_open=True)
        check_float(self.settle, "settle", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        for name in ("seeds", "osc_seeds"):
            check_int(getattr(self, name), name, lo=2)
        for name in ("steps", "log_every", "batch_size", "gd_steps", "gd_log_every", "osc_steps", "bootstrap"):
            check_int(getattr(self, name), name, lo=1)
        for steps, every in ((self.steps, self.log_every), (self.gd_steps, self.gd_log_every)):
            if steps % every:
                raise ValueError(f"steps {steps} must be a multiple of their logging period {every}")


FLAGS = Flags(Config, prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0], metavars={"out": "DIR"})


def cli_line(cfg: Config) -> str:
    """The exact command that makes ``cfg``: the module and every field that differs from the default."""
    parts = [f"python -m {MODULE}", f"--out {cfg.out}"]
    for f in dataclasses.fields(Config):
        value = getattr(cfg, f.name)
        if f.name != "out" and value != f.default:
            text = ",".join(map(repr, value)) if isinstance(value, tuple) else repr(value)
            parts.append(f"--{f.name.replace('_', '-')} {text}")
    return " ".join(parts)


# ---------------------------------------------------------------- measurements (pure functions of arrays)

def settle_time(dist: np.ndarray, every: int, band: float) -> int | None:
    """Steps after which ``dist`` (logged every ``every`` steps from t = 0) stays ≤ band · dist[0]; None if never."""
    out = np.flatnonzero(np.asarray(dist) > band * float(dist[0]))
    if out.size == 0:
        return 0
    return None if out[-1] == len(dist) - 1 else int(out[-1] + 1) * every


def fe_slope(x_WA: np.ndarray, y_WA: np.ndarray) -> float:
    """Least-squares slope of y on x with one intercept per row (world): Σ (x − x̄_w)(y − ȳ_w) / Σ (x − x̄_w)²."""
    xc, yc = x_WA - x_WA.mean(-1, keepdims=True), y_WA - y_WA.mean(-1, keepdims=True)
    return float(np.sum(xc * yc) / np.sum(xc * xc))


def bootstrap_amplitudes(cols_ARO: np.ndarray, rng, draws: int) -> np.ndarray:
    """ln A* = ½ ln tr Cov of the probe column over R seeds resampled with replacement, per α: shape (draws, A).

    A resample that repeats one seed R times has no spread (ln 0 = −inf; only likely for tiny R).
    """
    A, R, _ = cols_ARO.shape
    idx = rng.integers(0, R, size=(draws, A, R))
    sample = np.take_along_axis(cols_ARO[None], idx[..., None], axis=2)  # draws A R O
    centred = sample - sample.mean(2, keepdims=True)
    with np.errstate(divide="ignore"):
        return 0.5 * np.log(np.sum(centred**2, axis=(2, 3)) / (R - 1))


def _ln_amplitude(cols_ARO: np.ndarray) -> np.ndarray:
    centred = cols_ARO - cols_ARO.mean(1, keepdims=True)
    return 0.5 * np.log(np.sum(centred**2, axis=(1, 2)) / (cols_ARO.shape[1] - 1))


# ---------------------------------------------------------------- the runs

def _spec(cfg: Config, **kw):
    from cfka_jax.theory.cpt_sweep import SweepSpec

    base = dict(num_seeds=cfg.seeds, steps=cfg.steps, log_every=cfg.log_every, batch_size=cfg.batch_size,
                eta_y=cfg.eta_y)
    return SweepSpec(**{**base, **kw})


def _kept_facts(worlds):
    """The PT facts CPT does not overwrite (every old fact whose context is not one of ``worlds.changed``)."""
    from cfka_jax.theory.cpt import FactSet

    keep = ~np.isin(np.asarray(worlds.old_facts.context), np.asarray(worlds.changed.context))
    return FactSet(worlds.old_facts.context[keep], worlds.old_facts.obj[keep])


def _recall(worlds, Y, facts) -> jax.Array:
    """Top-1 recall of ``facts``: the share whose argmax object is the fact's object."""
    from cfka_jax.theory.model import YZParams, yz_logits

    logits = yz_logits(YZParams(Y, worlds.Z), worlds.old.contexts[facts.context], worlds.old.objects)
    return jnp.mean((jnp.argmax(logits, axis=-1).astype(facts.obj.dtype) == facts.obj).astype(Y.dtype))


def _endpoint(x_PR: np.ndarray) -> np.ndarray:
    """A run's endpoint: the mean of its logged values over the last quarter of the run (t > 3T/4)."""
    x_PR = np.asarray(x_PR)
    return x_PR[:, 1 + 3 * (x_PR.shape[1] - 1) // 4:].mean(axis=1)


def _gd_trace(worlds, spec, theory, cfg: Config, key, fisher=None):
    from cfka_jax.theory.cpt_sweep import run_grid

    gd = dataclasses.replace(spec, batch_size=None, num_seeds=1, steps=cfg.gd_steps, log_every=cfg.gd_log_every)
    return run_grid(worlds, gd, theory, key, fisher=fisher)


def replay_rows(cfg: Config, w: int, worlds, key) -> list[dict]:
    from cfka_jax.theory.cpt import mixture_joint, pretrained
    from cfka_jax.theory.cpt_predictions import mixture_nb_optimum, naive_old_prob, old_prob_at
    from cfka_jax.theory.cpt_sweep import run_grid, theory_grid

    spec = _spec(cfg, ks=(0.0,), alphas=cfg.alphas)
    theory = theory_grid(worlds, spec)
    final_Y, trace = run_grid(worlds, spec, theory, key)
    _, gd = _gd_trace(worlds, spec, theory, cfg, key)
    kept = _kept_facts(worlds)
    recall = lambda Y: (_recall(worlds, Y, worlds.old_facts), _recall(worlds, Y, kept))
    rec_all, rec_kept = (np.asarray(r).reshape(len(cfg.alphas), cfg.seeds) for r in jax.vmap(recall)(final_Y))
    old, new = _endpoint(trace.old_prob), _endpoint(trace.new_prob)
    theta = pretrained(worlds)
    base = dict(world=w, pt_old_prob=float(old_prob_at(worlds, theta.Y)),
                pt_old_recall=float(recall(theta.Y)[0]), pt_kept_recall=float(recall(theta.Y)[1]),
                naive_old_prob=float(naive_old_prob(worlds, worlds.old_facts)))
    rows = []
    for g, alpha in enumerate(cfg.alphas):
        closed = mixture_nb_optimum(worlds, mixture_joint(worlds.new.joint, worlds.old.joint, alpha)).Y
        rows.append(dict(kind="point", alpha=alpha, **base, old_prob_exact=float(theory.old_prob[g]),
                         old_prob_closed_form=float(old_prob_at(worlds, closed)),
                         old_prob_gd=float(gd.old_prob[g, -1]), kept_recall_exact=float(recall(theory.Y[g])[1]),
                         new_prob_exact=float(theory.new_prob[g]), eta=float(theory.eta[g])))
        for s in range(cfg.seeds):
            p = g * cfg.seeds + s
            rows.append(dict(kind="sgd", world=w, alpha=alpha, seed=s, old_prob=float(old[p]),
                             old_prob_last=float(trace.old_prob[p, -1]), old_recall=float(rec_all[g, s]),
                             kept_recall=float(rec_kept[g, s]), new_prob=float(new[p])))
    return rows


def ewc_rows(cfg: Config, w: int, worlds, key, premise: bool) -> list[dict]:
    from cfka_jax.theory.cpt import active_block, diagonal_fisher, pretrained, premise_fisher
    from cfka_jax.theory.cpt_predictions import naive_old_prob, old_prob_at
    from cfka_jax.theory.cpt_sweep import run_grid, theory_grid

    theta = pretrained(worlds)
    fisher = diagonal_fisher(theta, worlds.old)
    fisher = premise_fisher(fisher, worlds, cfg.delta) if premise else fisher
    w_s = np.asarray(fisher[worlds.old.objects, worlds.probe_token])
    spec = _spec(cfg, ks=cfg.ks, alphas=(1.0,))
    theory = theory_grid(worlds, spec, fisher)
    _, trace = run_grid(worlds, spec, theory, key, fisher=fisher)
    _, gd = _gd_trace(worlds, spec, theory, cfg, key, fisher)
    old, new = _endpoint(trace.old_prob), _endpoint(trace.new_prob)
    base = dict(world=w, pt_old_prob=float(old_prob_at(worlds, theta.Y)),
                naive_old_prob=float(naive_old_prob(worlds, worlds.old_facts)),
                fisher_min_over_max=float(w_s.min() / w_s.max()))
    lam = -np.expm1(-np.asarray(theory.log_rate)) / np.asarray(theory.eta)  # λ⁺_min(H_k) per unit η
    rows = []
    for g, k in enumerate(cfg.ks):
        probe_limit = np.asarray(active_block(theory.Y[g], worlds))[:, worlds.probe_token]
        dist_e = np.linalg.norm(np.asarray(gd.probe_column[g]) - probe_limit, axis=-1)
        dist_p = np.abs(np.asarray(gd.old_prob[g]) - float(theory.old_prob[g]))
        rows.append(dict(kind="point", k=k, **base, old_prob_exact=float(theory.old_prob[g]),
                         new_prob_exact=float(theory.new_prob[g]), old_prob_gd=float(gd.old_prob[g, -1]),
                         settle_old_prob=settle_time(dist_p, cfg.gd_log_every, cfg.settle),
                         settle_probe=settle_time(dist_e, cfg.gd_log_every, cfg.settle),
                         lam_min_pos=float(lam[g]), eta=float(theory.eta[g])))
        for s in range(cfg.seeds):
            p = g * cfg.seeds + s
            rows.append(dict(kind="sgd", world=w, k=k, seed=s, old_prob=float(old[p]),
                             old_prob_last=float(trace.old_prob[p, -1]), new_prob=float(new[p])))
    return rows


def oscillation_runs(cfg: Config, worlds, key):
    """(ln A per α, probe columns (α, seed, object), ln λ⁺_min(H̃_s) per α, ln A predicted, changed-fact sd)."""
    from cfka_jax.theory.cpt_sweep import run_grid, theory_grid

    spec = _spec(cfg, ks=(0.0,), alphas=cfg.alphas, num_seeds=cfg.osc_seeds, steps=cfg.osc_steps,
                 log_every=cfg.osc_steps, start="optimum")
    theory = theory_grid(worlds, spec)
    _, trace = run_grid(worlds, spec, theory, key)
    cols = np.asarray(trace.probe_column[:, -1]).reshape(len(cfg.alphas), cfg.osc_seeds, -1)
    changed = np.asarray(trace.changed_prob[:, -1]).reshape(len(cfg.alphas), cfg.osc_seeds)
    return (_ln_amplitude(cols), cols, np.log(np.asarray(theory.htilde_lam_min)),
            0.5 * np.log(np.asarray(theory.probe_var)), changed.std(axis=1, ddof=1))


def replay_effect(lnA_WA: np.ndarray, naive: int) -> float:
    """Mean over worlds and α ≠ 1 of ln A(α) − ln A(1): the relative amplitude change replay makes."""
    others = np.delete(lnA_WA, naive, axis=-1)
    return float(np.mean(others - lnA_WA[..., naive:naive + 1]))


def oscillation_rows(cfg: Config, runs: dict) -> list[dict]:
    """Amplitude rows per (world, α), a slope row per world and a pooled row (95 % bootstrap intervals over seeds)."""
    rng = np.random.default_rng(cfg.seed)
    worlds = list(runs)
    naive = cfg.alphas.index(1.0)
    lnA = np.stack([runs[w][0] for w in worlds])
    boot = np.stack([bootstrap_amplitudes(runs[w][1], rng, cfg.bootstrap) for w in worlds], axis=1)  # D W A
    boot = boot[np.all(np.isfinite(boot), axis=(1, 2))]  # a resample of one repeated seed has no spread (tiny R)
    lnl = np.stack([runs[w][2] for w in worlds])
    pred = np.stack([runs[w][3] for w in worlds])
    ci = lambda draws: dict(zip(("lo", "hi"), map(float, np.percentile(draws, [2.5, 97.5]))))

    def summary(sl):
        slope, effect = ci([fe_slope(lnl[sl], b[sl]) for b in boot]), ci([replay_effect(b[sl], naive) for b in boot])
        return dict(slope=fe_slope(lnl[sl], lnA[sl]), slope_lo=slope["lo"], slope_hi=slope["hi"],
                    slope_pred=fe_slope(lnl[sl], pred[sl]), replay_effect=replay_effect(lnA[sl], naive),
                    replay_effect_lo=effect["lo"], replay_effect_hi=effect["hi"],
                    replay_effect_pred=replay_effect(pred[sl], naive))

    rows = []
    for i, w in enumerate(worlds):
        lo, hi = np.percentile(boot[:, i], [2.5, 97.5], axis=0)
        for a, alpha in enumerate(cfg.alphas):
            rows.append(dict(kind="amplitude", world=w, alpha=alpha, lam_min=float(np.exp(lnl[i, a])),
                             amplitude=float(np.exp(lnA[i, a])), amplitude_lo=float(np.exp(lo[a])),
                             amplitude_hi=float(np.exp(hi[a])), amplitude_pred=float(np.exp(pred[i, a])),
                             changed_prob_sd=float(runs[w][4][a])))
        rows.append(dict(kind="slope", world=w, **summary(slice(i, i + 1))))
    rows.append(dict(kind="pooled", worlds=len(worlds), **summary(slice(None))))
    return rows


# ---------------------------------------------------------------- the records

def regimes(cfg: Config) -> dict[str, dict]:
    """The ``regime`` of each record: model, size, worlds, dose."""
    from cfka_jax.theory.cpt import ContinualConfig

    c = ContinualConfig(smoothing=cfg.smoothing)
    world = (f"{len(cfg.worlds)} random old/new world pairs (seeds {', '.join(map(str, cfg.worlds))}): "
             f"{c.num_old_subjects} old subjects ({c.num_changed} overwritten), {c.num_new_subjects} new, "
             f"{c.num_relations} relations × {c.objects_per_relation} objects, ε = {cfg.smoothing:g}, "
             f"z ~ U{c.attention}, 8 PT facts")
    model = "single-layer linear-attention theory model, Y trained, Z fixed (η_Z = 0), PT converged θ* = U_old"
    params = f"{c.num_objects} × {c.num_subjects + c.num_relations + 2} active entries of Y"
    sgd = (f"SGD from θ*: n = {cfg.batch_size}, η_Y = {cfg.eta_y:g}, {cfg.steps} steps, {cfg.seeds} seeds per point, "
           f"endpoint = mean over the last {cfg.steps // 4} steps; population GD {cfg.gd_steps} steps; exact points "
           "by Newton (float64)")
    alphas = ", ".join(f"{a:g}" for a in cfg.alphas)
    ks = ", ".join(f"{k:g}" for k in cfg.ks)
    common = dict(model=model, params=params, world=world)
    return {
        "replay": {**common, "dose": sgd, "methods": f"true replay at α ∈ {{{alphas}}} (α = 1 naive)"},
        "oscillation": {**common, "dose": f"SGD from θ_α: n = {cfg.batch_size}, η_Y = {cfg.eta_y:g}, "
                        f"{cfg.osc_steps} steps, {cfg.osc_seeds} seeds per α; {cfg.bootstrap} bootstrap resamples",
                        "methods": f"true replay at α ∈ {{{alphas}}}; probe: first overwritten subject"},
        "ewc_dense": {**common, "dose": sgd, "methods": f"EWC at k ∈ {{{ks}}} (α = 1)",
                      "fisher": "exact diagonal Fisher of the old data at θ* (every coordinate weighted)"},
        "ewc_premise": {**common, "dose": sgd, "methods": f"EWC at k ∈ {{{ks}}} (α = 1)",
                        "fisher": f"premise: exact Fisher, coordinates no PT fact occupies × δ = {cfg.delta:g} "
                                  "(min_o w_o,s ≈ 0, spec §2.7)"},
    }


def measure(cfg: Config) -> dict[str, list[dict]]:
    """Every run of the four records (float64 inside; the process-wide setting is untouched)."""
    from cfka_jax.theory.cpt import ContinualConfig, make_continual_worlds

    out = {"replay": [], "oscillation": [], "ewc_dense": [], "ewc_premise": []}
    osc = {}
    with jax.enable_x64(True):
        for w in cfg.worlds:
            worlds = make_continual_worlds(ContinualConfig(smoothing=cfg.smoothing, seed=w))
            key = jax.random.fold_in(jax.random.key(cfg.seed), w)
            out["replay"] += replay_rows(cfg, w, worlds, jax.random.fold_in(key, 0))
            out["ewc_dense"] += ewc_rows(cfg, w, worlds, jax.random.fold_in(key, 1), premise=False)
            out["ewc_premise"] += ewc_rows(cfg, w, worlds, jax.random.fold_in(key, 1), premise=True)
            osc[w] = oscillation_runs(cfg, worlds, jax.random.fold_in(key, 2))
            print(f"world {w}: done", file=sys.stderr)
    out["oscillation"] = oscillation_rows(cfg, osc)
    return out


def command(cfg: Config) -> int:
    """Runs everything and writes the four records under ``cfg.out/cfka-theory/``."""
    from cfka_jax.claims.results import Clock, provenance, write_record

    clock = Clock()
    rows = measure(cfg)
    config = {f.name: list(v) if isinstance(v := getattr(cfg, f.name), tuple) else v
              for f in dataclasses.fields(Config)}
    reg = regimes(cfg)
    for name, rs in rows.items():
        seeds = range(cfg.osc_seeds if name == "oscillation" else cfg.seeds)
        path = write_record(cfg.out, f"{FOLDER}/{name}", rows=rs, regime=reg[name],
                            provenance=provenance(config=config, seeds=seeds, clock=clock, command=cli_line(cfg)))
        print(f"wrote {path} ({len(rs)} rows)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(FLAGS.parse(argv))


if __name__ == "__main__":
    raise SystemExit(main())
