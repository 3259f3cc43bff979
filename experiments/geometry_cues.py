"""``cfka geometry erosion --study cues``: the 2 × 2 train-cue × eval-cue grid of format isolation (spec §6.6) and
the per-token, per-domain collision protocol (spec §6.2), on the two-task world of ``geometry/formats.py``.

The base model learns the old multiple-choice task **with both cues**: every old item in the canonical markers
(Q … ANS) and in the other ones (P … R), all targets, ``base_steps`` AdamW steps — the release's "MMLU bridge"
for base models, here with both cues so that either eval cue has a meaning. Then, per train cue (Q/ANS or P/R), the
new long-form task is learned for ``steps`` AdamW steps (response tokens); after it the old task is evaluated in
both eval cues: canonical-format rate (greedy = one letter then EOS), P(A..D) and content accuracy. The spec's
finding to test: the format loss is cue-specific, largest where the eval cue matches the train cue.

Collision (§6.2, ``geometry/collision.py``) from the same base model: every response token of
``predict_examples / 10`` new-task examples in each train cue, one SGD step of η ∈ ``COLLISION_ETAS`` on that
token alone (η = 1e-4 as the release, and 1e-3; at 1e-2 one token's step already costs the old items ~35 nats), the
teacher-forced
``total_logp`` (all targets) of every old item in each eval cue before and after; per subject domain F_avg and
F_ratio; the Spearman of each token's energy with its mean F_avg; the F_avg of the update example's own subject
vs the other subjects.

Writes ``cues_seed<k>.json`` (resumed when the config matches), ``cues.json`` and ``cues.md``.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry import collision, formats
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.stats import spearman
from cfka_jax.geometry.synthetic import fit_arrays, make_finetuner
from cfka_jax.jsonio import read_json_object
from cfka_jax import jsonio
from cfka_jax.experiments.geometry_common import markdown_table, write_markdown

CUES = ("QA", "PR")
COLLISION_ETAS = (1e-4, 1e-3)
COLLISION_TAU = 0.1


def _cue(tokens: np.ndarray, cue: str) -> np.ndarray:
    return tokens if cue == "QA" else formats.isolate(tokens)


def _old_metrics(logits, params, world, cue) -> dict:
    m = formats.old_task_metrics(lambda t: logits(params, t), jnp.asarray(_cue(world.old, cue)),
                                 jnp.asarray(world.old_letter))
    return {"canonical_rate": float(np.mean(m["canonical"])), "choice_mass": float(np.mean(m["choice_mass"])),
            "content_acc": float(np.mean(m["content"]))}


def _new_acc(logits, params, tokens) -> float:
    mask = formats.response_mask(tokens)[:, 1:]
    pred = np.asarray(jnp.argmax(logits(params, jnp.asarray(tokens))[:, :-1], axis=-1))
    return float(np.sum((pred == tokens[:, 1:]) * mask) / np.sum(mask))


def _collisions(params, net, world, n: int) -> dict:
    """The §6.2 protocol for train cue × eval cue (update tokens: every response token of n new-task rows)."""
    cfg = world.config
    first = cfg.new_len - cfg.answer_len - 1  # the first answer token's target position
    rows = np.repeat(np.arange(n), cfg.answer_len + 1)
    pos = np.tile(np.arange(first, cfg.new_len), n)
    kind = np.where(pos == first, "first", np.where(pos == cfg.new_len - 1, "eos", "rest"))
    mask = np.ones(world.old.shape, np.float32)
    mask[:, 0] = 0.0
    out = {}
    for train_cue in CUES:
        upd = jnp.asarray(_cue(world.new_train[:n], train_cue)[rows])
        for eval_cue in CUES:
            r = collision.token_collisions(params, upd, jnp.asarray(pos, jnp.int32),
                                           jnp.asarray(_cue(world.old, eval_cue)), jnp.asarray(mask), net=net,
                                           etas=COLLISION_ETAS)
            out[f"{train_cue}/{eval_cue}"] = _collision_summary(r, world, rows, kind)
    return out


def _collision_summary(r, world, rows, kind) -> dict:
    sub_u = world.new_train_subject[rows]
    energy = np.asarray(r["energy"])
    out = {"energy_mean": float(energy.mean())}
    for i, eta in enumerate(COLLISION_ETAS):
        d = collision.per_domain(np.asarray(r["delta"][i]), world.old_subject, world.config.subjects,
                                 tau=COLLISION_TAU)
        f = d["f_avg"]
        own = f[np.arange(len(rows)), sub_u]
        other = (f.sum(1) - own) / (f.shape[1] - 1)
        out[f"eta={eta:g}"] = {
            "f_avg": float(f.mean()), "f_ratio": float(d["f_ratio"].mean()),
            "f_avg_by_kind": {k: float(f[kind == k].mean()) for k in ("first", "rest", "eos")},
            "f_avg_own_subject": float(own.mean()), "f_avg_other_subjects": float(other.mean()),
            "spearman_energy_f_avg": spearman(energy, f.mean(1)),
            "first_order_rel_err": float(np.linalg.norm(np.asarray(r["delta"][i]) - eta * np.asarray(
                r["first_order"])) / max(np.linalg.norm(eta * np.asarray(r["first_order"])), 1e-30))}
    return out


def run_cues_seed(cfg, s, seed: int) -> dict:
    world = formats.make_world(dataclasses.replace(s.world, seed=seed))
    both = np.concatenate([world.old, formats.isolate(world.old)])
    model = dataclasses.replace(s.model, arch=cfg.arch, seed=seed).build(world.config.vocab_size)
    base, _ = fit_arrays(model, both, np.ones(both.shape, np.float32), steps=s.base_steps, lr=3e-3, seed=seed)
    net, params = Net.split(base)
    logits = jax.jit(lambda p, t: net.model(p)(t).logits)
    result = {"seed": seed, "base": {c: _old_metrics(logits, params, world, c) for c in CUES},
              "collision": _collisions(params, net, world, max(1, min(s.predict_examples // 10,
                                                                              len(world.new_train)))),
              "grid": {}}
    finetune = make_finetuner(net.graphdef, net.rest, steps=s.steps, batch_size=32, lr=cfg.lr)
    for train_cue in CUES:
        train, test = _cue(world.new_train, train_cue), _cue(world.new_test, train_cue)
        state, _ = finetune(params, train, formats.response_mask(train), seed)
        result["grid"][train_cue] = {"new_acc": _new_acc(logits, state.params, test),
                                     **{c: _old_metrics(logits, state.params, world, c) for c in CUES}}
    return result


def _mean_std(v) -> list[float]:
    return [float(np.mean(v)), float(np.std(v))]


def summarize_cues(results: list[dict]) -> dict:
    """Mean ± std (ddof 0) over seeds of every leaf number (base, grid, collision)."""
    def merge(items):
        if isinstance(items[0], dict):
            return {k: merge([it[k] for it in items]) for k in items[0]}
        return _mean_std(items)
    return merge([{k: r[k] for k in ("base", "grid", "collision")} for r in results])


def _fmt(ms) -> str:
    return f"{ms[0]:.3f} ± {ms[1]:.3f}"


def _fmt_g(ms) -> str:
    return f"{ms[0]:.3g} ± {ms[1]:.2g}"


def _body(cfg, s, summary, seeds) -> str:
    grid = summary["grid"]
    keys = ("canonical_rate", "choice_mass", "content_acc")
    rows = [["base (before the new task)", "—"] + [_fmt(summary["base"][c][k]) for c in CUES for k in keys]]
    rows += [[f"new task in {t}", _fmt(grid[t]["new_acc"])] + [_fmt(grid[t][c][k]) for c in CUES for k in keys]
             for t in CUES]
    body = markdown_table(["train cue", "new-task acc"] + [f"{k}, eval {c}" for c in CUES
                                                           for k in ("canonical", "P(A..D)", "content")], rows)
    crow = []
    for key, c in summary["collision"].items():
        for eta in COLLISION_ETAS:
            e = c[f"eta={eta:g}"]
            crow.append([key, f"{eta:g}", _fmt_g(e["f_avg"]), _fmt_g(e["f_ratio"]),
                         _fmt_g(e["f_avg_by_kind"]["first"]), _fmt_g(e["f_avg_by_kind"]["rest"]),
                         _fmt_g(e["f_avg_own_subject"]), _fmt_g(e["f_avg_other_subjects"]),
                         _fmt(e["spearman_energy_f_avg"]), _fmt_g(e["first_order_rel_err"])])
    body += "\n§6.2 collision (per update token, one SGD step from the base model):\n\n"
    body += markdown_table(["train/eval cue", "η", "F_avg", f"F_ratio (τ={COLLISION_TAU})", "F_avg first token",
                            "F_avg other tokens", "F_avg own subject", "F_avg other subjects",
                            "Spearman(E, F_avg)", "‖Δ − η·first order‖ / ‖η·first order‖"], crow)
    body += (f"\nSeeds {list(seeds)} (mean ± std, ddof 0); base {s.base_steps} steps on both cues (lr 3e-3), new "
             f"task {s.steps} steps, lr {cfg.lr:g}, batch 32; arch {cfg.arch}.\n")
    return body


def run_cues(cfg, s) -> dict:
    out = pathlib.Path(cfg.out)
    results = []
    for seed in cfg.run_seeds:
        path = out / f"cues_seed{seed}.json"
        data = read_json_object(path, "a cue-grid seed result") if path.exists() else None
        if data is None or data.get("config") != jsonio.portable_json(dataclasses.asdict(cfg)):
            data = {"config": dataclasses.asdict(cfg), "result": run_cues_seed(cfg, s, seed)}
            jsonio.write_json_atomic(out / f"{path.stem}.json", data, portable=True, indent=1)
        results.append(data["result"])
    summary = summarize_cues(results)
    jsonio.write_json_atomic(out / "cues.json", {"config": dataclasses.asdict(cfg), "scale": dataclasses.asdict(s),
                                                 **summary}, portable=True, indent=1)
    write_markdown(out, "cues", "Train cue × eval cue, per-token collision (synthetic)",
                   _body(cfg, s, summary, cfg.run_seeds))
    return summary
