"""``cfka geometry attribution``: the identification benchmark on the synthetic multi-class task (spec §4.2).

The synthetic base model (fitted on the pretraining classes) scores every (test, train) pair of the benchmark
classes with the forward-only presets ``ch1``, ``ch1-ch2``, ``ch1-ch2-inputln`` (token-Gram form, vocabulary
``total_unique``), the exact per-example gradient product (scope ``all``, sequence log-likelihood) and DataInf
(per-matrix, scope ``modeled``). Per test item: AUC over the train items and Recall@K with K = class size;
mean ± std (ddof 0) over the test items. Writes ``attribution.json`` / ``attribution.md`` and
``attribution_auc.png`` (per-item AUC distributions).

``--seeds 0,1,2`` repeats it with the task, the model and the base model's fit drawn from each seed (into
``<out>/seed<k>``, resumable), and ``--record NAME`` writes the produced record ``token-force/NAME`` as seeds finish:
one row per (seed, method) with the mean AUC and Recall@K over the test items (``geometry_record``)::

    cfka geometry attribution --scale small --arch qwen --seeds 0,1,2 --out runs/geometry/attribution-qwen-s3 \
        --record identification_qwen
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time

import jax
import numpy as np

from cfka_jax.geometry import attribution, baselines
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.synthetic import identification
from cfka_jax.experiments import geometry_record
from cfka_jax import jsonio
from cfka_jax.experiments.geometry_common import (
    base_model,
    markdown_table,
    save_plot,
    scale,
    write_markdown,
)

FORWARD = ("ch1", "ch1-ch2", "ch1-ch2-inputln")


@dataclasses.dataclass(frozen=True)
class AttributionConfig:
    scale: str = "smoke"
    arch: str = "qwen"
    vocab: str = "total_unique"
    out: str = "runs/geometry/attribution"
    seeds: tuple[int, ...] = ()
    record: str | None = None
    results: str = "results"

    def __post_init__(self):
        if self.vocab not in ("full", "total_unique"):
            raise ValueError(f"vocab must be 'full' or 'total_unique', got {self.vocab!r}")
        geometry_record.check_seeds(self.seeds)
        geometry_record.check_record_name(self.record)


def forward_scores(params, net, task, vocab_mask) -> dict[str, tuple[np.ndarray, float]]:
    """{preset: (scores [test, train], seconds)} of the forward-only presets."""
    out = {}
    for gh in ("gh_raw", "gh_inputln"):
        t = time.perf_counter()
        feat = jax.jit(functools.partial(attribution.sequence_features, net=net, gh=gh, vocab_mask=vocab_mask))
        fte, ftr = feat(params, task.batch("test")), feat(params, task.batch("train"))
        base = time.perf_counter() - t
        for preset in FORWARD:
            if (attribution.PRESETS[preset][1] or "gh_inputln") != gh:
                continue
            t = time.perf_counter()
            scores = np.asarray(jax.jit(functools.partial(attribution.gram_scores, preset=preset))(fte, ftr))
            out[preset] = (scores, base + time.perf_counter() - t)
    return out


def gradient_scores(params, net, task) -> dict[str, tuple[np.ndarray, float]]:
    """{'exact': …, 'datainf': …} scores and seconds."""
    out = {}
    for name, scope in (("exact", "all"), ("datainf", "modeled")):
        t = time.perf_counter()
        grads = jax.jit(functools.partial(baselines.sequence_grads, net=net, scope=scope))
        (gte, cte), (gtr, ctr) = grads(params, task.batch("test")), grads(params, task.batch("train"))
        s = baselines.exact_scores(gte, gtr) if name == "exact" else baselines.datainf_scores(gte, cte, gtr, ctr)
        out[name] = (np.asarray(s), time.perf_counter() - t)
    return out


def _plot(out, metrics):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    names = list(metrics)
    ax.boxplot([metrics[n]["auc"] for n in names], tick_labels=names)
    ax.set(ylabel="AUC per test item", title="identification (synthetic 10-class task)")
    ax.tick_params(axis="x", labelsize=8)
    return save_plot(fig, out, "attribution_auc")


def run_attribution(cfg: AttributionConfig) -> list[dict]:
    """Every seed of ``cfg`` (resumed where finished); returns the finished seeds' rows files."""
    s = scale(cfg.scale)
    regime = {"model": f"{cfg.arch} port, synthetic base model (cfka_jax/geometry/synthetic.py): "
                       f"{s.model.layers} blocks, d = {s.model.hidden}, {s.pretrain_steps} AdamW steps on "
                       f"{s.task.pretrain_classes} pretraining classes of the same generator",
              "pt_quality": "the base model's last pretraining loss per seed (row method 'base')",
              "world": f"synthetic DataInf-shaped task: {s.task.num_classes} classes × {s.task.train_per_class} train / "
                       f"{s.task.test_per_class} test items, drawn from the seed",
              "dose": "no training: scores of the base model",
              "vocab": cfg.vocab, "scale": cfg.scale,
              "statistic": "auc / recall: mean over the test items of one seed; *_item_std their std over items "
                           "(ddof 0); the seed spread is across rows"}
    return geometry_record.run_study("attribution", cfg, lambda seed, out: _run_seed(cfg, seed, out), regime)


def _record_rows(cfg, seed, metrics, base_loss, params) -> list[dict]:
    r = geometry_record.rounded
    rows = [{"arch": cfg.arch, "method": "base", "seed": seed, "base_loss": r(base_loss), "params": params}]
    for name, m in metrics.items():
        method = "datainf-neg" if name.startswith("datainf (") else name
        rows.append({"arch": cfg.arch, "method": method, "seed": seed, "auc": r(m["auc_mean"]),
                     "auc_item_std": r(m["auc_std"]), "recall": r(m["recall_mean"]),
                     "recall_item_std": r(m["recall_std"]), "k": m["k"],
                     "seconds": r(m["seconds"], 3) if "seconds" in m else None})
    return rows


def _run_seed(cfg: AttributionConfig, seed: int, out: pathlib.Path) -> list[dict]:
    s = scale(cfg.scale)
    task, model, losses = base_model(s, cfg.arch, seed=seed)
    net, params = Net.split(model)
    vocab_mask = None
    if cfg.vocab == "total_unique":
        vocab_mask = attribution.total_unique_mask([task.train_tokens, task.test_tokens], s.task.vocab_size)
    forward = forward_scores(params, net, task, vocab_mask)
    scores = {**{k: forward[k] for k in FORWARD}, **gradient_scores(params, net, task)}
    metrics = {name: {**identification(sc, task), "seconds": sec} for name, (sc, sec) in scores.items()}
    metrics["datainf (−score)"] = identification(-scores["datainf"][0], task)
    result = {"config": dataclasses.asdict(cfg), "seed": seed, "scale": dataclasses.asdict(s),
              "base_loss": losses[-1], "metrics": metrics}
    jsonio.write_json_atomic(out / "attribution.json", result, portable=True, indent=1)
    rows = [[n, f"{m['auc_mean']:.4f} ± {m['auc_std']:.4f}", f"{m['recall_mean']:.3f} ± {m['recall_std']:.3f}",
             f"{m['seconds']:.2f}" if "seconds" in m else "—"] for n, m in metrics.items()]
    body = markdown_table(["method", "AUC", f"Recall@{metrics['ch1']['k']}", "seconds"], rows)
    body += (f"\n{len(task.test_labels)} test items × {len(task.train_labels)} train items, "
             f"{s.task.num_classes} classes; base model loss {losses[-1]:.3f} after {s.pretrain_steps} steps; "
             f"vocabulary {cfg.vocab}; arch {cfg.arch}; seed {seed}.\n")
    write_markdown(out, "attribution", "Identification benchmark (synthetic task)", body)
    _plot(out, metrics)
    n_params = sum(int(x.size) for x in jax.tree.leaves(params))
    return _record_rows(cfg, seed, metrics, losses[-1], n_params)
