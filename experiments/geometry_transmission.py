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
    ``seeds``: the ``ood`` world's seeds (empty: the scale's); ``record``: with ``world='ood'``, the produced
    record ``token-force/<record>`` under ``results``, rewritten after every finished seed (one row per seed,
    task, checkpoint and reset; ``geometry_transmission_ood.record_rows``)."""

    scale: str = "smoke"
    arch: str = "qwen"
    cache_dir: str = "runs/data-cache"
    sft_lr: float = 1e-3
    resets: tuple[str, ...] = RESETS
    world: str = "biography"
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
        if self.record and self.world != "ood":
            raise ValueError("--record writes the ood world's record (--world ood); the biography world's record "
                             "(token-force/transmission_biography) is transcribed from its one-seed run")


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


def _cpt(cfg, s, bundle, probes):
    from cfka_jax.runs.biography import continual, pretrain
    from cfka_jax.runs.presets import BIOGRAPHY
    from cfka_jax.runs.specs import CPTSpec, PTSpec

    out = pathlib.Path(cfg.out)
    pt = pretrain(PTSpec(preset=s.bio_preset, out=str(out / "pt"), arch=cfg.arch, cache_dir=cfg.cache_dir,
                         progress=False), bundle)
    steps = checkpoints(BIOGRAPHY[s.bio_preset].cpt.steps)
    every = math.gcd(*steps)
    snaps: dict = {}
    cpt = continual(CPTSpec(preset=s.bio_preset, out=str(out / "cpt"), method="naive", arch=cfg.arch,
                            pt_dir=str(out / "pt"), cache_dir=cfg.cache_dir, progress=False, eval_every=every),
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


def _sweep(pt, snaps, steps, probes, train, cfg, s):
    """{(checkpoint, reset, task): curve}; every finished (checkpoint, reset) cell is saved to ``sweep.json``, so a
    rerun in the same ``--out`` resumes the sweep. The base model (checkpoint 0) gets ``none`` only: a reset of
    the base model towards itself is the base model."""
    model_cls, model_cfg = type(pt.model()), pt.model().cfg
    base = jax.tree.map(np.asarray, nnx.to_pure_dict(pt.params))
    sft = SFTConfig(steps=s.sft_task_steps, lr=cfg.sft_lr)
    trainer = Trainer(sft)
    path, out = _sweep_cache(pathlib.Path(cfg.out), sft)
    nets: dict = {}
    table = resets_for(model_cfg.num_hidden_layers)
    for c in [0, *steps]:
        params_c = base if c == 0 else snaps[c]
        for name in (("none",) if c == 0 else cfg.resets):
            if all((c, name, task) in out for task in train):
                continue
            cfg_r, p_r = reset(params_c, base, model_cfg, model_cfg, table[name])
            arch = repr(cfg_r)  # one graph (and one compiled step) per architecture: tied or untied head
            if arch not in nets:
                g, _, rest = nnx.split(build(model_cls, cfg_r, p_r), nnx.Param, ...)
                nets[arch] = (g, rest)
            for task in train:
                out[(c, name, task)] = trainer.curve(*nets[arch], p_r, train[task], probes[task])
            jsonio.write_json_atomic(path, {"sft": dataclasses.asdict(sft), "cells": [[*k, v] for k, v in out.items()]})
            print(f"[transmission] checkpoint {c}, reset {name}: mean plasticity "
                  f"{np.mean([out[(c, name, t)]['plast'] for t in train]):.4f}", flush=True)
    return out


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


def run_transmission(cfg: TransmissionConfig) -> dict:
    if cfg.world == "ood":
        from cfka_jax.experiments.geometry_transmission_ood import run_ood

        return run_ood(cfg)
    from cfka_jax.data.pipeline import build_data
    from cfka_jax.runs.presets import BIOGRAPHY

    s = scale(cfg.scale)
    preset = BIOGRAPHY[s.bio_preset]
    bundle = build_data(preset.data_config(), cfg.cache_dir)
    probes, train = probe_sets(bundle, preset.eval_batch)
    pt, cpt, snaps, steps = _cpt(cfg, s, bundle, probes)
    r_at = _r_table(cpt.history, probes)
    curves = _sweep(pt, snaps, steps, probes, train, cfg, s)
    resets = list(cfg.resets)
    corr = _correlations(r_at, curves, steps, list(train), resets)
    out = pathlib.Path(cfg.out)
    result = {"config": dataclasses.asdict(cfg), "checkpoints": steps, "R": r_at, "correlations": corr,
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
    write_markdown(out, "transmission", "Readout transmission, resets and plasticity (Biography CPT)", body)
    _plots(out, r_at, corr)
    return result
