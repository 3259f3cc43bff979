"""``cfka geometry erosion --study graded``: does the pre-finetuning ``seq5`` score rank subjects by how much
they erode, in a world where erosion differs by subject by construction? (spec §6.5)

The default erosion world cannot decide this: its subjects differ by one token, and the collapse of P(A..D) is
global, so a per-subject prediction has nothing to rank. This study uses the graded two-task world of
``cfka_jax/geometry/formats.py`` (``cue_len = S − 1``). The question marker becomes a cue of M = S − 1 tokens.
Subject s's old items share ``k_s = s`` of them with the new task's cue, at nested positions drawn per seed, so the
similarity knob is ``f_s = k_s / M = s / (S − 1)``, from 0 (the old task's own cue) to 1 (the new task's cue). The
new task's subjects are drawn uniformly, so the cue is the only graded similarity.

Per seed:

1. The base model (the erosion study's Qwen2 port) learns the old task: ``base_steps`` AdamW steps, lr 3e-3, all
   targets.
2. **Before any fine-tuning** the §6.5 ``seq5`` terms of every old item are computed from the base model's
   geometry, then averaged per subject. The update side is every response token of ``predict_examples`` new-task
   examples; the observation side is each old prompt up to ANS with the ``ifmass`` objective (force q − π). The
   terms are ``total = ch1 + ch2``, ``ch1``, ``ch2``, ``ch2_no_kembd`` (CH2 without the token-overlap count, which
   the cue raises by k_s by construction), and the final-state baselines ``h_cos`` / ``h_dot``.
3. The new task is learned for ``steps`` AdamW steps at ``--lr`` (batch 32, response tokens supervised, the
   canonical markers). Per subject and every ``eval_every`` steps the study measures P(A..D), the non-IF rate
   (1 − canonical rate) and content accuracy.
4. Erosion per subject: ``dlog_pad = log P(A..D)_end − log P(A..D)_start``; ``dlog_pad_min``, the same at the
   curve's lowest point; and ``non_if`` at the end.

The within-seed Spearman (n = S subjects) is taken of each score term against each erosion target. The knob itself
is ranked against erosion too. That is the premise: the world really grades erosion when
ρ(similarity, dlog_pad) < 0. Directions: the paper's prediction holds when ρ(total, dlog_pad) > 0 (a higher score is
a smaller loss of answer mass) and ρ(total, non_if) < 0.

``--seeds 0,1,2`` runs seed by seed into ``<out>/seed<k>/`` (without ``--seeds``: seed 0 into ``<out>``). Each
finished seed leaves ``erosion_rows.json`` (its record rows; a finished seed of the same config and regime is not
run again) and ``graded_seed.json`` (curves and scores). ``<out>/erosion_graded.json`` and ``.md`` hold the
within-seed Spearman table, with a plot in ``erosion_graded.png``. ``--record NAME`` rewrites the produced record
``token-force/NAME`` after every finished seed (``geometry_record``). It holds one row per (seed, subject),
``row = "subject"``: the knob, the score terms and the erosion targets. It also holds one row per (seed, score,
target), ``row = "spearman"``, and ``target = "similarity"`` gives a score's rank agreement with the knob::

    cfka geometry erosion --scale small --study graded --lr 3e-4 --seeds 0,1,2 \\
        --out runs/geometry/erosion-graded --record erosion_graded
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import jax
import numpy as np
from cfka_jax.experiments import geometry_record
from cfka_jax.experiments.geometry_common import (
    markdown_table,
    save_plot,
    write_markdown,
)
from cfka_jax.experiments.geometry_erosion import (
    SCALES,
    ErosionScale,
    _copy,
    _evaluator,
    _predict,
)
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.geometry import formats
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.stats import spearman
from cfka_jax.geometry.synthetic import fit_arrays

STUDY = "erosion"
"""The ``cfka geometry`` subcommand (its rows files are ``erosion_rows.json``; the command line names it)."""
GRADED_STEPS = {"smoke": (2, 1), "small": (200, 25)}
"""Per scale: new-task steps and the evaluation interval. At small, lr 3e-4, P(A..D) is at its lowest near step
150–200 and recovers partly after, so 200 steps are enough and half the erosion study's 400."""
SCORES = ("similarity", "total", "ch1", "ch2", "ch2_no_kembd", "h_cos", "h_dot")
"""What is ranked against erosion: the knob f_s, then the seq5 terms and the final-state baselines."""
TARGETS = ("dlog_pad", "dlog_pad_min", "non_if")
"""Per-subject erosion: Δlog P(A..D) at the end and at the curve's lowest point, the non-IF rate at the end."""


def graded_scale(name: str) -> ErosionScale:
    """The erosion scale ``name`` with the graded cue (M = S − 1), uniform new-task subjects and fewer steps."""
    s = SCALES[name]
    k = s.world.subjects
    steps, every = GRADED_STEPS[name]
    world = dataclasses.replace(s.world, cue_len=k - 1, subject_weights=(1.0,) * k)
    return dataclasses.replace(s, world=world, steps=steps, eval_every=every)


def _log_ratio(a: float, b: float) -> float:
    return float(math.log(max(a, 1e-30)) - math.log(max(b, 1e-30)))


def subject_erosion(curve: list[dict], subjects: int) -> dict[str, np.ndarray]:
    """Per subject, from the evaluation curve: P(A..D) at the start / end / lowest point, the erosion targets
    (:data:`TARGETS`), the non-IF rate at the start and content accuracy at the end."""
    pad = np.asarray([c["choice_mass_subject"] for c in curve], float)  # [points, S]
    start, end, low = pad[0], pad[-1], pad.min(axis=0)
    return {"pad_start": start, "pad_end": end, "pad_min": low,
            "dlog_pad": np.asarray([_log_ratio(e, s) for e, s in zip(end, start)]),
            "dlog_pad_min": np.asarray([_log_ratio(m, s) for m, s in zip(low, start)]),
            "non_if_start": np.asarray(curve[0]["non_if_subject"], float),
            "non_if": np.asarray(curve[-1]["non_if_subject"], float),
            "content_end": np.asarray(curve[-1]["content_subject"], float)}


def record_rows(seed: int, similarity, shared, scores: dict, erosion: dict, *, lr: float, steps: int) -> list[dict]:
    """The record rows of one finished seed: one per subject (``row = "subject"``), then one per (score, target)
    with the within-seed Spearman over the subjects (``row = "spearman"``; ``target = "similarity"``: a score
    against the knob). A Spearman that is undefined (a constant side) is null."""
    r, sig = geometry_record.rounded, geometry_record.significant
    n = len(similarity)
    values = {"similarity": np.asarray(similarity, float), **{k: np.asarray(v, float) for k, v in scores.items()}}
    rows = []
    for s in range(n):
        row = {"row": "subject", "seed": seed, "subject": s, "shared": int(shared[s]),
               "similarity": r(similarity[s]), "lr": lr, "steps": steps}
        row.update({k: sig(values[k][s]) for k in SCORES[1:]})
        row.update({k: r(erosion[k][s]) for k in ("pad_start", "pad_end", "pad_min", "dlog_pad", "dlog_pad_min",
                                                   "non_if_start", "non_if", "content_end")})
        rows.append(row)
    for score in SCORES:
        for target in (*TARGETS, *(("similarity",) if score != "similarity" else ())):
            y = values["similarity"] if target == "similarity" else erosion[target]
            rows.append({"row": "spearman", "seed": seed, "score": score, "target": target, "n": n,
                         "spearman": r(spearman(values[score], y))})
    return rows


def run_seed(cfg, s: ErosionScale, seed: int, out: pathlib.Path) -> list[dict]:
    """One seed: base model, scores before fine-tuning, the new task's fine-tune, per-subject erosion; writes
    ``graded_seed.json`` into ``out`` and returns the record rows."""
    world = formats.make_world(dataclasses.replace(s.world, seed=seed))
    wc = world.config
    model = dataclasses.replace(s.model, arch=cfg.arch, seed=seed).build(wc.vocab_size)
    base, base_losses = fit_arrays(model, world.old, np.ones(world.old.shape, np.float32), steps=s.base_steps,
                                   lr=3e-3, seed=seed)
    net, base_params = Net.split(base)
    evaluate = _evaluator(net, world)
    scores = _predict(base_params, net, world, min(s.predict_examples, len(world.new_train)),
                      markers=("canonical",))["canonical"]
    points = sorted({0, *range(s.eval_every, s.steps + 1, s.eval_every), s.steps})
    curve = []
    fit_arrays(_copy(base), world.new_train, formats.response_mask(world.new_train), steps=s.steps, lr=cfg.lr,
               seed=seed, callback_steps=points,
               callback=lambda p, t: curve.append({"step": t, **evaluate(p, world.new_test)}))
    for c in curve:
        c.pop("_nll_items")
    erosion = subject_erosion(curve, wc.subjects)
    jsonio.write_json_atomic(out / "graded_seed.json", {
        "seed": seed, "base_loss": base_losses[-1], "cue_order": world.cue_order.tolist(),
        "shared": wc.shared.tolist(), "similarity": wc.similarity.tolist(), "scores": scores,
        "erosion": {k: v.tolist() for k, v in erosion.items()}, "curve": curve}, portable=True, indent=1)
    return record_rows(seed, wc.similarity, wc.shared, scores, erosion, lr=cfg.lr, steps=s.steps)


def _param_count(cfg, s: ErosionScale) -> int:
    model = dataclasses.replace(s.model, arch=cfg.arch, seed=0).build(s.world.vocab_size)
    return int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))))


def regime(cfg, s: ErosionScale) -> dict:
    w = s.world
    return {"model": f"{cfg.arch} port, d = {s.model.hidden}, {s.model.layers} blocks",
            "params": f"{_param_count(cfg, s):,}",
            "pt_quality": f"old task after {s.base_steps} AdamW steps (lr 3e-3, all targets): rows' pad_start "
                          "(P(A..D) before fine-tuning)",
            "world": f"graded formats world (cfka_jax/geometry/formats.py, cue_len {w.cue_len}), drawn from the "
                     f"seed: {w.subjects} subjects × {w.entities_per_subject} old items, subject s shares "
                     f"k_s = {list(map(int, w.shared))} of the {w.cue_len} cue tokens with the new task (nested), "
                     f"similarity f_s = k_s / {w.cue_len}; new task {w.new_train} items, subjects drawn uniformly",
            "dose": f"seq5 of every response token of {s.predict_examples} new-task examples against each old "
                    f"prompt (ifmass), before fine-tuning; then {s.steps} AdamW steps (batch 32, lr {cfg.lr:g}), "
                    "response tokens supervised, canonical markers; erosion per subject at the end",
            "scale": cfg.scale}


def summarize(done: list[dict]) -> dict:
    """The within-seed Spearman of every (score, target) per seed, and their mean over the seeds."""
    table = {}
    for d in done:
        for row in d["rows"]:
            if row["row"] == "spearman":
                table.setdefault(f"{row['score']}/{row['target']}", {})[str(d["seed"])] = row["spearman"]
    mean = {k: (float(np.mean(list(v.values()))) if all(x is not None for x in v.values()) else None)
            for k, v in table.items()}
    return {"seeds": [d["seed"] for d in done], "spearman": table, "spearman_mean": mean}


def _body(cfg, s: ErosionScale, summary: dict) -> str:
    seeds = [str(k) for k in summary["seeds"]]
    fmt = lambda v: "—" if v is None else f"{v:+.2f}"
    rows = [[key, *(fmt(v.get(k)) for k in seeds), fmt(summary["spearman_mean"][key])]
            for key, v in summary["spearman"].items()]
    body = ("Within-seed Spearman over the subjects (n = "
            f"{s.world.subjects}) of each score before fine-tuning against each erosion target after it. The "
            "premise is `similarity/dlog_pad` < 0; the paper's direction is `total/dlog_pad` > 0 and "
            "`total/non_if` < 0.\n\n")
    body += markdown_table(["score / target", *(f"seed {k}" for k in seeds), "mean"], rows)
    body += (f"\nWorld: cue_len {s.world.cue_len}, k_s = {list(map(int, s.world.shared))}; base {s.base_steps} "
             f"steps (lr 3e-3); new task {s.steps} steps, lr {cfg.lr:g}, batch 32; arch {cfg.arch}; model "
             f"{dataclasses.asdict(s.model)}.\n")
    return body


def _plot(out: pathlib.Path, done: list[dict]) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for d in done:
        sub = [r for r in d["rows"] if r["row"] == "subject"]
        y = [r["dlog_pad"] for r in sub]
        axes[0].plot([r["similarity"] for r in sub], y, "o-", ms=4, label=f"seed {d['seed']}")
        axes[1].scatter([r["total"] for r in sub], y, s=16, label=f"seed {d['seed']}")
    axes[0].set(xlabel="similarity f (share of the new task's cue)", ylabel="Δlog P(A..D) after fine-tuning")
    axes[1].set(xlabel="seq5 total before fine-tuning (mean per subject)", ylabel="Δlog P(A..D)")
    axes[0].legend(fontsize=8)
    save_plot(fig, out, "erosion_graded")


def run_graded(cfg) -> dict:
    """Runs the seeds (resuming finished ones), rewrites the record after each, then the summary files."""
    s = graded_scale(cfg.scale)
    done = geometry_record.run_study(STUDY, cfg, lambda seed, out: run_seed(cfg, s, seed, out), regime(cfg, s))
    summary = summarize(done)
    out = pathlib.Path(cfg.out)
    jsonio.write_json_atomic(out / "erosion_graded.json", {"config": dataclasses.asdict(cfg),
                                                           "scale": dataclasses.asdict(s), **summary},
                             portable=True, indent=1)
    write_markdown(out, "erosion_graded", "Pre-finetuning prediction of erosion, graded-similarity world",
                   _body(cfg, s, summary))
    _plot(out, done)
    return summary
