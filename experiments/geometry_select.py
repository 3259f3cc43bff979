"""``cfka geometry select``: top-5 % data selection by CH1 / CH1 + CH2 against LESS, DataInf, HyperINF and random
(spec §4.5 reconstruction, §9).

World: the synthetic multi-class task (``cfka_jax/geometry/synthetic.py``) with ``classes`` classes; the pool is
their train items, the target is ``target_classes`` of them. The base model is fitted on the pretraining classes
(it knows the format, not these rules). Every method scores each pool item by its mean similarity to the target
set (``target_per_class`` test items per target class); the top ``fraction`` of the pool is kept and the base
model is fine-tuned on it (``ft_steps`` AdamW steps, response tokens supervised, one compiled step for every run);
downstream accuracy = response-token accuracy on the target classes' held-out test items (disjoint from the
target set). Methods, at the same budget:

* ``random``; ``ch1`` and ``ch1-ch2-inputln`` (forward-only, ``total_unique`` vocabulary, mean S over the target);
* ``datainf`` (scope ``modeled``, +score, mean over the target items);
* ``hyperinf`` (scope ``modeled``, Schulz inverse of the per-matrix generalised Fisher, target mean gradient);
* ``less``: warm-up on a random ``fraction`` of the pool for ``less_epochs`` epochs, checkpoints after each epoch
  with the Adam moments, features projected to ``less_dim``; ``oracle`` (random items of the target classes) and
  ``base`` (no fine-tuning) as references.

The target rule must be one that the selected 5 % can teach: the ``small`` scale uses ``rule="map"`` on 8 content
tokens (oracle ≈ 0.94 from the base 0.11); ``--rule permute`` is the identification task's rule, which 50 items do
not teach (the oracle stays near the base). Each seed is its own world (``TaskConfig.seed``) and base model, and
varies the random selections, the LESS warm-up subset and projection, and the fine-tuning order. Besides accuracy
and precision each selection records how it splits between the target classes (``balance``: the smallest target
class's share), and each seed the CH1 / CH2 within- vs cross-region diagnosis (:func:`ch2_diagnosis`). Writes
``select.json`` / ``select.md`` / ``select_accuracy.png``::

    cfka geometry select --scale small --out runs/geometry/select
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfka_jax.geometry import attribution, baselines, selection
from cfka_jax.geometry.net import Net, leaf_path
from cfka_jax.geometry.synthetic import (
    ModelConfig,
    TaskConfig,
    fit,
    make_finetuner,
    make_task,
    optim_config,
    response_mask,
)
from cfka_jax.train.optim import lr_schedule
from cfka_jax.jsonio import read_json_object
from cfka_jax import jsonio
from cfka_jax.experiments.geometry_common import markdown_table, save_plot, write_markdown

ROWS_VERSION = 2  # select_rows.json: one entry per seed (its rows, CH2 diagnosis, base accuracy)
RULES = ("map", "permute")
METHODS = ("random", "ch1", "ch1-ch2-inputln", "datainf", "hyperinf", "less", "oracle")


@dataclasses.dataclass(frozen=True)
class SelectScale:
    task: TaskConfig
    model: ModelConfig
    pretrain_steps: int
    target_classes: int
    target_per_class: int
    ft_steps: int
    less_epochs: int
    less_dim: int
    seeds: tuple[int, ...]


SCALES = {
    "smoke": SelectScale(TaskConfig(num_classes=4, train_per_class=10, test_per_class=4, pretrain_classes=2,
                                    pretrain_per_class=8, template_len=3, input_len=3),
                         ModelConfig(hidden=16, layers=2, heads=2, kv_heads=1, intermediate=24), pretrain_steps=2,
                         target_classes=1, target_per_class=2, ft_steps=2, less_epochs=2, less_dim=16, seeds=(0,)),
    # rule "map" on 8 content tokens: a rule that 50 items teach in 200 steps (the oracle reaches ~0.9 from the
    # base 0.125); the "permute" rule of the identification task is not learned from 50 items (oracle at the base)
    "small": SelectScale(TaskConfig(num_classes=20, train_per_class=50, test_per_class=40, content_tokens=8,
                                    rule="map"), ModelConfig(),
                         pretrain_steps=600, target_classes=2, target_per_class=10, ft_steps=200, less_epochs=4,
                         less_dim=1024, seeds=(0, 1, 2)),
}


@dataclasses.dataclass(frozen=True)
class SelectConfig:
    scale: str = "smoke"
    """A key of :data:`SCALES`: the task, the model and the fine-tuning / LESS sizes."""
    arch: str = "qwen"
    fraction: float = 0.05
    """The selected fraction of the training pool, in (0, 1]."""
    lr: float = 3e-3
    """AdamW learning rate of the fine-tuning (and LESS warm-up) on the selection."""
    seeds: tuple[int, ...] = ()
    """Seeds, one result row each, reported as mean ± std (empty: the scale's)."""
    out: str = "runs/geometry/select"
    rule: str = "map"
    """The target rule: ``map`` (the scale's world, a rule 5 % of the pool teaches) or ``permute`` (the
    identification task's rule and content vocabulary, 24 tokens, which 50 items do not teach)."""

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ValueError(f"unknown scale {self.scale!r}; choose from {sorted(SCALES)}")
        if self.rule not in RULES:
            raise ValueError(f"--rule must be one of {RULES}, got {self.rule!r}")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"--fraction must be in (0, 1], got {self.fraction}")

    @property
    def select_scale(self) -> SelectScale:
        s = SCALES[self.scale]
        if self.rule == "map":
            return s
        return dataclasses.replace(s, task=dataclasses.replace(s.task, rule="permute", content_tokens=24))


def _splits(task, s):
    per = s.task.test_per_class
    cls = task.test_labels
    in_target = cls < s.target_classes
    rank = np.arange(len(cls)) % per
    return {"target": np.flatnonzero(in_target & (rank < s.target_per_class)),
            "eval": np.flatnonzero(in_target & (rank >= s.target_per_class)),
            "relevant": np.flatnonzero(task.train_labels < s.target_classes)}


def _forward_scores(params, net, task, target, relevant):
    """The CH1 and CH1 + CH2 scores of the pool (mean S over the target set) and the CH2 diagnosis."""
    vmask = attribution.total_unique_mask([task.train_tokens, task.test_tokens], task.config.vocab_size)
    feat = jax.jit(functools.partial(attribution.sequence_features, net=net, gh="gh_inputln", vocab_mask=vmask))
    ft = feat(params, {"tokens": jnp.asarray(task.test_tokens[target])})
    fp = feat(params, task.batch("train"))
    scores = {p: np.asarray(attribution.gram_scores(ft, fp, preset=p)).mean(0) for p in ("ch1", "ch1-ch2-inputln")}
    return scores, ch2_diagnosis(ft, fp, task.config, relevant)


def _region(f, keep_S):
    k = jnp.asarray(keep_S, f.g.dtype)[None, :, None]
    return f.replace(g=f.g * k, p=f.p * k)


def ch2_diagnosis(ft, fp, task_cfg, relevant, fraction: float = 0.05) -> dict:
    """Where the CH2 (``gh``) score of the pool comes from: the selection precision of CH1 and of CH2 alone, each
    also with only the *within-region* token pairs (prompt target × prompt target + response × response) and only
    the *cross-region* pairs (prompt × response, both ways), and the mean score of target-class vs other items.

    S sums over **every** pair of kept targets (t, t′); CH1's ``⟨g_t, g_t′⟩`` is a product over vocabulary ids
    (near zero unless the two positions predict or mispredict the same ids), CH2's ``⟨Wᵀg_t, Wᵀg_t′⟩`` a product
    in the d-dim readout space, where a template-token force and a content-token force can align.
    """
    s = task_cfg.seq_len
    prompt = np.zeros(s, np.float32)
    prompt[1:s - task_cfg.input_len] = 1.0
    resp = 1.0 - prompt
    resp[0] = 0.0
    pairs = {"within": ((prompt, prompt), (resp, resp)), "cross": ((prompt, resp), (resp, prompt))}
    is_rel = np.isin(np.arange(fp.g.shape[0]), relevant)
    out = {}
    for preset, name in (("ch1", "ch1"), ("gh", "ch2")):
        parts = {k: sum(np.asarray(attribution.gram_scores(_region(ft, a), _region(fp, b), preset=preset)).mean(0)
                        for a, b in v) for k, v in pairs.items()}
        parts["all"] = parts["within"] + parts["cross"]
        for k, v in parts.items():
            top = selection.top_fraction(v, fraction)
            out[f"{name}/{k}"] = {"precision": float(np.mean(is_rel[top])), "mean_target": float(v[is_rel].mean()),
                                  "mean_other": float(v[~is_rel].mean()), "std": float(v.std())}
    return out


@functools.lru_cache(maxsize=8)
def _grad_fn(net):
    return jax.jit(functools.partial(baselines.sequence_grads, net=net, scope="modeled"))


def _grads(params, net, tokens):
    return _grad_fn(net)(params, {"tokens": jnp.asarray(tokens)})


def _influence_scores(params, net, task, target):
    gp, cp = _grads(params, net, task.train_tokens)
    gt, ct = _grads(params, net, task.test_tokens[target])
    datainf = np.asarray(baselines.datainf_scores(gt, ct, gp, cp)).mean(0)
    train, val = selection.loss_grads(gp, cp), selection.loss_grads(gt, ct)
    shapes = {p: tuple(x.shape) for p, x in _leaves(params).items() if p in train}
    hyper = selection.hyperinf_scores(train, {p: v.mean(0) for p, v in val.items()}, selection.matrix_shapes(shapes))
    return {"datainf": datainf, "hyperinf": np.asarray(hyper)}


def _leaves(tree) -> dict:
    return {leaf_path(k): x for k, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _adam_moments(opt_state):
    states = [x for x in jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
              if isinstance(x, optax.ScaleByAdamState)]
    if len(states) != 1:
        raise ValueError(f"expected one Adam state in the optimiser, found {len(states)}")
    return _leaves(states[0].mu), _leaves(states[0].nu)


def _less_scores(base_params, net, task, target, run_warmup, s, fraction, lr, seed):
    rng = np.random.default_rng(seed)
    warm = rng.choice(len(task.train_tokens), size=max(1, int(round(fraction * len(task.train_tokens)))),
                      replace=False)
    points = _less_points(len(warm), s.less_epochs)
    ckpts = []
    run_warmup(base_params, task.train_tokens[warm], response_mask(task.config, len(warm)), seed,
               callback=lambda st, t: ckpts.append(jax.tree.map(jnp.copy, (st.params, *_adam_moments(st.opt_state)))),
               callback_steps=points)
    proj = None
    train_feats, val_feats = [], []
    for params, mu, nu in ckpts:
        gp, cp = _grads(params, net, task.train_tokens)
        gt, ct = _grads(params, net, task.test_tokens[target])
        g = selection.loss_grads(gp, cp)
        keys = sorted(g)
        flat = selection.flatten(g)
        if proj is None:
            proj = selection.projection(jax.random.key(seed), flat.shape[1], s.less_dim)
        m = jnp.concatenate([jnp.ravel(mu[p]) for p in keys])
        v = jnp.concatenate([jnp.ravel(nu[p]) for p in keys])
        train_feats.append(selection.less_features(flat, m, v, proj))
        val_feats.append(selection.flatten(selection.loss_grads(gt, ct)).mean(0) @ proj)
    sched = lr_schedule(optim_config(points[-1], lr))
    lrs = [float(np.mean([sched(t) for t in range(a, b)])) for a, b in zip([0] + points[:-1], points)]
    return np.asarray(selection.less_scores(train_feats, val_feats, lrs))


def _accuracy(logits_fn, params, task, rows):
    tokens = task.test_tokens[rows]
    pred = np.asarray(jnp.argmax(logits_fn(params, jnp.asarray(tokens))[:, :-1], axis=-1))
    mask = response_mask(task.config, len(rows))[:, 1:]
    return float(np.sum((pred == tokens[:, 1:]) * mask) / np.sum(mask))


def _less_points(n_warm: int, epochs: int, batch: int = 16) -> list[int]:
    per_epoch = max(1, n_warm // batch)
    return [per_epoch * (e + 1) for e in range(epochs)]


def _selections(scores: dict, task, s, cfg, seed) -> dict[str, np.ndarray]:
    n = len(task.train_tokens)
    k = int(np.ceil(cfg.fraction * n))
    rng = np.random.default_rng(seed)
    out = {m: selection.top_fraction(sc, cfg.fraction) for m, sc in scores.items()}
    out["random"] = rng.choice(n, size=k, replace=False)
    relevant = np.flatnonzero(task.train_labels < s.target_classes)
    out["oracle"] = rng.choice(relevant, size=min(k, len(relevant)), replace=False)
    return out


def _done_rows(out: pathlib.Path, cfg: SelectConfig) -> list[dict]:
    """Rows of the seeds finished by an earlier run of the same config (``select_rows.json``), else []."""
    path = out / "select_rows.json"
    if not path.exists():
        return []
    data = read_json_object(path, "a selection resume file")
    same = (data.get("config") == jsonio.portable_json(dataclasses.asdict(cfg))
            and data.get("version") == ROWS_VERSION)
    return data["rows"] if same else []


def _seed_rows(cfg: SelectConfig, s: SelectScale, seed: int) -> tuple[list[dict], dict, float]:
    """One seed: its world (``TaskConfig.seed``), base model, scores, selections and fine-tunes."""
    task = make_task(dataclasses.replace(s.task, seed=seed))
    base, _ = fit(dataclasses.replace(s.model, arch=cfg.arch, seed=seed).build(s.task.vocab_size), task,
                  steps=s.pretrain_steps, batch_size=min(32, len(task.pretrain_tokens)), seed=seed)
    net, params = Net.split(base)
    sp = _splits(task, s)
    forward, diagnosis = _forward_scores(params, net, task, sp["target"], sp["relevant"])
    k = int(np.ceil(cfg.fraction * len(task.train_tokens)))
    finetune = make_finetuner(net.graphdef, net.rest, steps=s.ft_steps, batch_size=min(16, k), lr=cfg.lr)
    warmup = make_finetuner(net.graphdef, net.rest, steps=_less_points(k, s.less_epochs)[-1], batch_size=min(16, k),
                            lr=cfg.lr)
    logits = jax.jit(lambda p, t: net.model(p)(t).logits)
    scores = {**forward, **_influence_scores(params, net, task, sp["target"]),
              "less": _less_scores(params, net, task, sp["target"], warmup, s, cfg.fraction, cfg.lr, seed)}
    rows = []
    for method, idx in _selections(scores, task, s, cfg, seed).items():
        state, _ = finetune(params, task.train_tokens[idx], response_mask(task.config, len(idx)), seed)
        per_class = np.bincount(task.train_labels[idx], minlength=s.target_classes)[:s.target_classes]
        rows.append({"seed": seed, "method": method, "accuracy": _accuracy(logits, state.params, task, sp["eval"]),
                     "precision": float(np.mean(np.isin(idx, sp["relevant"]))), "selected": len(idx),
                     "balance": float(per_class.min() / len(idx)), "per_target_class": per_class.tolist()})
    return rows, diagnosis, _accuracy(logits, params, task, sp["eval"])


def run_select(cfg: SelectConfig) -> dict:
    """Every seed (resumed from ``select_rows.json``), then the summary files; returns the summary."""
    s = cfg.select_scale
    out = pathlib.Path(cfg.out)
    done = _done_rows(out, cfg)
    for seed in cfg.seeds or s.seeds:
        if any(d["seed"] == seed for d in done):
            continue
        rows, diagnosis, base_acc = _seed_rows(cfg, s, seed)
        done.append({"seed": seed, "rows": rows, "ch2_diagnosis": diagnosis, "base_accuracy": base_acc})
        jsonio.write_json_atomic(out / "select_rows.json", {"config": dataclasses.asdict(cfg), "version": ROWS_VERSION,
                                                            "rows": done}, portable=True, indent=1)  # resume point
    rows = [r for d in done for r in d["rows"]]
    keys = ("accuracy", "precision", "balance")
    summary = {m: {key: _mean_std([r[key] for r in rows if r["method"] == m]) for key in keys} for m in METHODS}
    diag = {k: {f: _mean_std([d["ch2_diagnosis"][k][f] for d in done]) for f in done[0]["ch2_diagnosis"][k]}
            for k in done[0]["ch2_diagnosis"]}
    base_acc = _mean_std([d["base_accuracy"] for d in done])
    jsonio.write_json_atomic(out / "select.json", {
        "config": dataclasses.asdict(cfg), "scale": dataclasses.asdict(s), "base_accuracy": base_acc,
        "summary": summary, "ch2_diagnosis": diag, "seeds": done}, portable=True, indent=1)
    write_markdown(out, "select", "Top-5 % data selection (synthetic)", _body(cfg, s, summary, diag, base_acc))
    _plot(out, rows)
    return summary


def _mean_std(v) -> tuple[float, float]:
    return float(np.mean(v)), float(np.std(v))


def _body(cfg, s, summary, diag, base_acc) -> str:
    f = lambda ms: f"{ms[0]:.3f} ± {ms[1]:.3f}"  # noqa: E731
    table = [[m, f(v["accuracy"]), f(v["precision"]), f(v["balance"])] for m, v in summary.items()]
    body = markdown_table(["method", "target accuracy after fine-tuning", "selected from the target classes",
                           "smallest target class's share"], table)
    k = int(np.ceil(cfg.fraction * s.task.num_classes * s.task.train_per_class))
    body += (f"\nPool {s.task.num_classes * s.task.train_per_class} items ({s.task.num_classes} classes, rule "
             f"{s.task.rule!r}), target {s.target_classes} classes ({s.target_per_class} scoring items per class, the "
             f"rest of their test items held out for evaluation); top {cfg.fraction:.0%} = {k} items; fine-tune "
             f"{s.ft_steps} AdamW steps (lr {cfg.lr:g}, batch {min(16, k)}); base model accuracy {f(base_acc)}; seeds "
             f"{list(cfg.seeds or s.seeds)}, each its own world and base model (mean ± std, ddof 0).\n")
    body += "\nWhere CH1 / CH2 select from (token pairs of S by region; precision of the top fraction):\n\n"
    body += markdown_table(["score / pairs", "precision", "mean, target classes", "mean, other classes", "std"],
                           [[key, f(v["precision"]), f(v["mean_target"]), f(v["mean_other"]), f(v["std"])]
                            for key, v in diag.items()])
    return body


def _plot(out, rows):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for i, m in enumerate(METHODS):
        ys = [r["accuracy"] for r in rows if r["method"] == m]
        ax.scatter([i] * len(ys), ys, s=14)
        ax.hlines(np.mean(ys), i - 0.3, i + 0.3, color="k")
    ax.set_xticks(range(len(METHODS)), METHODS, fontsize=8)
    ax.set(ylabel="target-class response accuracy", title="top-5 % selection, fine-tuned")
    return save_plot(fig, out, "select_accuracy")
