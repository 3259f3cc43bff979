"""``cfka geometry onestep`` and ``cfka geometry coldstart``: the Section-3 validation and cold-start sign agreement.

onestep (spec §3.4 at the project's scale): the synthetic base model (fp32, matmul precision ``highest``); update
tokens = the first ``update_tokens`` response tokens of ``update_samples`` benchmark-train examples, observed
tokens = the same of ``obs_samples`` benchmark-test examples; the Cartesian product subsampled to ``max_pairs``
with ``Random(pair_seed)``; η = 1e-4. Writes ``onestep_pairs.json`` (every per-pair quantity), ``onestep.json`` /
``onestep.md`` (§8 comparisons for every CH2 variant, Hoyer, noise floor, App. B.2 block accuracy) and
``onestep_scatter.png`` (CH1 and CH1 + CH2 vs the actual change).

coldstart (spec §8): AdamW warm-up (lr ``lr``, batch 1, clip 1) on benchmark-train examples (the target
distribution) disjoint from the validation update split; at each checkpoint step (``steps``, default the scale's
0, 25, 50, 100, 200) the onestep validation with η = 1e-5; comparisons A, B and C per checkpoint in
``coldstart.json`` / ``coldstart.md`` and ``coldstart_sign.png``. ``start='random'`` (the design: a cold model,
the random initialisation of the port) or ``'base'`` (the synthetic base model fitted on the pretraining classes).
``--seeds 0,1,2`` repeats coldstart with the task and the model (and the base model's fit) drawn from each seed, the
pair subsample staying ``Random(pair_seed)`` (into ``<out>/seed<k>``, resumable); ``--record NAME`` writes the
produced record ``token-force/NAME`` as seeds finish, one row per (seed, checkpoint) (``geometry_record``)::

    cfka geometry coldstart --scale small --start random --lr 1e-3 --seeds 0,1,2 --out runs/geometry/coldstart-s3 \
        --record coldstart_random
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry import channels, onestep, validation
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.stats import compare
from cfka_jax.geometry.synthetic import make_task
from cfka_jax.experiments import geometry_record
from cfka_jax import jsonio
from cfka_jax.experiments.geometry_common import (
    base_model,
    markdown_table,
    save_plot,
    scale,
    write_markdown,
)

COMPARISONS = ("A_delta_vs_first_order", "B_first_order_vs_approx", "C_delta_vs_approx", "C1_delta_vs_eta_ch1")


@dataclasses.dataclass(frozen=True)
class OnestepConfig:
    scale: str = "smoke"
    arch: str = "qwen"
    eta: float = 1e-4
    pair_seed: int = 0
    out: str = "runs/geometry/onestep"


@dataclasses.dataclass(frozen=True)
class ColdstartConfig:
    scale: str = "smoke"
    arch: str = "qwen"
    eta: float = 1e-5
    lr: float = 1e-4
    pair_seed: int = 0
    start: str = "random"
    steps: tuple[int, ...] = ()
    out: str = "runs/geometry/coldstart"
    seeds: tuple[int, ...] = ()
    record: str | None = None
    results: str = "results"

    def __post_init__(self):
        if self.start not in ("random", "base"):
            raise ValueError(f"start must be 'random' or 'base', got {self.start!r}")
        if any(t < 0 for t in self.steps):
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        geometry_record.check_seeds(self.seeds)
        geometry_record.check_record_name(self.record)


def response_tokens(tokens: np.ndarray, samples: int, per_sample: int, first_response: int,
                    offset: int = 0) -> onestep.TokenSet:
    """The first ``per_sample`` response targets of ``samples`` rows spread evenly over ``tokens[offset:]`` (the
    token set holds those rows only; :func:`source_rows` gives their indices in ``tokens``)."""
    rows = source_rows(len(tokens), samples, offset)
    pos = first_response + np.arange(per_sample)
    return onestep.TokenSet(jnp.asarray(tokens[rows]), jnp.asarray(np.repeat(np.arange(samples), per_sample),
                                                                     jnp.int32),
                            jnp.asarray(np.tile(pos, samples), jnp.int32))


def source_rows(n: int, samples: int, offset: int = 0) -> np.ndarray:
    return offset + np.linspace(0, n - offset - 1, samples).round().astype(int)


def _token_sets(task, s, offset=0):
    first = 2 + s.task.template_len + s.task.input_len  # the first output token, after SEP
    per = min(s.update_tokens, s.task.input_len)
    upd = response_tokens(task.train_tokens, s.update_samples, per, first, offset)
    obs = response_tokens(task.test_tokens, s.obs_samples, min(s.obs_tokens, s.task.input_len), first)
    return upd, obs


def validate(params, net, upd, obs, eta, max_pairs, pair_seed):
    """(flattened pairs, summary, block accuracy) of one Section-3 validation."""
    fac = validation.factors(params, obs, upd, net=net)
    table = validation.pair_table(params, obs, upd, net=net, eta=eta, precomputed=fac)
    o, u = validation.subsample(*table["ch1"].shape, max_pairs, pair_seed)
    pairs = validation.flatten(table, o, u)
    summary = validation.summarize(pairs, eta=eta)
    summary["variants"] = {v: compare(pairs["delta_logp"], eta * (pairs["ch1"] + pairs[v]))
                           for v in channels.CH2_VARIANTS}
    return pairs, summary, validation.block_accuracy(*fac, params, net=net)


def _scatter(out, pairs, eta):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(12, 3.8))
    d = pairs["delta_logp"]
    for a, (label, x) in zip(ax, (("η·CH1", eta * pairs["ch1"]), ("η(CH1 + ch2)", pairs["approx"]),
                                  ("η⟨∇log p_o, ∇log p_u⟩", pairs["first_order_exact"]))):
        c = compare(d, x)
        a.scatter(x, d, s=6, alpha=0.6)
        a.axhline(0, color="k", lw=0.5)
        a.axvline(0, color="k", lw=0.5)
        a.set(xlabel=label, ylabel="actual Δlog p_o", title=f"r={c['pearson']:.2f}, sign={c['sign_agreement']:.2f}")
    return save_plot(fig, out, "onestep_scatter")


def run_onestep(cfg: OnestepConfig) -> dict:
    s = scale(cfg.scale)
    task, model, _ = base_model(s, cfg.arch)
    net, params = Net.split(model)
    upd, obs = _token_sets(task, s)
    pairs, summary, blocks = validate(params, net, upd, obs, cfg.eta, s.max_pairs, cfg.pair_seed)
    out = pathlib.Path(cfg.out)
    jsonio.write_json_atomic(out / "onestep_pairs.json", {k: v.tolist() for k, v in pairs.items()}, portable=True,
                             indent=1)
    result = {"config": dataclasses.asdict(cfg), "summary": summary, "block_accuracy": blocks}
    jsonio.write_json_atomic(out / "onestep.json", result, portable=True, indent=1)
    rows = [[k, *(summary[k][m] for m in ("pearson", "spearman", "spearman_abs", "sign_agreement", "slope"))]
            for k in COMPARISONS]
    rows += [[f"Δlog p vs η(CH1 + {v})", *(summary["variants"][v][m] for m in
                                           ("pearson", "spearman", "spearman_abs", "sign_agreement", "slope"))]
             for v in channels.CH2_VARIANTS]
    body = markdown_table(["comparison", "Pearson", "Spearman", "Spearman |·|", "sign agreement", "slope"], rows)
    body += (f"\n{summary['pairs']} pairs, η = {cfg.eta:g}, arch {cfg.arch}; noise floor "
             f"{summary['noise_floor']:.2e} (fp32 spacing of log p {summary['fp32_ulp_logp']:.2e}), "
             f"{summary['below_noise_fraction']:.1%} of pairs at or below it.\n\nApp. B.2 block accuracy (Pearson of a "
             "block's CH2 term with its exact gradient block): "
             + ", ".join(f"{k} {v:.3f}" for k, v in blocks.items()) + "\n\nHoyer density: "
             + ", ".join(f"{k} {v:.3f}" for k, v in summary["density"].items()) + "\n")
    write_markdown(out, "onestep", "One-step influence: CH1 / CH2 vs the actual change", body)
    _scatter(out, pairs, cfg.eta)
    return result


def _warmup_step(model, lr):
    from flax import nnx

    from cfka_jax.train.optim import OptimConfig, make_optimizer
    from cfka_jax.train.step import init_state, make_train_step

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = make_optimizer(OptimConfig(peak_lr=lr, min_lr=lr, warmup_steps=0, total_steps=1, weight_decay=0.0))
    return make_train_step(graphdef, rest, tx), init_state(params, tx)


def run_coldstart(cfg: ColdstartConfig) -> list[dict]:
    """Every seed of ``cfg`` (resumed where finished); returns the finished seeds' rows files."""
    s = scale(cfg.scale)
    start = ("its random initialisation" if cfg.start == "random" else
             f"the synthetic base model ({s.pretrain_steps} AdamW steps on the pretraining classes)")
    regime = {"model": f"{cfg.arch} port, d = {s.model.hidden}, {s.model.layers} blocks: {start}",
              "pt_quality": "not measured",
              "world": "warm-up on the benchmark-train examples (disjoint from the validation update split); "
                       f"validation on the §3.4 grid: {s.update_samples} × {s.update_tokens} update tokens, "
                       f"{s.obs_samples} × {s.obs_tokens} observed tokens, {s.max_pairs} pairs "
                       f"(Random({cfg.pair_seed})); task and model drawn from the seed",
              "dose": f"checkpoints {list(cfg.steps or s.coldstart_steps)} AdamW steps (batch 1, lr {cfg.lr:g}); "
                      f"validation step η = {cfg.eta:g}",
              "scale": cfg.scale}
    return geometry_record.run_study("coldstart", cfg, lambda seed, out: _coldstart_seed(cfg, seed, out), regime)


def _coldstart_rows(cfg, seed, rows) -> list[dict]:
    r = geometry_record.rounded
    a, b, c = COMPARISONS[:3]
    return [{"start": cfg.start, "warmup_lr": cfg.lr, "seed": seed, "step": row["step"],
             "sign_a": r(row[a]["sign_agreement"]), "sign_b": r(row[b]["sign_agreement"]),
             "sign_c": r(row[c]["sign_agreement"]), "spearman_b": r(row[b]["spearman"]),
             "spearman_c": r(row[c]["spearman"]), "pearson_c": r(row[c]["pearson"]),
             "noise_floor": r(row["noise_floor"], 6)} for row in rows]


def _coldstart_seed(cfg: ColdstartConfig, seed: int, out: pathlib.Path) -> list[dict]:
    s = scale(cfg.scale)
    if cfg.start == "base":
        task, model, _ = base_model(s, cfg.arch, seed=seed)
    else:
        task = make_task(dataclasses.replace(s.task, seed=seed))
        model = dataclasses.replace(s.model, arch=cfg.arch, seed=seed).build(s.task.vocab_size)
    net, _ = Net.split(model)
    upd, obs = _token_sets(task, s)
    step, state = _warmup_step(model, cfg.lr)
    held = set(source_rows(len(task.train_tokens), s.update_samples).tolist())
    pool = np.asarray([i for i in range(len(task.train_tokens)) if i not in held])
    mask = jnp.ones((1, task.train_tokens.shape[1]), jnp.float32)
    rows, t = [], 0
    for target in sorted(cfg.steps or s.coldstart_steps):
        while t < target:
            tokens = jnp.asarray(task.train_tokens[pool[t % len(pool)]][None])
            state, _ = step(state, {"tokens": tokens, "target_mask": mask})
            t += 1
        _, summary, _ = validate(state.params, net, upd, obs, cfg.eta, s.max_pairs, cfg.pair_seed)
        rows.append({"step": t, **{k: summary[k] for k in COMPARISONS}, "noise_floor": summary["noise_floor"]})
    result = {"config": dataclasses.asdict(cfg), "seed": seed, "checkpoints": rows}
    jsonio.write_json_atomic(out / "coldstart.json", result, portable=True, indent=1)
    table = [[r["step"], *(r[k]["sign_agreement"] for k in COMPARISONS[:3]),
              *(r[k]["pearson"] for k in COMPARISONS[:3])] for r in rows]
    body = markdown_table(["step", "sign A", "sign B", "sign C", "Pearson A", "Pearson B", "Pearson C"], table)
    body += f"\nstart {cfg.start}, AdamW lr {cfg.lr:g} (batch 1), η = {cfg.eta:g}, arch {cfg.arch}, seed {seed}.\n"
    write_markdown(out, "coldstart", "Cold-start sign agreement over warm-up steps", body)
    _coldstart_plot(out, rows)
    return _coldstart_rows(cfg, seed, rows)


def _coldstart_plot(out, rows):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    steps = [r["step"] for r in rows]
    for key, label in zip(COMPARISONS[:3], ("A: Δ vs first order", "B: first order vs approx", "C: Δ vs approx")):
        ax.plot(steps, [r[key]["sign_agreement"] for r in rows], "o-", label=label)
    ax.set(xlabel="warm-up step", ylabel="sign agreement", ylim=(0, 1.05), title="cold start")
    ax.legend(fontsize=8)
    return save_plot(fig, out, "coldstart_sign")
