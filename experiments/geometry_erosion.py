"""``cfka geometry erosion``: collision vs erosion, energy masking and format isolation (spec §5.3, §6).

The two-task world of ``cfka_jax/geometry/formats.py``: a base model (Qwen2 port, tied head) learns the old
multiple-choice task (Q … A–D … ANS letter EOS; all targets, ``base_steps`` AdamW steps); it is then fine-tuned
for ``steps`` AdamW steps on the new long-form task (response tokens supervised), in five variants:

* ``plain``: the new task in the same markers (Q / ANS);
* ``tau=1.8`` / ``1.5`` / ``1.0``: the same with energy-threshold masking (E from the same forward, detached,
  ``normalize='all'``);
* ``isolated``: the new task in other markers (P / R), spec §6.6.

Measured every ``eval_every`` steps on the old task's items (canonical markers): ``choice_mass`` = P(A..D) at the
answer position, the canonical-format rate (greedy answer = one letter then EOS), content accuracy (letter argmax)
and the answer-letter NLL; and the new task's held-out response-token accuracy (in the variant's markers).
Collision = the old answer NLL change after one update step at the full learning rate from the base model (a
batch of 32 new-task rows; as the conflict task of ``cfka geometry energy``);
erosion = the fall of ``choice_mass`` and the canonical rate by the end of training. Before any fine-tuning the
§6.5 ``seq5`` erosion score of every old item is computed from the base model's geometry (update side: every
response token of ``predict_examples`` new-task examples, in the canonical and in the isolated markers) and
correlated across subjects with the measured per-subject erosion.

Runs seed by seed (``erosion_seed<k>.json``, resumed when the config matches), then writes ``erosion.json`` /
``erosion.md`` and ``erosion_curves.png`` / ``erosion_prediction.png``::

    cfka geometry erosion --scale small --out runs/geometry/erosion        # the numbers of docs/geometry.md

``--record NAME`` (study ``erosion``) rewrites the produced record ``token-force/NAME`` after every finished seed:
one row per (seed, variant) with the collision, P(A..D) at the start / end / its minimum, the canonical rate, content
accuracy and the new task's accuracy at the end (``geometry_record``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.geometry import formats, onestep
from cfka_jax.geometry.energy import EnergyMaskConfig, make_energy_loss
from cfka_jax.geometry.force import energy
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.stats import corr_pvalue, pearson, spearman
from cfka_jax.geometry.synthetic import ModelConfig, fit_arrays
from cfka_jax.claims.results import Clock
from cfka_jax.jsonio import read_json_object
from cfka_jax.experiments import geometry_record
from cfka_jax import jsonio
from cfka_jax.experiments.geometry_common import markdown_table, save_plot, write_markdown


STUDIES = ("erosion", "cues", "graded")


@dataclasses.dataclass(frozen=True)
class ErosionScale:
    world: formats.FormatWorldConfig
    model: ModelConfig
    base_steps: int
    steps: int
    eval_every: int
    predict_examples: int
    seeds: tuple[int, ...]


SCALES = {
    "smoke": ErosionScale(formats.FormatWorldConfig(subjects=3, entities_per_subject=4, content_tokens=8,
                                                    new_entities=4, new_train=16, new_test=8, input_len=8,
                                                    answer_len=3),
                          ModelConfig(hidden=16, layers=2, heads=2, kv_heads=1, intermediate=24), base_steps=3,
                          steps=2, eval_every=1, predict_examples=2, seeds=(0,)),
    "small": ErosionScale(formats.FormatWorldConfig(), ModelConfig(hidden=48, layers=2, heads=4, kv_heads=2,
                                                                   intermediate=96),
                          base_steps=800, steps=400, eval_every=25, predict_examples=100, seeds=(0, 1, 2)),
}


@dataclasses.dataclass(frozen=True)
class ErosionConfig:
    scale: str = "smoke"
    arch: str = "qwen"
    taus: tuple[float, ...] = (1.8, 1.5, 1.0)
    lr: float = 1e-3
    seeds: tuple[int, ...] = ()
    out: str = "runs/geometry/erosion"
    study: str = "erosion"
    """``erosion``: the five variants and the §6.5 prediction; ``cues``: the §6.6 train-cue × eval-cue grid and the
    §6.2 per-token collision protocol (``geometry_cues.py``); ``graded``: the §6.5 prediction in a world whose
    subjects share a graded fraction of the new task's cue (``geometry_erosion_graded.py``)."""
    record: str | None = None
    results: str = "results"

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ValueError(f"unknown scale {self.scale!r}; choose from {sorted(SCALES)}")
        if self.study not in STUDIES:
            raise ValueError(f"--study must be one of {STUDIES}, got {self.study!r}")
        for tau in self.taus:
            if not math.isfinite(tau):
                raise ValueError("--taus lists the masking thresholds; the unmasked run is always included")
            EnergyMaskConfig(tau=tau)
        geometry_record.check_seeds(self.seeds)
        geometry_record.check_record_name(self.record)
        if self.record and self.study == "cues":
            raise ValueError("--record writes the erosion or graded study's record; the cues study has none")

    @property
    def run_seeds(self) -> tuple[int, ...]:
        return self.seeds or SCALES[self.scale].seeds


def _variants(cfg: ErosionConfig):
    out = [("plain", math.inf, False)] + [(f"tau={t:g}", t, False) for t in cfg.taus]
    return out + [("isolated", math.inf, True)]


def _evaluator(net, world):
    logits = jax.jit(lambda p, t: net.model(p)(t).logits)
    old = jnp.asarray(world.old)
    letters = jnp.asarray(world.old_letter)
    subjects = world.old_subject

    def new_acc(params, tokens):
        mask = formats.response_mask(tokens)[:, 1:]
        pred = np.asarray(jnp.argmax(logits(params, jnp.asarray(tokens))[:, :-1], axis=-1))
        return float(np.sum((pred == tokens[:, 1:]) * mask) / np.sum(mask))

    def evaluate(params, new_tokens):
        m = {k: np.asarray(v) for k, v in formats.old_task_metrics(
            functools.partial(logits, params), old, letters, answer_pos=world.config.old_answer_pos).items()}
        per_subject = [float(m["choice_mass"][subjects == k].mean()) for k in range(world.config.subjects)]
        non_if = [float(1 - m["canonical"][subjects == k].mean()) for k in range(world.config.subjects)]
        content = [float(m["content"][subjects == k].mean()) for k in range(world.config.subjects)]
        return {"choice_mass": float(m["choice_mass"].mean()), "canonical_rate": float(m["canonical"].mean()),
                "content_acc": float(m["content"].mean()), "old_nll": float(m["nll"].mean()),
                "choice_mass_subject": per_subject, "non_if_subject": non_if, "content_subject": content,
                "new_acc": new_acc(params, new_tokens), "_nll_items": m["nll"].tolist()}
    return evaluate


def _predict(params, net, world, n, markers=("canonical", "isolated")):
    """The §6.5 ``seq5`` terms per subject (mean over its old items) for the update side in each of ``markers``."""
    out = {}
    for name, tokens in (("canonical", world.new_train), ("isolated", world.iso_train)):
        if name not in markers:
            continue
        rows = np.repeat(np.arange(n), world.config.answer_len + 1)
        pos = np.tile(np.arange(world.config.new_len - world.config.answer_len - 1, world.config.new_len), n)
        ts = onestep.TokenSet(jnp.asarray(tokens[:n]), jnp.asarray(rows, jnp.int32), jnp.asarray(pos, jnp.int32))
        items = formats.erosion_prediction(params, ts, world.old, net=net, answer_pos=world.config.old_answer_pos)
        out[name] = {k: [float(v[world.old_subject == s].mean()) for s in range(world.config.subjects)]
                     for k, v in items.items()}
    return out


def _copy(model):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return nnx.merge(graphdef, jax.tree.map(jnp.copy, params), rest)


def run_seed(cfg: ErosionConfig, seed: int) -> dict:
    s = SCALES[cfg.scale]
    world = formats.make_world(dataclasses.replace(s.world, seed=seed))
    model = dataclasses.replace(s.model, arch=cfg.arch, seed=seed).build(world.config.vocab_size)
    base, base_losses = fit_arrays(model, world.old, np.ones(world.old.shape, np.float32), steps=s.base_steps,
                                   lr=3e-3, seed=seed)
    net, base_params = Net.split(base)
    evaluate = _evaluator(net, world)
    prediction = _predict(base_params, net, world, min(s.predict_examples, len(world.new_train)))
    e = np.asarray(energy(base(jnp.asarray(world.new_train)).logits, jnp.asarray(world.new_train)))
    resp = formats.response_mask(world.new_train) > 0
    points = sorted({0, 1, *range(s.eval_every, s.steps + 1, s.eval_every), s.steps})
    runs = {}
    for name, tau, iso in _variants(cfg):
        train, test = (world.iso_train, world.iso_test) if iso else (world.new_train, world.new_test)
        curve = []
        loss_fn = None if math.isinf(tau) else make_energy_loss(EnergyMaskConfig(tau=tau))
        fit_arrays(_copy(base), train, formats.response_mask(train), steps=s.steps, lr=cfg.lr, seed=seed,
                   loss_fn=loss_fn, callback_steps=points,
                   callback=lambda p, t, test=test: curve.append({"step": t, **evaluate(p, test)}))
        # collision: one step at the full learning rate (the long run's first step is inside its warm-up)
        first, _ = fit_arrays(_copy(base), train, formats.response_mask(train), steps=1, lr=cfg.lr, seed=seed,
                              loss_fn=loss_fn)
        nll1 = np.asarray(evaluate(nnx.split(first, nnx.Param, ...)[1], test)["_nll_items"])
        nll0 = np.asarray(curve[0]["_nll_items"])
        for c in curve:
            c.pop("_nll_items")
        runs[name] = {"tau": tau, "masked_fraction_base": float(np.mean(e[:, 1:][resp[:, 1:]] >= tau)),
                      "collision": float(np.mean(nll1 - nll0)), "collision_ratio": float(np.mean(nll1 - nll0 > 0.1)),
                      "curve": curve}
    return {"seed": seed, "base_loss": base_losses[-1], "prediction": prediction, "runs": runs,
            "energy_first_answer_token": float(np.mean(e[:, world.config.new_len - world.config.answer_len - 1])),
            "energy_response_mean": float(np.mean(e[:, 1:][resp[:, 1:]]))}


def _seed_file(out: pathlib.Path, seed: int) -> pathlib.Path:
    return out / f"erosion_seed{seed}.json"


def _load_seed(out: pathlib.Path, cfg: ErosionConfig, seed: int) -> dict | None:
    """A finished seed of the same config (scale, arch, taus, lr), else None."""
    path = _seed_file(out, seed)
    if not path.exists():
        return None
    data = read_json_object(path, "an erosion seed result")
    same = {k: data.get("config", {}).get(k) for k in ("scale", "arch", "lr")}
    if same != {"scale": cfg.scale, "arch": cfg.arch, "lr": cfg.lr} or data["config"].get("taus") != list(cfg.taus):
        return None
    return data["result"]


def _mean_std(values) -> tuple[float, float]:
    v = np.asarray(values, float)
    return float(v.mean()), float(v.std())


def summarize(results: list[dict], variants: list[str]) -> dict:
    """Per variant mean ± std (ddof 0) over seeds of the start / end metrics, collision and erosion; and the
    §6.5 prediction's correlations across (seed, subject) points."""
    table = {}
    for name in variants:
        rows = [r["runs"][name] for r in results]
        start, end = [r["curve"][0] for r in rows], [r["curve"][-1] for r in rows]
        entry = {"collision": _mean_std([r["collision"] for r in rows]),
                 "masked_fraction_base": _mean_std([r["masked_fraction_base"] for r in rows])}
        for key in ("choice_mass", "canonical_rate", "content_acc", "new_acc", "old_nll"):
            entry[f"{key}_start"] = _mean_std([c[key] for c in start])
            entry[f"{key}_end"] = _mean_std([c[key] for c in end])
        entry["choice_mass_min"] = _mean_std([min(c["choice_mass"] for c in r["curve"]) for r in rows])
        table[name] = entry
    return {"variants": table, "prediction": _prediction_stats(results)}


def _prediction_stats(results: list[dict]) -> dict:
    out = {}
    for markers, run in (("canonical", "plain"), ("isolated", "isolated")):
        for term in ("total", "ch1", "ch2", "ch2_no_kembd", "h_dot", "h_cos"):
            x, non_if, dlog = [], [], []
            for r in results:
                x += r["prediction"][markers][term]
                c0, c1 = r["runs"][run]["curve"][0], r["runs"][run]["curve"][-1]
                non_if += c1["non_if_subject"]
                dlog += list(np.log(np.maximum(c1["choice_mass_subject"], 1e-30))
                             - np.log(np.maximum(c0["choice_mass_subject"], 1e-30)))
            n = len(x)
            for target, y in (("non_if_rate", non_if), ("dlog_choice_mass", dlog)):
                rp, rs = pearson(x, y), spearman(x, y)
                out[f"{markers}/{term}/{target}"] = {"pearson": rp, "pearson_p": corr_pvalue(rp, n),
                                                     "spearman": rs, "spearman_p": corr_pvalue(rs, n), "n": n}
    return out


def _fmt(ms) -> str:
    return f"{ms[0]:.3f} ± {ms[1]:.3f}"


def _body(cfg, s, summary, results) -> str:
    rows = [[name, _fmt(e["masked_fraction_base"]), _fmt(e["collision"]), _fmt(e["choice_mass_start"]),
             _fmt(e["choice_mass_end"]), _fmt(e["canonical_rate_end"]), _fmt(e["content_acc_end"]),
             _fmt(e["new_acc_end"])] for name, e in summary["variants"].items()]
    body = markdown_table(["variant", "masked at start", "collision (old NLL Δ, step 1)", "P(A..D) start",
                           "P(A..D) end", "canonical rate end", "content acc end", "new-task acc end"], rows)
    pred = [[k, v["pearson"], v["pearson_p"], v["spearman"], v["spearman_p"], v["n"]]
            for k, v in summary["prediction"].items() if "/dlog_choice_mass" in k or "/total/" in k]
    body += "\n§6.5 prediction (score per subject before fine-tuning vs the measured per-subject erosion):\n\n"
    body += markdown_table(["score / target", "Pearson", "p", "Spearman", "p", "n"], pred)
    body += (f"\nSeeds {[r['seed'] for r in results]} (mean ± std, ddof 0); base {s.base_steps} steps (lr 3e-3), new "
             f"task {s.steps} steps, lr {cfg.lr:g}, batch 32; arch {cfg.arch}; model {dataclasses.asdict(s.model)}.\n")
    return body


def _plots(out, results, variants):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    keys = (("choice_mass", "P(A..D)"), ("canonical_rate", "canonical-format rate"),
            ("content_acc", "old content accuracy"), ("new_acc", "new-task token accuracy"))
    for ax, (key, label) in zip(axes, keys):
        for name in variants:
            steps = [c["step"] for c in results[0]["runs"][name]["curve"]]
            ys = np.asarray([[c[key] for c in r["runs"][name]["curve"]] for r in results])
            ax.plot(steps, ys.mean(0), "o-", ms=3, label=name)
            ax.fill_between(steps, ys.min(0), ys.max(0), alpha=0.15)
        ax.set(xlabel="new-task step", ylabel=label, ylim=(-0.02, 1.02))
    axes[0].legend(fontsize=8)
    save_plot(fig, out, "erosion_curves")
    fig, ax = plt.subplots(figsize=(5, 3.8))
    for markers, run, mk in (("canonical", "plain", "o"), ("isolated", "isolated", "s")):
        x = sum((r["prediction"][markers]["total"] for r in results), [])
        y = sum((r["runs"][run]["curve"][-1]["non_if_subject"] for r in results), [])
        ax.scatter(x, y, marker=mk, label=f"{markers} markers")
    ax.set(xlabel="seq5 score before fine-tuning (mean per subject)", ylabel="non-IF rate after fine-tuning")
    ax.legend(fontsize=8)
    save_plot(fig, out, "erosion_prediction")


def _record_rows(cfg: ErosionConfig, result: dict) -> list[dict]:
    """One record row per variant of a finished seed."""
    r, rows = geometry_record.rounded, []
    for name, run in result["runs"].items():
        curve = run["curve"]
        variant, tau = name if name in ("plain", "isolated") else "masked", float(run["tau"])  # "inf" when resumed
        rows.append({"variant": variant, "tau": None if math.isinf(tau) else tau, "lr": cfg.lr,
                     "seed": result["seed"], "masked_at_start": r(run["masked_fraction_base"]),
                     "collision": r(run["collision"], 6), "pad_start": r(curve[0]["choice_mass"]),
                     "pad_end": r(curve[-1]["choice_mass"]), "pad_min": r(min(c["choice_mass"] for c in curve)),
                     "canonical_end": r(curve[-1]["canonical_rate"]), "content_end": r(curve[-1]["content_acc"]),
                     "new_acc": r(curve[-1]["new_acc"]), "old_nll_end": r(curve[-1]["old_nll"])})
    return rows


def _regime(cfg: ErosionConfig, s: ErosionScale) -> dict:
    return {"model": f"{cfg.arch} port, d = {s.model.hidden}, {s.model.layers} blocks",
            "pt_quality": f"old task after {s.base_steps} AdamW steps (lr 3e-3): rows' pad_start (P(A..D) before "
                          "fine-tuning)",
            "world": "formats world (cfka_jax/geometry/formats.py), drawn from the seed: old multiple-choice task, "
                     "new long-form task, ANS at the same position; isolated: markers P / R",
            "dose": f"{s.steps} AdamW steps (batch 32, lr {cfg.lr:g}), response tokens supervised; collision = old "
                    "answer NLL change after one step at the full lr", "scale": cfg.scale}


def run_erosion(cfg: ErosionConfig) -> dict:
    s = SCALES[cfg.scale]
    if cfg.study == "graded":
        from cfka_jax.experiments.geometry_erosion_graded import run_graded

        return run_graded(cfg)
    if cfg.study == "cues":
        from cfka_jax.experiments.geometry_cues import run_cues

        return run_cues(cfg, s)
    out = pathlib.Path(cfg.out)
    results, done = [], []
    for seed in cfg.run_seeds:
        result, seconds = _load_seed(out, cfg, seed), {}
        if result is None:
            clock = Clock()
            result = run_seed(cfg, seed)
            seconds = clock.elapsed()
            jsonio.write_json_atomic(_seed_file(out, seed), {"config": dataclasses.asdict(cfg), "result": result,
                                                             **seconds}, portable=True, indent=1)
        else:
            seconds = {k: read_json_object(_seed_file(out, seed), "an erosion seed result").get(k)
                       for k in ("wall_s", "cpu_s")}
        results.append(result)
        if cfg.record:
            done.append({"seed": seed, "rows": _record_rows(cfg, result), **seconds})
            geometry_record.write_study_record("erosion", cfg, done, _regime(cfg, s), planned=cfg.run_seeds)
    variants = [v[0] for v in _variants(cfg)]
    summary = summarize(results, variants)
    jsonio.write_json_atomic(out / "erosion.json", {"config": dataclasses.asdict(cfg), "scale": dataclasses.asdict(s),
                                                    **summary}, portable=True, indent=1)
    write_markdown(out, "erosion", "Collision vs erosion, energy masking, format isolation (synthetic)",
                   _body(cfg, s, summary, results))
    _plots(out, results, variants)
    return summary
