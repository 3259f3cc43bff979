"""``cfka taalm --record NAME``: the produced records of the synthetic TAALM study over several seeds.

Each study seed N runs in its own folder (``cfka taalm --preset small --seed N --out runs/taalm-small-sN``); the
records merge the finished tables of the seed folders named by ``--record-seeds`` and ``--record-dirs``:

* ``results/taalm/lama_ckl_<NAME>.json`` — one row per (method, seed): ``top_acc``, ``epoch`` (the first epoch
  reaching Top Acc, 0 = before training), ``nf_acc``, ``total`` (Total Knowledge), plus a ``θ0 (before training)``
  row per seed; rewritten when a folder's LAMA-CKL table is complete;
* ``results/taalm/twiki_<NAME>.json`` — one row per (method, seed, period 1.., probes changed/unchanged): the
  object NLL ``before`` and ``after`` that period's training; rewritten when a folder's TemporalWiki table is
  complete;
* ``results/taalm/phi_weights_<NAME>.json`` — per seed, φ's weights on the 45 TO-LEARN evidence paragraphs
  (never seen in meta-training): ``kind = "evidence"`` rows (mean weight on the object tokens, on the other
  targets with their 90th percentile), an ``object_share`` row (per document Σ_object w / Σ w: minimum, median,
  documents whose Σ w is below 1e-5) and ``metabatch`` rows (the meta-batches' mean weight on object and other
  tokens at meta-steps 1, 40, 80, 120 and the selected one, from ``metatrain.json``); rewritten with the LAMA-CKL
  record, read from the seed folders without writing in them (``stages.read_phi``).

A seed folder enters a record once it holds every method of its run's list (a folder mid-stage is left out, so
every method of a record has the same seeds); its ``config.json`` must name its seed and the preset. One θ0 per
seed (``pt_replicates``: ``θ0-s0``, ``θ0-s1``, ...).
"""

from __future__ import annotations

import dataclasses
import pathlib

from cfka_jax.experiments.taalm import preset as preset_config
from cfka_jax.experiments import taalm_stages as stages
from cfka_jax.experiments.taalm_stages import slug

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record

THETA0 = "θ0 (before training)"
"""The LAMA-CKL row of θ0's own accuracies (every method starts there)."""
CLOCK = Clock()
"""Wall and CPU time of this process, written to its seed folder's ``clock.json`` at each finished stage
(:func:`stamp`); a record's ``wall_s`` / ``cpu_s`` sum its seed folders' (per seed in ``seed_wall_s``)."""

_REGIME = {
    "model": "Qwen2-architecture port, 3 layers, d 64, word-level tokenizer of the world; θ = θ0 + LoRA r 16, α 4, "
             "dropout 0.1",
    "params": "0.27 M (θ0)",
    "pt_quality": "θ0 pre-trained 40 epochs (1,280 steps of 16 × 128 tokens) per seed; selection per seed in "
                  "'selection' (§5.5 descriptive accuracy: TO-LEARN facts θ0 scores 0 on, NOT-TO-FORGET it "
                  "scores 1 on)",
    "phi": "φ = θ0 copy + LoRA r 16 + scalar head (bias 4.0), adamw2_ref inner step (lr 2e-4), 16 epochs of "
           "meta-batch 8 = 176 outer steps, outer AdamW lr 2e-2; the checkpoint of each seed in 'phi_best_step'",
}
LAMA_REGIME = {
    **_REGIME,
    "world": "synthetic LAMA-CKL from a Biography world of 300 people (the same world for every seed): 45 "
             "TO-LEARN employer changes, 50 NOT-TO-FORGET invariant facts, TA pairs (16 held out), no person shared",
    "dose": "30 epochs of batch 16 (3 updates per epoch), AdamW lr 3e-3 wd 0.01, no schedule",
    "lr_selection": "lr 3e-3 chosen before the table on Finetune and Oracle only (15-epoch runs at 1e-3 / 3e-3 / "
                    "1e-2, seed 0); the same lr for every method and seed",
    "n_to_learn": 45,
    "n_not_to_forget": 50,
}
TWIKI_REGIME = {
    **_REGIME,
    "world": "synthetic TemporalWiki, same world and tokenizer: 3 periods of 20 employer changes (one evidence "
             "paragraph each) and 50 unchanged facts per period",
    "dose": "1 epoch per period, batch 16 (2 updates), AdamW lr 3e-3, fresh optimiser per period, θ carried over",
    "lr_selection": "lr 3e-3 from the LAMA-CKL choice (Finetune and Oracle only)",
}
NOTE = ("study seed N (cfka taalm --seed N) moves every seed of the study (θ0 pre-training and LoRA, epoch order, "
        "dropout and K-Adapter init, φ's init, meta-training key, validation split and pair order) by 1000·N from "
        "the preset's (N = 0: the preset's defaults); the world is the same for every seed. One θ0 per seed. "
        "'RHO-1' is the faithful rule (top-k by excess loss, θ0 reference); 'K-Adapter' has the reference's "
        "dropout 0.9.")


@dataclasses.dataclass(frozen=True)
class SeedFolder:
    """One seed's run folder and what it holds."""

    seed: int
    path: pathlib.Path
    config: dict

    def results(self, stage: str, methods) -> dict | None:
        """method → its result file (``lama``/``twiki``), or ``None`` while any method's file is missing."""
        files = {m: self.path / stage / f"{slug(m)}.json" for m in methods}
        if not methods or not all(f.exists() for f in files.values()):
            return None
        return {m: jsonio.read_json(f) for m, f in files.items()}

    def clock(self) -> dict:
        """Wall and CPU seconds of the process that finished the folder's last stage (``{}`` before any)."""
        path = self.path / "clock.json"
        return jsonio.read_json_object(path, "a TAALM run clock") if path.exists() else {}

    def extra(self) -> dict:
        """The seed's selection counts and φ checkpoint (regime details), where finished."""
        out = {}
        stats, meta = self.path / "lama_ckl" / "stats.json", self.path / "metatrain.json"
        if stats.exists():
            out["selection"] = jsonio.read_json_object(stats, "LAMA-CKL selection stats")
        if meta.exists():
            m = jsonio.read_json_object(meta, "a φ meta-training record")
            out["phi_best_step"], out["phi_wall_s"] = m.get("best_step"), m.get("wall_s")
        return out


def stamp(out: str | pathlib.Path, stage: str) -> None:
    """Record this process's wall and CPU seconds in ``out/clock.json`` when ``stage`` finishes."""
    jsonio.write_json_atomic(pathlib.Path(out) / "clock.json", {"stage": stage, **CLOCK.elapsed()}, indent=1)


def seed_folders(template: str, seeds, preset: str) -> list[SeedFolder]:
    """The existing folders of ``seeds`` (``template`` with ``{preset}`` and ``{seed}``), each checked against
    its ``config.json``.

    Raises:
      ValueError: a folder made with another seed or preset (names the option and the file).
    """
    out = []
    for seed in seeds:
        path = pathlib.Path(template.format(preset=preset, seed=seed))
        cfg_path = path / "config.json"
        if not cfg_path.exists():
            continue
        cfg = jsonio.read_json_object(cfg_path, "a TAALM run config")
        if cfg.get("seed", 0) != seed or cfg.get("preset") != preset:
            raise ValueError(f"--record-dirs: {cfg_path} is seed {cfg.get('seed', 0)}, preset {cfg.get('preset')!r};"
                             f" expected seed {seed}, preset {preset!r}")
        out.append(SeedFolder(seed, path, cfg))
    return out


def lama_rows(seed: int, results: dict, config: dict | None = None) -> list[dict]:
    """The LAMA-CKL rows of one seed: one per method (with the lr it ran at: the result file's, else the folder
    config's ``ckl.lr``), then θ0's."""
    rows = []
    for name, res in results.items():
        s = res["summary"]
        lr = res.get("lr", ((config or {}).get("ckl") or {}).get("lr"))
        rows.append({"method": name, "seed": seed, "top_acc": round(float(s["top_acc"]), 4), "epoch": int(s["epoch"]),
                     "nf_acc": round(float(s["nf_acc"]), 4), "total": round(float(s["total_knowledge"]), 4),
                     **({"lr": float(lr)} if lr is not None else {})})
    first = next(iter(results.values()))["history"][0]
    rows.append({"method": THETA0, "seed": seed, "top_acc": round(float(first["to_learn/acc"]), 4), "epoch": 0,
                 "nf_acc": round(float(first["not_to_forget/acc"]), 4), "total": None})
    return rows


def twiki_rows(seed: int, results: dict, config: dict | None = None) -> list[dict]:
    """The TemporalWiki rows of one seed: per method, probes (changed first) and period."""
    rows = []
    for name, periods in results.items():
        for probes in ("changed", "unchanged"):
            for k, rec in enumerate(periods, start=1):
                rows.append({"method": name, "seed": seed, "period": k, "probes": probes,
                             "before": round(float(rec["before"][f"{probes}/nll"]), 3),
                             "after": round(float(rec["after"][f"{probes}/nll"]), 3)})
    return rows


STAGES = {"lama": ("methods", "lama_ckl", lama_rows, LAMA_REGIME),
          "twiki": ("twiki_methods", "twiki", twiki_rows, TWIKI_REGIME)}
"""stage → (its methods field, record prefix, row builder, regime)."""


def write_stage_record(stage: str, *, name: str, results: str, template: str, seeds, preset: str,
                       commands: str | None = None) -> pathlib.Path | None:
    """The produced record ``taalm/<prefix>_<name>`` of ``stage`` over the finished seed folders (module
    docstring); ``None`` (and nothing written) while no folder has finished the stage."""
    field, prefix, build, regime = STAGES[stage]
    rows, done, extra, configs, clocks = [], [], {}, {}, {}
    for folder in seed_folders(template, seeds, preset):
        res = folder.results(stage, folder.config.get(field) or ())
        if res is None:
            continue
        rows += build(folder.seed, res, folder.config)
        done.append(folder.seed)
        extra[folder.seed] = folder.extra()
        configs[f"s{folder.seed}"] = folder.config
        clocks[f"s{folder.seed}"] = folder.clock()
    if not rows:
        return None
    tail = f"--record {name} --record-seeds {','.join(map(str, seeds))} --no-progress"
    commands = commands or "; ".join(f"cfka taalm --preset {preset} --seed {s} --out "
                                     f"{template.format(preset=preset, seed=s)} {tail}" for s in done)
    lrs = {(c.get(part) or {}).get("lr") for c in configs.values() for part in ("ckl", "twiki")} | {
        v for c in configs.values() for _, v in (c.get("method_lr") or ())}
    base = preset_config(preset)
    if lrs != {base.ckl.lr, base.twiki.lr} or any(c.get("method_epochs") for c in configs.values()):  # by flags
        regime = {**regime, "lr_selection": "lr and epochs set on the command line (--lr, --method-lr, --epochs, "
                                            "--method-epochs): each row's 'lr', the configs in provenance"}
    regime = {**regime, "seeds": done,
              "selection": {f"s{s}": e.get("selection") for s, e in extra.items()},
              "phi_best_step": {f"s{s}": e.get("phi_best_step") for s, e in extra.items()}}
    prov = provenance(config=configs, seeds=done, pt_replicates=[f"θ0-s{s}" for s in done], clock=CLOCK,
                      command=commands)
    prov["note"] = NOTE
    prov["seed_wall_s"] = {k: c.get("wall_s") for k, c in clocks.items()}
    prov["seed_cpu_s"] = {k: c.get("cpu_s") for k, c in clocks.items()}
    if all(c.get("wall_s") is not None for c in clocks.values()):  # the seeds' own times, not the writer's
        prov["wall_s"] = round(sum(c["wall_s"] for c in clocks.values()), 2)
        prov["cpu_s"] = round(sum(c["cpu_s"] for c in clocks.values()), 2)
    return write_record(results, f"taalm/{prefix}_{name}", rows=rows, regime=regime, provenance=prov)


PHI_REGIME = {
    **_REGIME,
    "world": LAMA_REGIME["world"],
    "measure": "φ's weights σ(head) on the TO-LEARN evidence paragraphs (never in meta-training), BOS excluded; "
               "object share = a document's weight on its object tokens over its total weight",
}
METABATCH_STEPS = (1, 40, 80, 120)
"""The meta-training steps whose meta-batch weights the φ record keeps (beside the selected step)."""


def phi_rows(folder: SeedFolder) -> list[dict]:
    """One seed's φ rows (module docstring)."""
    tok, sets, handle = stages.read_phi(folder.path)
    st = stages.weight_stats(handle, tok, sets.to_learn)
    key = {"world": "lama_ckl_small" if folder.config.get("preset") == "small" else folder.config.get("preset"),
           "pt": f"θ0-s{folder.seed}", "seed": folder.seed}
    rows = [{**key, "kind": "evidence", "tokens": "object", "mean_weight": st["w_object_mean"],
             "tokens_n": st["object_tokens"]},
            {**key, "kind": "evidence", "tokens": "other", "mean_weight": st["w_other_mean"],
             "p90_weight": st["w_other_p90"]},
            {**key, "kind": "object_share", "min": round(st["object_share_min"], 5),
             "median": round(st["object_share_median"], 5), "docs": st["docs"],
             "docs_total_below_1e-5": st["docs_total_below_1e-5"]}]
    meta = jsonio.read_json_object(folder.path / "metatrain.json", "a φ meta-training record")
    best = meta.get("best_step")
    for h in meta.get("history") or ():
        if h["step"] in METABATCH_STEPS or h["step"] == best:
            rows.append({**key, "kind": "metabatch", "step": h["step"], "selected": h["step"] == best,
                         "object_mean_weight": round(h["w_object"], 4), "other_mean_weight": round(h["w_other"], 4)})
    return [{k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in r.items()} for r in rows]


def write_phi_record(*, name: str, results: str, template: str, seeds, preset: str) -> pathlib.Path | None:
    """The produced record ``taalm/phi_weights_<name>`` over the seed folders whose φ is finished; ``None`` (and
    nothing written) while none is."""
    clock = Clock()
    folders = [f for f in seed_folders(template, seeds, preset) if (f.path / "phi" / "phi.json").exists()
               and (f.path / "lama_ckl" / "stats.json").exists()]
    if not folders:
        return None
    rows = [r for f in folders for r in phi_rows(f)]
    done = [f.seed for f in folders]
    commands = "; ".join(f"cfka taalm --preset {preset} --seed {s} --out {template.format(preset=preset, seed=s)}"
                         for s in done)
    prov = provenance(config={f"s{f.seed}": f.config for f in folders}, seeds=done,
                      pt_replicates=[f"θ0-s{s}" for s in done], clock=clock,
                      command=f"{commands}; then cfka taalm --preset {preset} --record {name} --phi-record-only "
                              f"--record-seeds {','.join(map(str, seeds))}")
    prov["note"] = (NOTE + " The measure is read from each seed's finished φ (phi/, tokenizer/, lama_ckl/, "
                    "metatrain.json); wall_s / cpu_s are the measurement's, phi_wall_s the meta-training's.")
    prov["phi_wall_s"] = {f"s{f.seed}": f.extra().get("phi_wall_s") for f in folders}
    regime = {**PHI_REGIME, "seeds": done, "phi_best_step": {f"s{f.seed}": f.extra().get("phi_best_step")
                                                             for f in folders}}
    return write_record(results, f"taalm/phi_weights_{name}", rows=rows, regime=regime, provenance=prov)
