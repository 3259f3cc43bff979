"""``cfka geometry transmission --world ood``: transmission over a long CPT run with separate out-of-domain probe
tasks, the readout and last-k-block resets, and the drop-vs-gain correlation (spec §7, issue 25).

Per seed (``geometry/ood.py`` world, a tied Qwen2 port with ≥ 6 blocks):

1. PT on the mixture of the out-of-domain tasks ``ident_a`` / ``ident_b`` / ``longform`` (their ``pt`` rows,
   AdamW, cosine to lr/10), then CPT on the domain fact corpus only (AdamW, constant lr after a 5 % warm-up, the
   §7.2 schedule), keeping the parameters at every step of ``checkpoints`` (≥ 8 of them).
2. ``R_mean`` (§7.1) at the base model and every checkpoint on each task's ``probe`` split and on ``bio`` (the
   domain's value tokens, in domain).
3. SFT plasticity (§7.3): from the base model and from each checkpoint, with each reset of ``resets`` (§7.4:
   ``none``; ``readout`` = "Reset readout"; ``readout_only``; ``paper_last4`` = readout + 3 blocks, the release's
   ``--reset_last_l_layers 4``; ``last4`` = readout + 4 blocks, k = 4 literally), fine-tune on task D's ``sft``
   rows and read D's probe loss before and after (``plasticity.Trainer``).
4. §7.5: points (D, c ≠ base); ``ΔR(D, c) = (R_D(base) − R_D(c)) / R_D(base)`` on D's own probe (``ρ_task``), on
   ``bio`` (``ρ_bio``) or the mean relative drop over all four probe sets (``ρ_pooled``); gain =
   ``L_final(c, none) − L_final(c, reset)`` for every reset (and the minimum-loss variant). Spearman per seed and
   pooled over seeds (points (seed, D, c)).

The §7.5 premise is that the base model knows each task D. In the default world (the committed record's) the
identification tasks' rule ``permute`` is not learned by the small port (it memorises the PT items), so only
``longform`` meets it. ``--ident-rule map --ident-classes 3`` builds the identification tasks as a per-class token
map over 3 classes (:func:`study_scale`; ``geometry/ood.py`` says why that is learnable), everything else the same;
``cfka geometry loop`` takes the same two options, so both studies start from the same base model.

Writes ``transmission.json`` / ``transmission.md``, ``transmission_R.png`` and ``reset_gain_vs_drop.png`` in
``--out``.
"""

from __future__ import annotations

import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.geometry.net import Net
from cfka_jax.geometry.ood import TASKS, OODWorldConfig, make_world
from cfka_jax.geometry.plasticity import SFTConfig, Trainer, drop_gain, position_chance, probe_accuracy
from cfka_jax.geometry.readout import (
    normalized_transmission,
    probe_transmission,
    readout_matrix,
    readout_size,
    transmission_tokens,
)
from cfka_jax.geometry.resets import ResetConfig, build, reset
from cfka_jax.geometry.synthetic import RULES, ModelConfig
from cfka_jax import jsonio
from cfka_jax.claims.results import Clock
from cfka_jax.experiments import geometry_record
from cfka_jax.experiments.geometry_common import markdown_table, save_plot, write_markdown


@dataclasses.dataclass(frozen=True)
class OODScale:
    """Sizes of one run of the OOD-probe transmission study (``checkpoints``: CPT steps, the last = ``cpt_steps``)."""

    world: OODWorldConfig
    model: ModelConfig
    pt_steps: int
    pt_lr: float
    cpt_steps: int
    cpt_lr: float
    checkpoints: tuple[int, ...]
    sft_steps: int
    batch: int
    seeds: tuple[int, ...]

    def __post_init__(self):
        if sorted(set(self.checkpoints)) != list(self.checkpoints) or self.checkpoints[-1] != self.cpt_steps \
                or self.checkpoints[0] < 1:
            raise ValueError(f"checkpoints must increase from >= 1 to cpt_steps ({self.cpt_steps}), "
                             f"got {self.checkpoints}")


OOD_SCALES = {
    "smoke": OODScale(OODWorldConfig(pt=12, sft=6, probe=6, classes=3, entities=6, parallel=4),
                      ModelConfig(hidden=16, layers=6, heads=2, kv_heads=1, intermediate=24), pt_steps=4,
                      pt_lr=3e-3, cpt_steps=8, cpt_lr=1e-3, checkpoints=(2, 4, 8), sft_steps=2, batch=8,
                      seeds=(0,)),
    "small": OODScale(OODWorldConfig(), ModelConfig(hidden=48, layers=6, heads=4, kv_heads=2, intermediate=96),
                      pt_steps=1500, pt_lr=3e-3, cpt_steps=1200, cpt_lr=1e-3,
                      checkpoints=(10, 25, 50, 100, 200, 350, 500, 700, 950, 1200), sft_steps=30, batch=32,
                      seeds=(0, 1, 2)),
}


IDENT_RULES = RULES
"""``--ident-rule``: f_c of the identification tasks ``ident_a`` / ``ident_b`` (``geometry/ood.py``): ``permute``
(the default, the recorded studies' world, which the small base model does not learn) or ``map``."""


def study_scale(scale: str, ident_rule: str = "permute", ident_classes: int = 0) -> OODScale:
    """The scale ``scale`` with its world's identification tasks set: rule ``ident_rule`` and ``ident_classes``
    classes (0: the scale's). ``--ident-rule map --ident-classes 3`` is the variant whose tasks the base model
    knows after PT (``geometry/ood.py``'s docstring says why); the defaults give ``OOD_SCALES[scale]`` itself.

    Raises:
      ValueError: an unknown scale or rule, or more classes than the scale's smallest split holds, naming the
        option.
    """
    if scale not in OOD_SCALES:
        raise ValueError(f"--scale: the ood world has scales {sorted(OOD_SCALES)}, got {scale!r}")
    if ident_rule not in IDENT_RULES:
        raise ValueError(f"--ident-rule must be one of {IDENT_RULES}, got {ident_rule!r}")
    s = OOD_SCALES[scale]
    w = s.world
    most = min(w.pt, w.sft, w.probe)
    if isinstance(ident_classes, bool) or not isinstance(ident_classes, int) or not 0 <= ident_classes <= most:
        raise ValueError(f"--ident-classes must be an integer from 1 to {most} (the smallest split of scale "
                         f"{scale!r}) or 0 (the scale's {w.classes}), got {ident_classes!r}")
    return dataclasses.replace(s, world=dataclasses.replace(w, ident_rule=ident_rule,
                                                            classes=ident_classes or w.classes))


def ident_regime(s: OODScale) -> str:
    """A record's words for the identification tasks of ``s``'s world."""
    rule = {"permute": "f_c(x)_i = π_c(x_{σ_c(i)})", "map": "f_c(x)_i = π_c(x_i)"}[s.world.ident_rule]
    return f"identification tasks: rule {s.world.ident_rule} ({rule}), {s.world.classes} classes"


def reset_table(num_layers: int) -> dict[str, ResetConfig]:
    """The resets of the study by name (``last4`` needs ≥ 4 blocks, ``paper_last4`` ≥ 3)."""
    table = {"none": ResetConfig(), "readout": ResetConfig("readout"), "readout_only": ResetConfig("readout_only")}
    if num_layers >= 3:
        table["paper_last4"] = ResetConfig("readout", paper_last4=True)
    if num_layers >= 4:
        table["last4"] = ResetConfig("readout", top_blocks=4)
    return table


def _pure(params) -> dict:
    """A plain nested dict of numpy arrays (from an ``nnx.State`` or a plain dict)."""
    return jax.tree.map(np.asarray, nnx.to_pure_dict(params) if isinstance(params, nnx.State) else params)


def _train(graphdef, rest, params, split, *, steps: int, lr: float, min_lr: float, batch: int, seed: int,
           at=(), callback=None):
    """AdamW on ``split`` (warm-up 5 %, cosine from ``lr`` to ``min_lr``: ``min_lr = lr`` is the constant CPT
    schedule), batches drawn without replacement from ``Random(seed)``; ``callback(pure params, step)`` after each
    step in ``at``. Returns the final pure parameters."""
    from cfka_jax.train.loop import LoopConfig, run_loop
    from cfka_jax.train.optim import OptimConfig, make_optimizer
    from cfka_jax.train.step import init_state, make_train_step

    tx = make_optimizer(OptimConfig(peak_lr=lr, min_lr=min_lr, warmup_steps=max(1, steps // 20),
                                    total_steps=max(steps, 1), weight_decay=0.0))
    step = make_train_step(graphdef, rest, tx)
    state = init_state(jax.tree.map(jnp.copy, params), tx)
    rng = np.random.default_rng(seed)
    wanted = set(at)

    def batch_at(t: int) -> dict:
        idx = rng.choice(len(split), size=min(batch, len(split)), replace=False)
        return {"tokens": jnp.asarray(split.tokens[idx]), "target_mask": jnp.asarray(split.mask[idx])}

    def snap(t, s):
        callback(_pure(s.params), t)

    state = run_loop(state, step, batch_at, cfg=LoopConfig(steps=steps, log_every=max(steps, 1), progress=False),
                     state_at=(lambda t: t in wanted) if callback else None, on_state=snap if callback else None).state
    return _pure(state.params)


def run_seed(s: OODScale, seed: int, resets: tuple[str, ...], sft_lr: float, log=print) -> dict:
    """PT, CPT, R at every checkpoint and the SFT sweep of one seed."""
    t0 = time.time()
    world = make_world(dataclasses.replace(s.world, seed=seed))
    model = dataclasses.replace(s.model, seed=seed).build(world.vocab_size)
    model_cls, cfg = type(model), model.cfg
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    base = _train(graphdef, rest, params, world.pt_mix, steps=s.pt_steps, lr=s.pt_lr, min_lr=s.pt_lr / 10,
                  batch=s.batch, seed=seed)
    snaps: dict[int, dict] = {}
    _train(graphdef, rest, base, world.cpt, steps=s.cpt_steps, lr=s.cpt_lr, min_lr=s.cpt_lr, batch=s.batch,
           seed=seed, at=s.checkpoints, callback=lambda p, t: snaps.__setitem__(t, p))
    log(f"[transmission ood] seed {seed}: PT + CPT done in {time.time() - t0:.0f} s")
    probes = {d: world.tasks[d]["probe"].batches(64) for d in TASKS}
    probes["bio"] = world.bio.batches(64)
    train = {d: world.tasks[d]["sft"].batches(s.batch) for d in TASKS}
    net = Net(graphdef, rest, cfg)
    r_at, r_norm, size, acc = _probe_table(net, base, snaps, s.checkpoints, probes)
    chance = {d: position_chance(world.tasks[d]["probe"].tokens, world.tasks[d]["probe"].mask) for d in TASKS}
    chance["bio"] = position_chance(world.bio.tokens, world.bio.mask)
    log(f"[transmission ood] seed {seed}: base probe accuracy " + ", ".join(
        f"{p} {acc[0][p]:.3f} (chance {chance[p]:.3f})" for p in probes))
    table = reset_table(cfg.num_hidden_layers)
    unknown = set(resets) - set(table)
    if unknown:
        raise ValueError(f"resets {sorted(unknown)} need more blocks than the model's {cfg.num_hidden_layers}")
    trainer = Trainer(SFTConfig(steps=s.sft_steps, lr=sft_lr))
    nets, curves = {}, {}
    for c in [0, *s.checkpoints]:
        for name in (("none",) if c == 0 else resets):
            cfg_r, p_r = reset(snaps[c] if c else base, base, cfg, cfg, table[name])
            key = repr(cfg_r)
            if key not in nets:
                g, _, r = nnx.split(build(model_cls, cfg_r, p_r), nnx.Param, ...)
                nets[key] = (g, r)
            for d in TASKS:
                curves[(c, name, d)] = trainer.curve(*nets[key], p_r, train[d], probes[d])
    log(f"[transmission ood] seed {seed}: sweep done, {time.time() - t0:.0f} s in all")
    return {"R": r_at, "R_norm": r_norm, "readout_size": size, "acc": acc, "chance": chance, "curves": curves,
            "seconds": time.time() - t0, "params": int(sum(x.size for x in jax.tree.leaves(base)))}


def _probe_table(net, base, snaps, checkpoints, probes):
    """Per checkpoint c (0 = the base model), before any SFT: ``R_mean`` on every probe set, the same divided by
    the readout size ``s(W_c)`` (``readout.normalized_transmission``), ``s(W_c)`` and the probe accuracy."""
    fn = jax.jit(lambda p, b: transmission_tokens(p, b, net=net))
    logits = jax.jit(lambda p, t, m: net.model(p)(t, attention_mask_BT=m).logits)
    r_at, r_norm, size, acc = {}, {}, {}, {}
    for c in [0, *checkpoints]:
        params = snaps[c] if c else base
        size[c] = readout_size(readout_matrix(params, net.cfg))
        summaries = {p: probe_transmission(params, b, net=net, fn=fn) for p, b in probes.items()}
        r_at[c] = {p: v["R_mean"] for p, v in summaries.items()}
        r_norm[c] = {p: normalized_transmission(v, size[c])["R_norm_mean"] for p, v in summaries.items()}
        acc[c] = {p: probe_accuracy(logits, params, b) for p, b in probes.items()}
    return r_at, r_norm, size, acc


def correlations(runs: dict[int, dict], checkpoints, resets, transmission: str = "R") -> dict:
    """``rho_{task,bio,pooled}/<reset>/<L_final|L_min>`` per seed (``seed<k>/…``) and pooled over seeds;
    ``transmission``: the run's table the drop is read from (``R``, or ``R_norm`` = R / readout size)."""
    out = {}
    for reset_name in [r for r in resets if r != "none"]:
        for key in ("L_final", "L_min"):
            pooled = {"task": ({}, {}, {}, {}), "bio": ({}, {}, {}, {}), "pooled": ({}, {}, {}, {})}
            for seed, run in runs.items():
                r_at, cur = run[transmission], run["curves"]
                r0 = r_at[0]
                per = {"task": ({}, {}, {}, {}), "bio": ({}, {}, {}, {}), "pooled": ({}, {}, {}, {})}
                for d in TASKS:
                    for c in checkpoints:
                        point = (seed, d, c)
                        none, rst = cur[(c, "none", d)][key], cur[(c, reset_name, d)][key]
                        sources = {"task": (r0[d], r_at[c][d]), "bio": (r0["bio"], r_at[c]["bio"]),
                                   "pooled": (1.0, 1.0 - np.mean([(r0[p] - r_at[c][p]) / r0[p] for p in r0]))}
                        for kind, (rb, rc) in sources.items():
                            for acc in (per[kind], pooled[kind]):
                                acc[0][point], acc[1][point], acc[2][point], acc[3][point] = rb, rc, none, rst
                for kind, acc in per.items():
                    out[f"seed{seed}/rho_{kind}/{reset_name}/{key}"] = _rho(*acc)
            for kind, acc in pooled.items():
                out[f"rho_{kind}/{reset_name}/{key}"] = _rho(*acc)
    return out


def _rho(r_base, r_ckpt, none, rst):
    # drop_gain keys R(base) by the first element of the point; points here are (seed, task, checkpoint)
    return drop_gain({k: r_base[k] for k in r_base}, {(k, 0): r_ckpt[k] for k in r_ckpt},
                     {(k, 0): none[k] for k in none}, {(k, 0): rst[k] for k in rst})


def _plots(out, runs, corr, checkpoints, reset_main):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    steps = [0, *checkpoints]
    for i, p in enumerate([*TASKS, "bio"]):
        vals = np.array([[run["R"][c][p] for c in steps] for run in runs.values()])
        ax.errorbar(np.maximum(steps, 1), vals.mean(0), yerr=vals.std(0), fmt="o-", ms=3, color=f"C{i}",
                    label=p + (" (in domain)" if p == "bio" else ""))
    ax.set(xscale="log", xlabel="CPT step (0 plotted at 1)", ylabel="R_mean", title="transmission (mean ± sd, seeds)")
    ax.legend(fontsize=7)
    save_plot(fig, out, "transmission_R")
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6))
    for ax, kind in zip(axes, ("task", "bio")):
        c = corr[f"rho_{kind}/{reset_main}/L_final"]
        drop, gain = np.asarray(c["drop"]), np.asarray(c["gain"])
        task_of = [p[0].split(",")[1].strip(" '") for p in c["points"]]
        for i, d in enumerate(TASKS):
            m = np.array([t == d for t in task_of])
            ax.scatter(drop[m], gain[m], s=12, color=f"C{i}", label=d)
        ax.axhline(0, color="k", lw=0.5)
        ax.set(xlabel=f"ΔR ({'own probe' if kind == 'task' else 'bio probe'})", ylabel=f"gain ({reset_main})",
               title=f"ρ_{kind} = {c['rho']:.2f} (n = {c['n']})")
    axes[0].legend(fontsize=7)
    save_plot(fig, out, "reset_gain_vs_drop")


SEED_VERSION = 2
"""Seed files of an earlier layout (without accuracy, chance and the size-normalised R) are rerun, not read."""
_BY_CHECKPOINT = ("R", "R_norm", "readout_size", "acc")


def _cached_seed(out, s: OODScale, seed: int, resets, sft_lr: float) -> dict:
    """:func:`run_seed`, saved to ``out/seed<k>.json`` with its wall and CPU seconds; an earlier run's file with the
    same scale, resets and SFT lr is read back instead (so seeds can run in separate processes and a last call with
    all seeds pools them)."""
    path = out / f"seed{seed}.json"
    scale = json.loads(json.dumps(dataclasses.asdict(s)))
    if scale["world"]["ident_rule"] == "permute":  # the default world: seed files from before the field still match
        del scale["world"]["ident_rule"]
    key = {"scale": scale, "resets": list(resets), "sft_lr": sft_lr, "version": SEED_VERSION}
    if path.exists():
        saved = jsonio.read_json_object(path, "a seed record (JSON object)")
        if saved.get("key") == key:
            return {**{k: {int(c): v for c, v in saved[k].items()} for k in _BY_CHECKPOINT},
                    **{k: saved[k] for k in ("chance", "seconds", "params", "wall_s", "cpu_s")},
                    "curves": {(int(c), r, d): v for c, r, d, v in saved["curves"]}}
    clock = Clock()
    run = {**run_seed(s, seed, resets, sft_lr), **clock.elapsed()}
    jsonio.write_json_atomic(path, {"key": key, **{k: v for k, v in run.items() if k != "curves"},
                                    "curves": [[*k, v] for k, v in run["curves"].items()]}, portable=True, indent=1)
    return run


_sig = geometry_record.significant


def record_rows(seed: int, run: dict, checkpoints, resets) -> list[dict]:
    """One row per (task D, checkpoint c, reset) of a finished seed (the base model, c = 0, with ``none`` only):
    R and R / readout size on D's own probe and on ``bio`` at c before SFT, the readout size, D's probe accuracy
    at c and at the base model, its position-only chance, and the SFT outcome from c under the reset (``l0``,
    ``l_final``, ``l_min``, ``plast``). The drop, the gain and ρ are the rules' to compute
    (``claims/papers/token_force_rules.py``)."""
    rows = []
    for d in TASKS:
        for c in [0, *checkpoints]:
            for name in (("none",) if c == 0 else resets):
                cur = run["curves"][(c, name, d)]
                rows.append({"seed": seed, "task": d, "cpt_step": c, "reset": name, "r": _sig(run["R"][c][d]),
                             "r_norm": _sig(run["R_norm"][c][d]), "r_bio": _sig(run["R"][c]["bio"]),
                             "r_bio_norm": _sig(run["R_norm"][c]["bio"]),
                             "readout_size": _sig(run["readout_size"][c]), "acc": _sig(run["acc"][c][d]),
                             "base_acc": _sig(run["acc"][0][d]), "chance": _sig(run["chance"][d]),
                             **{k: _sig(cur[v]) for k, v in (("l0", "L0"), ("l_final", "L_final"),
                                                             ("l_min", "L_min"), ("plast", "plast"))}})
    return rows


def _regime(s: OODScale, params: int, ident: bool = False) -> dict:
    """The record's regime; ``ident``: say how the identification tasks are set (a run with ``--ident-rule`` /
    ``--ident-classes``; the default run's regime is the committed record's)."""
    extra = {"ident_tasks": ident_regime(s)} if ident else {}
    return {"model": f"Qwen2 port (tied head), d = {s.model.hidden}, {s.model.layers} blocks",
            "params": f"{params:,}",
            "pt_quality": "rows' base_acc: each task's probe accuracy (greedy, supervised tokens) before CPT, against "
                          "its position-only chance (chance); the rules leave out a task below chance + "
                          "0.5 · (1 − chance) at a seed",
            "world": f"geometry/ood.py: out-of-domain tasks {', '.join(TASKS)} (PT only) and a fact domain (CPT; "
                     "its probe is bio)",
            "dose": f"PT {s.pt_steps} AdamW steps on the tasks; CPT {s.cpt_steps} steps on the domain "
                    f"({len(s.checkpoints)} checkpoints); SFT {s.sft_steps} AdamW steps per task, checkpoint and "
                    "reset",
            "normalisation": "r_norm = r / readout_size, readout_size = ‖W − 1μᵀ‖_F² / (V − 1) of the checkpoint's "
                             "readout (geometry/readout.py)", **extra}


def run_ood(cfg) -> dict:
    """The study for a ``TransmissionConfig`` with ``world='ood'``; with ``cfg.record`` the produced record
    ``token-force/<record>`` is rewritten after every finished seed (:func:`record_rows`)."""
    import pathlib

    s = study_scale(cfg.scale, cfg.ident_rule, cfg.ident_classes)
    ident = (cfg.ident_rule, cfg.ident_classes) != ("permute", 0)
    seeds = tuple(cfg.seeds) or s.seeds
    resets = tuple(cfg.resets)
    out = pathlib.Path(cfg.out)
    runs, done = {}, []
    start = geometry_record.Clock()  # the record names the code this study started with
    for seed in seeds:
        runs[seed] = run = _cached_seed(out, s, seed, resets, cfg.sft_lr)
        if cfg.record:
            done.append({"seed": seed, "rows": record_rows(seed, run, s.checkpoints, resets),
                         "wall_s": run.get("wall_s"), "cpu_s": run.get("cpu_s")})
            geometry_record.write_study_record("transmission", cfg, done, _regime(s, run["params"], ident),
                                               planned=seeds, pt_per_seed=True, clock=start)
    corr = correlations(runs, s.checkpoints, resets)
    corr_norm = correlations(runs, s.checkpoints, resets, transmission="R_norm")
    result = {"config": dataclasses.asdict(cfg), "scale": dataclasses.asdict(s), "checkpoints": list(s.checkpoints),
              **{k: {seed: run[k] for seed, run in runs.items()} for k in (*_BY_CHECKPOINT, "chance")},
              "correlations": corr, "correlations_norm": corr_norm,
              "seconds": {seed: run["seconds"] for seed, run in runs.items()},
              "params": runs[seeds[0]]["params"],
              "sft": [{"seed": seed, "checkpoint": c, "reset": r, "task": t, **v}
                      for seed, run in runs.items() for (c, r, t), v in run["curves"].items()]}
    jsonio.write_json_atomic(out / "transmission.json", result, portable=True, indent=1)
    _markdown(out, runs, s, resets, corr, corr_norm)
    _plots(out, runs, corr, s.checkpoints, "readout" if "readout" in resets else resets[1])
    return result


def _markdown(out, runs, s, resets, corr, corr_norm):
    probes = [*TASKS, "bio"]
    mean = lambda f: float(np.mean([f(run) for run in runs.values()]))  # noqa: E731
    body = "Probe accuracy before CPT (mean over seeds) and the position-only chance:\n\n" + markdown_table(
        ["probe", "accuracy", "chance"], [[p, mean(lambda r: r["acc"][0][p]), mean(lambda r: r["chance"][p])]
                                          for p in probes])
    for key, title in (("R", "R_mean"), ("R_norm", "R_mean / readout size")):
        body += f"\n{title} per probe set over CPT steps (mean over seeds):\n\n" + markdown_table(
            ["step", *probes], [[c, *(mean(lambda r: r[key][c][p]) for p in probes)] for c in [0, *s.checkpoints]])
    plast = [[c, r, *(float(np.mean([run["curves"][(c, r, d)][k] for run in runs.values() for d in TASKS]))
                      for k in ("L0", "L_final", "plast"))]
             for c in [0, *s.checkpoints] for r in (("none",) if c == 0 else resets)]
    body += "\nSFT from each checkpoint (mean over seeds and tasks):\n\n" + markdown_table(
        ["checkpoint", "reset", "L0", "L_final", "plasticity"], plast)
    for table, title in ((corr, "R"), (corr_norm, "R / readout size")):
        body += f"\nTransmission drop ({title}) vs reset gain (Spearman, every task):\n\n" + markdown_table(
            ["statistic", "ρ", "p", "n"], [[k, v["rho"], v["p"], v["n"]] for k, v in table.items()])
    write_markdown(out, "transmission", "Readout transmission over a long CPT run, out-of-domain probes", body)
