"""``cfka taalm --biography ... --record NAME``: the produced record of the Biography φ study over PT replicates and
study seeds (``experiments/taalm_biography.py``).

One group of rows per finished replicate (its ``table.json``), each row carrying ``pt`` (``s<k>``, or the PT
folder's name) and ``seed``, so that ``verdicts.paired`` matches the runs of one replicate:

* ``kind = "cpt"``: per run (``replay-all``, ``replay-all + TWPPL w = 1``, ``replay-all + TAALM φ``) and
  evaluation step (250, 400 at the small preset) Continual / Original sFTA, hFTA and EM; ``run = "PT model (step
  0)"``: the PT model's own, from the same evaluation at step 0;
* ``kind = "phi_weights"``: φ's mean weight on the value tokens and on the other tokens (with its 90th percentile)
  of the first 64 CPT training biographies;
* ``kind = "value_share"``: the median share of a biography's weight on its value tokens, under uniform weights
  (the fraction of value tokens) and under φ's;
* ``kind = "metabatch"``: φ's mean weight on the meta-batches' object and other tokens at the first, the selected
  and the last meta-training step.

Rewritten after every finished replicate; ``wall_s`` / ``cpu_s`` sum the replicates' own clocks (``clock.json`` in
each replicate folder; a plain run read from another study's folder costs nothing here).
"""

from __future__ import annotations

import dataclasses
import pathlib

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY

CLOCK = Clock()
"""Wall and CPU time of this process (the record's ``writer_wall_s``)."""
PT_ROW = "PT model (step 0)"
COLUMNS = {"Continual/sFTA": "continual_sfta", "Continual/hFTA": "continual_hfta", "Original/sFTA": "original_sfta",
           "Original/hFTA": "original_hfta", "Continual/EM": "continual_em", "Original/EM": "original_em"}
"""A run's metric → the record's column."""


def stamp(replicate, clock: Clock) -> None:
    """The replicate's wall and CPU seconds (since ``clock``) in its folder's ``clock.json``."""
    jsonio.write_json_atomic(pathlib.Path(replicate.cfg.out) / "clock.json", clock.elapsed(), indent=1)


def _clock(replicate) -> dict:
    path = pathlib.Path(replicate.cfg.out) / "clock.json"
    return jsonio.read_json_object(path, "a replicate clock") if path.exists() else {}


def _metrics(values: dict) -> dict:
    return {col: round(float(values[k]), 4) for k, col in COLUMNS.items() if values.get(k) is not None}


def replicate_rows(pt: str, seed: int, table: dict) -> list[dict]:
    """The rows of one finished replicate (module docstring) from its ``table.json``."""
    key = {"pt": pt, "seed": seed}
    rows = []
    for name, res in table["runs"].items():
        evals = dict(res["evaluations"])
        if evals:  # the last evaluation is the final one; the final record adds what only it measures (EM)
            last = max(evals, key=int)
            evals[last] = {**evals[last], **{k: res[k] for k in COLUMNS if res.get(k) is not None}}
        for step, values in sorted(evals.items(), key=lambda kv: int(kv[0])):
            if int(step) == 0:
                if not any(r["run"] == PT_ROW for r in rows):
                    rows.append({"kind": "cpt", "run": PT_ROW, **key, "step": 0, **_metrics(values)})
                continue
            rows.append({"kind": "cpt", "run": name, **key, "step": int(step), **_metrics(values)})
    w = table["phi_weights"]
    rows += [{"kind": "phi_weights", "tokens": "value", **key, "mean_weight": round(w["w_value_mean"], 4)},
             {"kind": "phi_weights", "tokens": "other", **key, "mean_weight": round(w["w_other_mean"], 4),
              "p90_weight": round(w["w_other_p90"], 4)},
             {"kind": "value_share", "weights": "uniform", **key, "median": round(w["value_fraction_median"], 4)},
             {"kind": "value_share", "weights": "phi", **key, "median": round(w["value_share_median"], 4)}]
    history = {h["step"]: h for h in table.get("metabatch") or ()}
    for step in dict.fromkeys(s for s in (1, table.get("phi_best_step"), max(history, default=None))
                              if s in history):
        h = history[step]
        rows.append({"kind": "metabatch", **key, "step": step, "selected": step == table.get("phi_best_step"),
                     "object_mean_weight": round(h["w_object"], 4), "other_mean_weight": round(h["w_other"], 4)})
    return rows


def _pt_quality(pt_dir: str) -> dict:
    final = RunFolder(pt_dir).final() or {}
    return {k: round(float(final[k]), 4) for k in ("Original/sFTA", "Original/hFTA", "Original/EM") if k in final}


def write(args, replicates) -> pathlib.Path | None:
    """The record ``args.record`` over the finished ``replicates`` (``taalm_biography.Replicate``); None (and
    nothing written) while none has finished."""
    rows, done, seconds, pts = [], [], {}, {}
    for r in replicates:
        table = r.finished()
        if table is None:
            continue
        rows += replicate_rows(r.pt, r.seed, table)
        done.append(r)
        seconds[pathlib.Path(r.cfg.out).name] = _clock(r)
        pts[r.pt] = {"folder": r.cfg.pt_dir, **_pt_quality(r.cfg.pt_dir)}
    if not rows:
        return None
    p, c = BIOGRAPHY[args.preset], done[0].cfg
    regime = {
        "model": f"Biography port (Qwen architecture, word-level tokenizer), preset {args.preset}, d "
                 f"{p.model.hidden}, {p.model.layers} blocks",
        "world": f"Biography {args.preset}: {p.people[0]} PT + {p.people[1]} CPT people" if p.people else args.preset,
        "pt_quality": pts,
        "dose": f"CPT {p.cpt.steps} steps of {p.cpt.batch} × {p.data_config().seq_len} tokens, {args.method}; φ: a "
                f"copy of the PT model + LoRA r {c.phi.lora.rank} and a scalar head, inner θ LoRA r "
                f"{c.theta_lora.rank} ({c.metatrain.meta.inner_form}), {c.metatrain.epochs} epochs of meta-batch "
                f"{c.metatrain.meta_batch} on {c.people} made-up people ({c.probes_per_person} probes each, "
                f"{c.metatrain.val_size} pairs held out), outer AdamW lr {c.metatrain.outer.lr:g}",
        "phi_best_step": {pathlib.Path(r.cfg.out).name: r.finished().get("phi_best_step") for r in done},
    }
    prov = provenance(config=dataclasses.asdict(args), seeds=sorted({r.seed for r in done}),
                      pt_replicates=sorted(pts), clock=CLOCK)
    prov.update(replicate_seconds=seconds, seeds_planned=list(args.seeds), pt_seeds_planned=list(args.pt_seeds),
                plain_dirs=args.plain_dirs, note=(
                    "study seed s moves φ's seeds (head and adapters, inner LoRA, meta-training key, validation "
                    "split, pair order) by 1000·s and is the CPT seed of every CPT run; the made-up people are the "
                    "same for every seed. With plain_dirs the plain run of each replicate is another study's "
                    "finished folder of the same run (checked field by field)."))
    prov["writer_wall_s"], prov["writer_cpu_s"] = prov["wall_s"], prov["cpu_s"]
    if all(s.get("wall_s") is not None for s in seconds.values()):  # the replicates' own times
        prov["wall_s"] = round(sum(s["wall_s"] for s in seconds.values()), 2)
        prov["cpu_s"] = round(sum(s["cpu_s"] for s in seconds.values()), 2)
    return write_record(args.results, args.record, rows=rows, regime=regime, provenance=prov)
