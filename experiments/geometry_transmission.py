"""``cfka geometry transmission``: readout transmission over Biography CPT, resets and plasticity (spec §7).

1. PT then naive CPT of the Biography preset (``runs/biography.pretrain`` / ``continual``), with
   ``transmission_evaluator`` on the probe sets at every evaluation and the CPT parameters kept at
   5 / 10 / 20 / 40 / 100 % of the CPT steps (§7.2 project default).
2. Probe sets (supervised tokens = attribute values, the Biography "response" tokens): ``task_<attr>`` = the
   <attr> values of the PT people's test biographies number 1 (one per attribute: the five SFT tasks D),
   ``bio`` = all values of the CPT people's test biographies (in domain), ``original`` = all values of the PT
   test biographies number 2.
3. Plasticity sweep (§7.3): from the base (PT) model and from every CPT checkpoint, with each reset of §7.4
   (``--resets``, default none, readout = "Reset readout", readout_only, paper_last4 = readout + 3 blocks; the
   base model gets ``none`` only), fine-tune on task D (the <attr> values of the PT test biographies number 0)
   and read the task probe loss before and after: ``plast = L(step0) − L(final)``. Every finished
   (checkpoint, reset) cell is saved to ``sweep.json``, so a rerun resumes the sweep.
4. Transmission drop vs reset gain (§7.5): points (D, c ≠ base); ``ρ_task`` (ΔR on D's probe), ``ρ_bio``
   (ΔR on ``bio``), ``ρ_pooled`` (mean ΔR over all probe sets); gain = L_final(none) − L_final(readout); variants
   with paper_last4 and with the minimum loss.

Writes ``transmission.json`` / ``transmission.md``, ``transmission_R.png`` (R over CPT steps per probe set) and
``reset_gain_vs_drop.png``. The CPT checkpoints are also saved as ``snapshots/step_<k>.npz``, so a rerun in the
same ``--out`` resumes PT and CPT from their run folders and redoes only the sweep.

Seeds and the record (``experiments/geometry_record.py``): seed k trains its own PT and CPT models (initialisation
and batch order from k; the world is the preset's), into ``<out>/seed<k>/`` with ``--seeds``, else seed 0 into
``<out>``. A finished seed leaves ``transmission_rows.json`` (:func:`record_rows`) and is not run again for the same
config and regime. With ``--record NAME`` the produced record ``token-force/NAME`` is rewritten after every finished
seed: per seed the PT model's quality (kind ``pt``), R per probe set at every evaluated CPT step (``R``), the SFT
outcome per checkpoint, reset and task (``sft``) and the drop-vs-gain Spearman statistics (``rho``), in the columns
of the transcribed one-seed record ``token-force/transmission_biography``, so the rules read both.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import jax
import numpy as np
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.data.templates import ATTRIBUTES
from cfka_jax.geometry.plasticity import SFTConfig, Trainer, drop_gain, value_batches
from cfka_jax.geometry.readout import transmission_evaluator
from cfka_jax.geometry.resets import ResetConfig, build, reset
from cfka_jax.trees import flatten_mapping, nest
from cfka_jax.experiments import geometry_record
from cfka_jax.experiments.geometry_common import (
    markdown_table,
    save_plot,
    scale,
    write_markdown,
)

FRACTIONS = (0.05, 0.1, 0.2, 0.4, 1.0)


def resets_for(num_layers: int) -> dict[str, ResetConfig]:
    """none, readout, readout_only and the paper's "Reset last 4" (readout + 3 blocks) under the key
    ``paper_last4``; a model with fewer than 3 blocks gets readout + its top L − 1 blocks under that key. On a
    3-block model ``paper_last4`` restores every block: only the final norm stays the CPT model's."""
    last = ResetConfig("readout", paper_last4=True) if num_layers >= 3 else ResetConfig("readout",
                                                                                        top_blocks=num_layers - 1)
    return {"none": ResetConfig(), "readout": ResetConfig("readout"), "readout_only": ResetConfig("readout_only"),
            "paper_last4": last}


RESETS = ("none", "readout", "readout_only", "paper_last4")
OOD_RESETS = (*RESETS, "last4")
"""``--world ood`` also takes ``last4`` (readout + 4 blocks, k = 4 literally)."""
WORLDS = ("biography", "ood")


@dataclasses.dataclass(frozen=True)
class TransmissionConfig:
    """``resets``: the resets swept (``none`` and one of ``readout`` / ``paper_last4`` are needed for the
    drop-vs-gain statistic); ``paper_last4`` is the literal-named top-(L − 1) reset on a model under 4 blocks.
    ``world``: ``biography`` (PT/CPT on Biography people, probes = the PT people's facts) or ``ood`` (PT on
    out-of-domain rule tasks, long CPT on a fact domain, probes = those tasks; ``geometry_transmission_ood``);
    ``seeds``: the seeds (empty: the ``ood`` scale's, or seed 0 into ``out`` for ``biography``); ``record``: the
    produced record ``token-force/<record>`` under ``results``, rewritten after every finished seed (``biography``:
    :func:`record_rows`; ``ood``: one row per seed, task, checkpoint and reset,
    ``geometry_transmission_ood.record_rows``). ``ident_rule`` / ``ident_classes`` (``--world ood`` only): the
    identification tasks' rule and classes (0: the scale's), ``geometry_transmission_ood.study_scale``;
    ``map`` and 3 are the tasks the base model knows."""

    scale: str = "smoke"
    arch: str = "qwen"
    cache_dir: str = "runs/data-cache"
    sft_lr: float = 1e-3
    resets: tuple[str, ...] = RESETS
    world: str = "biography"
    ident_rule: str = "permute"
    ident_classes: int = 0
    seeds: tuple[int, ...] = ()
    out: str = "runs/geometry/transmission"
    record: str | None = None
    results: str = "results"

    def __post_init__(self):
        if self.world not in WORLDS:
            raise ValueError(f"world must be one of {WORLDS}, got {self.world!r}")
        allowed = OOD_RESETS if self.world == "ood" else RESETS
        unknown = set(self.resets) - set(allowed)
        if unknown or "none" not in self.resets or not set(self.resets) & {"readout", "paper_last4", "last4"}:
            raise ValueError(f"resets must be drawn from {allowed} and hold 'none' and 'readout' or 'paper_last4', "
                             f"got {self.resets}")
        if any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be non-negative integers, got {self.seeds}")
        geometry_record.check_seeds(self.seeds)
        geometry_record.check_record_name(self.record)
        if self.world == "ood":
            from cfka_jax.experiments.geometry_transmission_ood import study_scale

            study_scale(self.scale, self.ident_rule, self.ident_classes)
        elif (self.ident_rule, self.ident_classes) != ("permute", 0):
            raise ValueError(f"--ident-rule / --ident-classes set the ood world's identification tasks: they need "
                             f"--world ood, got --world {self.world}")


def checkpoints(total: int) -> list[int]:
    """CPT steps at 5/10/20/40/100 % of ``total`` (at least step 1, duplicates dropped)."""
    return sorted({max(1, round(f * total)) for f in FRACTIONS})


def probe_sets(bundle, batch_size: int) -> tuple[dict, dict]:
    """(probe batches by name, SFT train batches by task)."""
    pad = bundle.eos_id
    pt, cpt = bundle.splits["pt_test"], bundle.splits["cpt_test"]
    number = np.asarray(pt.number)
    rows = {n: np.flatnonzero(number == n) for n in (0, 1, 2)}
    all_attrs = range(len(ATTRIBUTES))
    probes = {f"task_{a}": value_batches(pt, rows[1], [i], batch_size=batch_size, pad_id=pad)
              for i, a in enumerate(ATTRIBUTES)}
    probes["bio"] = value_batches(cpt, np.arange(len(cpt)), all_attrs, batch_size=batch_size, pad_id=pad)
    probes["original"] = value_batches(pt, rows[2], all_attrs, batch_size=batch_size, pad_id=pad)
    train = {f"task_{a}": value_batches(pt, rows[0], [i], batch_size=batch_size, pad_id=pad)
             for i, a in enumerate(ATTRIBUTES)}
    return probes, train


def _snapshots(store: dict, steps: list[int], folder: pathlib.Path):
    """An evaluator keeping the CPT parameters at ``steps`` in ``store`` and in ``folder/step_<k>.npz`` (so a
    resumed CPT run finds the checkpoints it trained before)."""

    def factory(graphdef, rest):
        def evaluate(params, step):
            if step in steps:
                store[step] = jax.tree.map(np.asarray, nnx.to_pure_dict(params))
                flat = {"/".join(map(str, k)): v for k, v in flatten_mapping(store[step]).items()}
                jsonio.write_npz_atomic(folder / f"step_{step}.npz", flat)
            return {}

        return evaluate

    return factory


def _load_snapshots(store: dict, steps: list[int], folder: pathlib.Path) -> None:
    for step in steps:
        path = folder / f"step_{step}.npz"
        if step not in store and path.exists():
            arrays = jsonio.read_npz(path)
            store[step] = nest({tuple(int(p) if p.isdigit() else p for p in k.split("/")): a
                                for k, a in arrays.items()})


def _cpt(cfg, s, bundle, probes, seed: int, out: pathlib.Path):
    """PT and naive CPT of seed ``seed`` in ``out/pt`` and ``out/cpt`` (resumed from there), the CPT parameters at
    the checkpoints in ``out/snapshots``."""
    from cfka_jax.runs.biography import continual, pretrain
    from cfka_jax.runs.presets import BIOGRAPHY
    from cfka_jax.runs.specs import CPTSpec, PTSpec

    pt = pretrain(PTSpec(preset=s.bio_preset, out=str(out / "pt"), arch=cfg.arch, cache_dir=cfg.cache_dir,
                         seed=seed, progress=False), bundle)
    steps = checkpoints(BIOGRAPHY[s.bio_preset].cpt.steps)
    every = math.gcd(*steps)
    snaps: dict = {}
    cpt = continual(CPTSpec(preset=s.bio_preset, out=str(out / "cpt"), method="naive", arch=cfg.arch,
                            pt_dir=str(out / "pt"), cache_dir=cfg.cache_dir, seed=seed, progress=False,
                            eval_every=every),
                    pt=pt, data=bundle, extra_evaluators={"transmission": transmission_evaluator(probes),
                                                          "snapshots": _snapshots(snaps, steps, out / "snapshots")})
    _load_snapshots(snaps, steps, out / "snapshots")
    if sorted(snaps) != steps:
        raise ValueError(f"CPT checkpoints {sorted(snaps)} missing from {steps}: {out / 'cpt'} was resumed "
                         f"without {out / 'snapshots'}; remove {out / 'cpt'} to retrain CPT")
    return pt, cpt, snaps, steps


def _r_table(history: list[dict], probes: dict) -> dict[int, dict[str, float]]:
    return {int(r["step"]): {p: r[f"{p}/R_mean"] for p in probes} for r in history
            if r.get("kind") == "eval" and "bio/R_mean" in r}


def _sweep_cache(folder: pathlib.Path, sft: SFTConfig) -> tuple[pathlib.Path, dict]:
    """The finished (checkpoint, reset) cells of an earlier sweep with the same SFT config (``sweep.json``)."""
    path = folder / "sweep.json"
    cells = {}
    if path.exists():
        saved = jsonio.read_json_object(path, "a sweep record (JSON object)")
        if saved.get("sft") == dataclasses.asdict(sft):
            cells = {(int(c), r, t): v for c, r, t, v in saved["cells"]}
    return path, cells


def _sweep(pt, snaps, steps, probes, train, cfg, s, out: pathlib.Path):
    """{(checkpoint, reset, task): curve}; every finished (checkpoint, reset) cell is saved to ``out/sweep.json``,
    so a rerun in the same folder resumes the sweep. The base model (checkpoint 0) gets ``none`` only: a reset of
    the base model towards itself is the base model."""
    model_cls, model_cfg = type(pt.model()), pt.model().cfg
    base = jax.tree.map(np.asarray, nnx.to_pure_dict(pt.params))
    sft = SFTConfig(steps=s.sft_task_steps, lr=cfg.sft_lr)
    trainer = Trainer(sft)
    path, cells = _sweep_cache(out, sft)
    nets: dict = {}
    table = resets_for(model_cfg.num_hidden_layers)
    for c in [0, *steps]:
        params_c = base if c == 0 else snaps[c]
        for name in (("none",) if c == 0 else cfg.resets):
            if all((c, name, task) in cells for task in train):
                continue
            cfg_r, p_r = reset(params_c, base, model_cfg, model_cfg, table[name])
            arch = repr(cfg_r)  # one graph (and one compiled step) per architecture: tied or untied head
            if arch not in nets:
                g, _, rest = nnx.split(build(model_cls, cfg_r, p_r), nnx.Param, ...)
                nets[arch] = (g, rest)
            for task in train:
                cells[(c, name, task)] = trainer.curve(*nets[arch], p_r, train[task], probes[task])
            jsonio.write_json_atomic(path, {"sft": dataclasses.asdict(sft), "cells": [[*k, v] for k, v in cells.items()]})
            print(f"[transmission] checkpoint {c}, reset {name}: mean plasticity "
                  f"{np.mean([cells[(c, name, t)]['plast'] for t in train]):.4f}", flush=True)
    return cells


def _correlations(r_at, curves, steps, tasks, resets):
    r0 = r_at[0]
    res = {}
    for reset_name in [r for r in resets if r not in ("none", "readout_only")]:
        for key in ("L_final", "L_min"):
            none = {(d, c): curves[(c, "none", d)][key] for d in tasks for c in steps}
            rst = {(d, c): curves[(c, reset_name, d)][key] for d in tasks for c in steps}
            tag = f"{reset_name}/{key}"
            res[f"rho_task/{tag}"] = drop_gain({d: r0[d] for d in tasks}, {(d, c): r_at[c][d] for d in tasks
                                                                           for c in steps}, none, rst)
            res[f"rho_bio/{tag}"] = drop_gain({d: r0["bio"] for d in tasks},
                                              {(d, c): r_at[c]["bio"] for d in tasks for c in steps}, none, rst)
            # pooled: the mean relative drop over all probe sets, written as R(base) = 1, R(c) = 1 − mean drop
            pooled = {(d, c): 1.0 - np.mean([(r0[p] - r_at[c][p]) / r0[p] for p in r0]) for d in tasks
                      for c in steps}
            res[f"rho_pooled/{tag}"] = drop_gain(dict.fromkeys(tasks, 1.0), pooled, none, rst)
    return res


def _plots(out, r_at, corr):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    steps = sorted(r_at)
    for p in r_at[steps[0]]:
        ax.plot(steps, [r_at[t][p] for t in steps], "o-", ms=3, label=p)
    ax.set(xlabel="CPT step", ylabel="R_mean", title="readout transmission on the probe sets")
    ax.legend(fontsize=7, ncol=2)
    save_plot(fig, out, "transmission_R")
    fig, ax = plt.subplots(figsize=(5, 3.8))
    c = corr.get("rho_task/readout/L_final") or corr["rho_task/paper_last4/L_final"]
    ax.scatter(c["drop"], c["gain"], s=16)
    ax.axhline(0, color="k", lw=0.5)
    ax.set(xlabel="transmission drop ΔR (task probe)", ylabel="reset gain (Reset readout)",
           title=f"ρ_task = {c['rho']:.2f} (n = {c['n']})")
    save_plot(fig, out, "reset_gain_vs_drop")


def run_transmission(cfg: TransmissionConfig):
    """The study of ``cfg``: the ``ood`` world's (``geometry_transmission_ood.run_ood``), or the Biography world's
    seeds (finished ones resumed), returning their rows files (``geometry_record.run_study``)."""
    if cfg.world == "ood":
        from cfka_jax.experiments.geometry_transmission_ood import run_ood

        return run_ood(cfg)
    from cfka_jax.data.pipeline import build_data
    from cfka_jax.runs.presets import BIOGRAPHY

    s = scale(cfg.scale)
    preset = BIOGRAPHY[s.bio_preset]
    bundle = build_data(preset.data_config(), cfg.cache_dir)
    probes, train = probe_sets(bundle, preset.eval_batch)
    regime = bio_regime(cfg, s, bundle)
    return geometry_record.run_study("transmission", cfg,
                                     lambda seed, out: _bio_seed(cfg, s, bundle, probes, train, seed, out), regime)


def bio_regime(cfg: TransmissionConfig, s, bundle) -> dict:
    """What a Biography seed runs, resolved from the scale (the record's regime; a seed finished under another
    regime runs again)."""
    from cfka_jax.runs.biography import build_model
    from cfka_jax.runs.presets import BIOGRAPHY

    p = BIOGRAPHY[s.bio_preset]
    model = nnx.eval_shape(lambda: build_model(p, cfg.arch, len(bundle.tokenizer), 0))
    params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    head = "tied head" if getattr(model.cfg, "tie_word_embeddings", False) else "untied head"
    world = bundle.config.bio
    return {"model": f"{cfg.arch} port ({head}), Biography preset {p.name}: d = {p.model.hidden}, "
                     f"{p.model.layers} blocks",
            "params": f"{params:,}",
            "pt_quality": "rows of kind pt: the PT model's Original hFTA / sFTA (the PT people's test biographies) "
                          "before CPT and after it, per seed",
            "world": f"{world.num_pt_people} PT + {world.num_cpt_people} CPT people (world seed {world.seed}; seed "
                     "k draws the models' initialisation and batch order); probes task_<attr> (PT people's test "
                     "biography no. 1), original (no. 2), bio (CPT people, in domain); SFT on no. 0",
            "dose": f"PT {p.pt.steps} AdamW steps; naive CPT {p.cpt.steps} steps (lr {p.cpt.peak_lr:g} → "
                    f"{p.cpt.min_lr:g}, batch {p.cpt.batch} × {bundle.config.seq_len}), checkpoints "
                    f"{', '.join(map(str, checkpoints(p.cpt.steps)))}; SFT {s.sft_task_steps} AdamW steps (lr "
                    f"{cfg.sft_lr:g}) per task from each checkpoint, resets {' / '.join(cfg.resets)}"}


def _bio_seed(cfg: TransmissionConfig, s, bundle, probes, train, seed: int, out: pathlib.Path) -> list[dict]:
    """One Biography seed into ``out``: PT, CPT, the plasticity sweep, its tables and plots; returns its record
    rows (:func:`record_rows`)."""
    pt, cpt, snaps, steps = _cpt(cfg, s, bundle, probes, seed, out)
    r_at = _r_table(cpt.history, probes)
    curves = _sweep(pt, snaps, steps, probes, train, cfg, s, out)
    resets = list(cfg.resets)
    corr = _correlations(r_at, curves, steps, list(train), resets)
    result = {"config": dataclasses.asdict(cfg), "seed": seed, "checkpoints": steps, "R": r_at, "correlations": corr,
              "sft": [{"checkpoint": c, "reset": r, "task": t, **v} for (c, r, t), v in curves.items()],
              "cpt_final": {k: v for k, v in cpt.final.items() if isinstance(v, (int, float))}}
    jsonio.write_json_atomic(out / "transmission.json", result, portable=True, indent=1)
    r_rows = [[t, *(r_at[t][p] for p in probes)] for t in sorted(r_at)]
    body = "R_mean per probe set over CPT steps:\n\n" + markdown_table(["step", *probes], r_rows)
    plast = [[c, r, float(np.mean([curves[(c, r, t)]["plast"] for t in train]))] for c in [0, *steps]
             for r in (("none",) if c == 0 else resets)]
    body += "\nMean plasticity L(step0) − L(final) over the five tasks:\n\n" + markdown_table(
        ["checkpoint", "reset", "plasticity"], plast)
    body += "\nTransmission drop vs reset gain (Spearman):\n\n" + markdown_table(
        ["statistic", "ρ", "p", "n"], [[k, v["rho"], v["p"], v["n"]] for k, v in corr.items()])
    write_markdown(out, "transmission", f"Readout transmission, resets and plasticity (Biography CPT, seed {seed})",
                   body)
    _plots(out, r_at, corr)
    return record_rows(seed, r_at, curves, corr, pt.final, cpt.final)


PT_QUALITY = {"original_hfta": "Original/hFTA", "original_sfta": "Original/sFTA"}
"""The ``pt`` row's columns: the PT people's held-out FTA (``runs/biography``'s final metrics), before CPT and
(``cpt_`` prefix) after it."""


def record_rows(seed: int, r_at: dict, curves: dict, corr: dict, pt_final: dict, cpt_final: dict) -> list[dict]:
    """The record rows of one finished Biography seed, in the columns of the transcribed one-seed record:

    * ``pt``: the PT model's Original hFTA / sFTA before CPT (``original_*``) and after it (``cpt_original_*``);
    * ``R``: ``r_mean`` (R_mean) per ``probe`` at every evaluated ``cpt_step`` (0 = the PT model);
    * ``sft``: per ``cpt_step`` (0 = the PT model, reset ``none`` only), ``reset`` and ``task``: ``l0``,
      ``l_final``, ``l_min`` and ``plasticity`` = l0 − l_final of the task's probe;
    * ``rho``: per ``statistic`` (``rho_task`` / ``rho_bio`` / ``rho_pooled``), ``reset`` and ``loss``: the
      Spearman ``rho`` of drop vs gain over the seed's (task, checkpoint) points, its ``p`` and ``n``.

    Values keep 6 significant digits (a non-finite one is null)."""
    sig = geometry_record.significant
    pt = {"kind": "pt", "seed": seed, **{k: sig(pt_final[m]) for k, m in PT_QUALITY.items()},
          **{f"cpt_{k}": sig(cpt_final[m]) for k, m in PT_QUALITY.items()}}
    rows = [pt, *({"kind": "R", "seed": seed, "cpt_step": int(c), "probe": p, "r_mean": sig(v)}
                  for c in sorted(r_at) for p, v in r_at[c].items())]
    rows += [{"kind": "sft", "seed": seed, "cpt_step": int(c), "reset": name, "task": task, "l0": sig(v["L0"]),
              "l_final": sig(v["L_final"]), "l_min": sig(v["L_min"]), "plasticity": sig(v["plast"])}
             for (c, name, task), v in sorted(curves.items())]
    for key, v in corr.items():
        statistic, reset_name, loss = key.split("/")
        rows.append({"kind": "rho", "seed": seed, "statistic": statistic, "reset": reset_name, "loss": loss,
                     "rho": sig(v["rho"]), "p": sig(v["p"]), "n": int(v["n"])})
    return rows
