"""``cfka geometry lds``: the linear datamodeling score (LDS) of the attribution methods against retrained subsets.

Does a method's attribution score predict what training on a subset of the data does to a test item's loss? The
LDS (Park et al. 2023, TRAK; ``cfka_jax/geometry/lds.py``) answers it against a counterfactual ground truth:

* **World** (per seed): the synthetic multi-class task (``geometry/synthetic.py``) with the teachable ``map``
  rule, its benchmark classes' train items the pool (Z items), their test items the test set (Q); the base model
  is fitted on the pretraining classes (it knows the format, not these classes).
* **Scores** at the base model, ``τ(q, i)`` for every (test, train) pair, each a similarity (positive = i helps
  q): ``ch1``, ``ch1-ch2`` (gh_raw) and ``ch1-ch2-inputln`` (forward-only, ``total_unique`` vocabulary);
  ``exact`` (the first-order gradient product over every parameter, the reference); ``datainf`` (+score, scope
  ``modeled``); ``hyperinf`` (scope ``modeled``, one test item per target); ``less`` (warm-up on a random
  ``less_warmup`` fraction of the pool, checkpoints after each epoch with the Adam moments, projected to
  ``less_dim``, one test item per target); ``random`` (standard normal scores: the floor, LDS ≈ 0).
* **Cost** of each method: wall and CPU seconds of computing its ``[Q, Z]`` scores from the base parameters
  (features or gradients included; LESS's warm-up included), measured on the second of two calls (the first
  compiles).
* **Ground truth**: U random subsets keeping ``fraction`` of the pool, each retrained from the base model with
  the same full-batch AdamW steps on its masked loss (every token a target, as the scores' kept targets), all U
  in one compiled ensemble program (``lds.make_subset_trainer``); ``L_u(q)`` the mean NLL of test item q.
* **LDS** per method: Spearman over the subsets of ``Σ_{i∈S_u} τ(q, i)`` against ``−L_u(q)``, averaged over the
  test items; one row per (seed, method) in the record, the seed range in the docs.

The ensemble runs its members with ``lax.map`` on CPU (``--mode map``; ``vmap`` elsewhere): the same program
either way, but XLA:CPU's batched matmuls made the ``vmap`` step ~20× slower here (1.8 s vs 0.09 s per step at
32 members × 100 items). Writes ``lds.json`` / ``lds.md`` per seed, ``lds_rows.json`` (resume), and with
``--record NAME`` the record ``results/token-force/NAME.json`` after every seed::

    cfka geometry lds --scale small --seeds 0,1,2 --out runs/geometry/lds-s3 --record lds_small
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from cfka_jax.experiments import geometry_record
from cfka_jax.experiments.geometry_common import markdown_table, write_markdown
from cfka_jax.experiments.geometry_select import _adam_moments

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock
from cfka_jax.geometry import attribution, baselines, lds, selection
from cfka_jax.geometry.net import Net, leaf_path
from cfka_jax.geometry.synthetic import (
    ModelConfig,
    TaskConfig,
    fit,
    make_finetuner,
    make_task,
    optim_config,
)
from cfka_jax.train.optim import lr_schedule

METHODS = ("random", "ch1", "ch1-ch2", "ch1-ch2-inputln", "exact", "datainf", "hyperinf", "less")
FORWARD = ("ch1", "ch1-ch2", "ch1-ch2-inputln")
MODES = ("map", "vmap")


@dataclasses.dataclass(frozen=True)
class LdsScale:
    """Sizes of one scale: the world, the model, the base fit, the retraining and LESS's warm-up."""

    task: TaskConfig
    model: ModelConfig
    pretrain_steps: int
    subsets: int
    ft_steps: int
    less_warmup: float
    less_epochs: int
    less_dim: int


SCALES = {
    "smoke": LdsScale(TaskConfig(num_classes=3, train_per_class=4, test_per_class=2, pretrain_classes=2,
                                 pretrain_per_class=8, template_len=3, input_len=3, content_tokens=8, rule="map"),
                      ModelConfig(hidden=16, layers=2, heads=2, kv_heads=1, intermediate=24), pretrain_steps=3,
                      subsets=4, ft_steps=2, less_warmup=0.5, less_epochs=2, less_dim=16),
    # 10 classes × 20 train / 4 test items of the select study's teachable world; 48 half-pool subsets, 100
    # full-batch steps each: 8.6 min for 3 seeds on 2 CPU cores at load ~5 (64 subsets: 19 min at load 6-9)
    "small": LdsScale(TaskConfig(num_classes=10, train_per_class=20, test_per_class=4, content_tokens=8, rule="map"),
                      ModelConfig(), pretrain_steps=600, subsets=48, ft_steps=100, less_warmup=0.25, less_epochs=4,
                      less_dim=1024),
}


@dataclasses.dataclass(frozen=True)
class LdsConfig:
    scale: str = "smoke"
    """A key of :data:`SCALES`: the world, the model, the subsets and the retraining steps."""
    arch: str = "qwen"
    fraction: float = 0.5
    """The fraction of the training pool each retrained subset keeps, in (0, 1)."""
    subsets: int | None = None
    """The number of retrained subsets U (>= 3; default: the scale's)."""
    lr: float = 3e-3
    """AdamW learning rate of the retraining (and of LESS's warm-up)."""
    mode: str = "map"
    """How the one ensemble program runs its members: ``map`` (in turn, plain kernels; fastest on CPU) or
    ``vmap`` (batched kernels; the form for accelerators)."""
    out: str = "runs/geometry/lds"
    seeds: tuple[int, ...] = ()
    record: str | None = None
    results: str = "results"

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ValueError(f"unknown scale {self.scale!r}; choose from {sorted(SCALES)}")
        if not 0.0 < self.fraction < 1.0:
            raise ValueError(f"--fraction must be in (0, 1), got {self.fraction}")
        if self.subsets is not None and self.subsets < 3:
            raise ValueError(f"--subsets must be at least 3 (a rank correlation over 2 subsets is ±1), got "
                             f"{self.subsets}")
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {MODES}, got {self.mode!r}")
        geometry_record.check_seeds(self.seeds)
        geometry_record.check_record_name(self.record)

    @property
    def num_subsets(self) -> int:
        return self.subsets or SCALES[self.scale].subsets


def timed(fn):
    """``(fn(), wall_s, cpu_s)`` of a second call of ``fn`` (the first compiles and is discarded); the result is
    blocked on before the clock stops. CPU seconds are this process's (every thread of XLA's pool)."""
    jax.block_until_ready(fn())
    wall0, cpu0 = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(fn())
    return np.asarray(out, np.float32), time.perf_counter() - wall0, time.process_time() - cpu0


def _batch(tokens) -> dict:
    return {"tokens": jnp.asarray(tokens)}


def _forward(params, net, task, vmask, preset):
    gh = attribution.PRESETS[preset][1]  # None for ch1: no GH streams are extracted for it
    feat = jax.jit(functools.partial(attribution.sequence_features, net=net, gh=gh, vocab_mask=vmask))
    score = jax.jit(functools.partial(attribution.gram_scores, preset=preset))
    return lambda: score(feat(params, _batch(task.test_tokens)), feat(params, _batch(task.train_tokens)))


@functools.lru_cache(maxsize=8)
def _grad_fn(net, scope):
    return jax.jit(functools.partial(baselines.sequence_grads, net=net, scope=scope))


def _gradient(params, net, task, method):
    def run():
        scope = "all" if method == "exact" else "modeled"
        gt, ct = _grad_fn(net, scope)(params, _batch(task.test_tokens))
        gz, cz = _grad_fn(net, scope)(params, _batch(task.train_tokens))
        if method == "exact":
            return baselines.exact_scores(gt, gz)
        if method == "datainf":
            return baselines.datainf_scores(gt, ct, gz, cz)
        train, val = selection.loss_grads(gz, cz), selection.loss_grads(gt, ct)
        leaves = {leaf_path(k): x for k, x in jax.tree_util.tree_flatten_with_path(params)[0]}
        shapes = selection.matrix_shapes({p: tuple(x.shape) for p, x in leaves.items() if p in train})
        return lds.hyperinf_per_test(train, val, shapes)
    return run


def _less(params, net, task, s: LdsScale, lr: float, seed: int):
    """LESS with one target per test item (the select study's warm-up and features, ``lds.less_per_test``)."""
    z = len(task.train_tokens)
    warm = np.random.default_rng(seed).choice(z, size=max(1, round(s.less_warmup * z)), replace=False)
    batch = min(16, len(warm))
    per_epoch = max(1, len(warm) // batch)
    points = [per_epoch * (e + 1) for e in range(s.less_epochs)]
    warmup = make_finetuner(net.graphdef, net.rest, steps=points[-1], batch_size=batch, lr=lr)
    sched = lr_schedule(optim_config(points[-1], lr))
    lrs = [float(np.mean([sched(t) for t in range(a, b)])) for a, b in zip([0] + points[:-1], points)]
    grads = _grad_fn(net, "modeled")

    def run():
        ckpts = []
        warmup(params, task.train_tokens[warm], np.ones(task.train_tokens[warm].shape, np.float32), seed,
               callback=lambda st, t: ckpts.append(jax.tree.map(jnp.copy, (st.params, *_adam_moments(st.opt_state)))),
               callback_steps=points)
        proj, train_feats, val_feats = None, [], []
        for p, mu, nu in ckpts:
            g = selection.loss_grads(*grads(p, _batch(task.train_tokens)))
            v = selection.flatten(selection.loss_grads(*grads(p, _batch(task.test_tokens))))
            keys, flat = sorted(g), selection.flatten(g)
            if proj is None:
                proj = selection.projection(jax.random.key(seed), flat.shape[1], s.less_dim)
            m = jnp.concatenate([jnp.ravel(mu[k]) for k in keys])
            w = jnp.concatenate([jnp.ravel(nu[k]) for k in keys])
            train_feats.append(selection.less_features(flat, m, w, proj))
            with jax.default_matmul_precision("highest"):
                val_feats.append(v @ proj)
        return lds.less_per_test(train_feats, val_feats, lrs)
    return run


def method_scores(params, net, task, s: LdsScale, lr: float, seed: int) -> dict[str, tuple[np.ndarray, float, float]]:
    """``{method: (scores [Q, Z], wall_s, cpu_s)}`` of every method of :data:`METHODS` (module docstring)."""
    vmask = attribution.total_unique_mask([task.train_tokens, task.test_tokens], task.config.vocab_size)
    shape = (len(task.test_tokens), len(task.train_tokens))
    rng = np.random.default_rng(seed)
    runs = {"random": lambda: jnp.asarray(rng.standard_normal(shape), jnp.float32),
            **{p: _forward(params, net, task, vmask, p) for p in FORWARD},
            **{m: _gradient(params, net, task, m) for m in ("exact", "datainf", "hyperinf")},
            "less": _less(params, net, task, s, lr, seed)}
    return {m: timed(runs[m]) for m in METHODS}


def retrain(params, net, task, masks, cfg: LdsConfig, s: LdsScale) -> dict:
    """Every subset retrained in one program; the members' test losses ``[U, Q]`` and the cost."""
    train = lds.make_subset_trainer(net.graphdef, net.rest, steps=s.ft_steps, lr=cfg.lr, mode=cfg.mode)
    clock = Clock()
    params_u, final, nonfinite = train(params, task.train_tokens, np.ones(task.train_tokens.shape, np.float32), masks)
    losses = np.asarray(lds.member_losses(net.graphdef, params_u, net.rest, task.test_tokens,
                                          np.ones(task.test_tokens.shape, np.float32)))
    return {"losses": losses, "train_loss": final, "nonfinite": int(nonfinite.sum()), **clock.elapsed()}


def run_lds(cfg: LdsConfig) -> list[dict]:
    """Every seed of ``cfg`` (resumed where finished); returns the finished seeds' rows files."""
    s = SCALES[cfg.scale]
    t = s.task
    regime = {"model": f"{cfg.arch} port, synthetic base model (cfka_jax/geometry/synthetic.py): {s.model.layers} "
                       f"blocks, d = {s.model.hidden}, {s.pretrain_steps} AdamW steps on {t.pretrain_classes} "
                       "pretraining classes",
              "world": f"synthetic task, rule {t.rule!r} on {t.content_tokens} content tokens: {t.num_classes} classes "
                       f"× {t.train_per_class} train (the pool) / {t.test_per_class} test items, drawn from the seed",
              "dose": f"{cfg.num_subsets} subsets keeping {cfg.fraction:g} of the pool, each retrained from the base "
                      f"model: {s.ft_steps} full-batch AdamW steps (lr {cfg.lr:g}, cosine), every token a target",
              "scores": "at the base model; similarities (positive = helps); the LDS correlates Σ_{i∈S} τ with −loss",
              "cost": "wall_s / cpu_s of one method's [Q, Z] scores from the base parameters, second call of two",
              "scale": cfg.scale,
              "statistic": "lds: mean over the test items of one seed of the per-item Spearman over the subsets; "
                           "lds_item_std their std (ddof 0); the seed spread is across rows"}
    return geometry_record.run_study("lds", cfg, lambda seed, out: _run_seed(cfg, seed, out), regime)


def _run_seed(cfg: LdsConfig, seed: int, out: pathlib.Path) -> list[dict]:
    s = SCALES[cfg.scale]
    task = make_task(dataclasses.replace(s.task, seed=seed))
    base, fit_losses = fit(dataclasses.replace(s.model, arch=cfg.arch, seed=seed).build(s.task.vocab_size), task,
                           steps=s.pretrain_steps, batch_size=min(32, len(task.pretrain_tokens)), seed=seed)
    net, params = Net.split(base)
    t0 = time.perf_counter()
    scores = method_scores(params, net, task, s, cfg.lr, seed)
    scoring_s = time.perf_counter() - t0
    masks = lds.subset_masks(seed, len(task.train_tokens), cfg.num_subsets, cfg.fraction)
    truth = retrain(params, net, task, masks, cfg, s)
    base_test = np.asarray(lds.item_losses(net.graphdef, params, net.rest, jnp.asarray(task.test_tokens),
                                           jnp.ones(task.test_tokens.shape, jnp.float32)))
    r = geometry_record.rounded
    rows = [{"method": "retrain", "seed": seed, "arch": cfg.arch, "subsets": cfg.num_subsets,
             "fraction": cfg.fraction, "base_loss": r(fit_losses[-1]), "base_test_loss": r(base_test.mean()),
             "test_loss": r(truth["losses"].mean()), "test_loss_subset_std": r(truth["losses"].std(0).mean()),
             "train_loss": r(truth["train_loss"].mean()), "nonfinite_steps": truth["nonfinite"],
             "wall_s": truth["wall_s"], "cpu_s": truth["cpu_s"]}]
    per_item = {}
    for m, (sc, wall, cpu) in scores.items():
        v = np.asarray(lds.lds(sc, masks, truth["losses"]), np.float64)
        per_item[m] = v.tolist()
        rows.append({"method": m, "seed": seed, "arch": cfg.arch, "lds": r(v.mean()), "lds_item_std": r(v.std()),
                     "n_test": int(v.size), "n_train": len(task.train_tokens), "subsets": cfg.num_subsets,
                     "fraction": cfg.fraction, "wall_s": round(wall, 5), "cpu_s": round(cpu, 5)})
    jsonio.write_json_atomic(out / "lds.json", {"config": dataclasses.asdict(cfg), "seed": seed,
                                                "scale": dataclasses.asdict(s), "rows": rows, "lds_per_item": per_item,
                                                "scoring_wall_s": scoring_s}, portable=True, indent=1)
    table = [[row["method"], f"{row['lds']:.3f} ± {row['lds_item_std']:.3f}", f"{row['wall_s']:.4f}",
              f"{row['cpu_s']:.4f}"] for row in rows[1:]]
    body = markdown_table(["method", "LDS (mean ± std over test items)", "wall s", "CPU s"], table)
    body += (f"\n{len(task.test_tokens)} test items, pool of {len(task.train_tokens)}; {cfg.num_subsets} subsets of "
             f"{cfg.fraction:g}, retrained {s.ft_steps} steps in one program ({truth['wall_s']:.1f} s wall); test "
             f"loss {truth['losses'].mean():.3f} (base {base_test.mean():.3f}); arch {cfg.arch}; seed {seed}.\n")
    write_markdown(out, "lds", "Linear datamodeling score (synthetic task)", body)
    return rows
