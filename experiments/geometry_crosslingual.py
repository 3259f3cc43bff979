"""``cfka geometry crosslingual``: CH2 across languages, retrieval of an item's translations (spec §4.3).

The fact world of ``cfka_jax/geometry/languages.py``: ``languages`` synthetic languages with disjoint
vocabularies and one structure. A Qwen2 port (tied head) is trained from scratch on every item in every language
plus parallel translation pairs (``steps`` AdamW steps). Each query (an item in language 0) scores every
candidate (the queries' items in languages 1..4; 4 same-source candidates per query) with the forward-only
presets ``ch1`` (RH), ``ch1-ch2`` (RH + ``gh_raw``) and ``ch1-ch2-inputln`` (RH + ``gh_inputln``, the release's
retrieval preset), under the vocabulary modes ``topk_unique`` (k = 16, batches of 4 in a fixed order: the
release's setting) and ``full``; besides, the native baseline (cosine of mean-pooled last hidden states) and
random scores. Metrics per query: Recall@1/4/10 (Recall@4 = the release's ``top4_item_accuracy``), the all-4
rate and top-1 accuracy; mean ± std over seeds. Writes ``crosslingual.json`` / ``crosslingual.md`` and
``crosslingual_recall.png``::

    cfka geometry crosslingual --scale small --out runs/geometry/crosslingual
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry import attribution, languages
from cfka_jax.geometry.force import target_logprobs
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.synthetic import ModelConfig, fit_arrays
from cfka_jax.geometry.streams import forward_streams
from cfka_jax.geometry.readout import readout_matrix
from cfka_jax import jsonio
from cfka_jax.experiments.geometry_common import markdown_table, save_plot, write_markdown

PRESETS = ("ch1", "ch1-ch2", "ch1-ch2-inputln")
VOCABS = ("topk_unique", "full")


@dataclasses.dataclass(frozen=True)
class CrossScale:
    world: languages.LanguageConfig
    model: ModelConfig
    steps: int
    seeds: tuple[int, ...]


SCALES = {
    "smoke": CrossScale(languages.LanguageConfig(languages=3, entities=4, relations=2, name_pieces=5, value_concepts=5,
                                                 parallel=8, queries=4),
                        ModelConfig(hidden=16, layers=2, heads=2, kv_heads=1, intermediate=24), steps=2, seeds=(0,)),
    "small": CrossScale(languages.LanguageConfig(), ModelConfig(hidden=64, layers=3, heads=4, kv_heads=2,
                                                                intermediate=128), steps=2000, seeds=(0, 1, 2)),
}


@dataclasses.dataclass(frozen=True)
class CrosslingualConfig:
    scale: str = "smoke"
    """A key of :data:`SCALES`: the language world, the model and its training steps."""
    arch: str = "qwen"
    topk: int = 16
    """k of the ``topk_unique`` vocabulary mode (the release's 16)."""
    lr: float = 3e-3
    """AdamW learning rate of the from-scratch training."""
    seeds: tuple[int, ...] = ()
    """Training seeds (empty: the scale's)."""
    out: str = "runs/geometry/crosslingual"

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ValueError(f"unknown scale {self.scale!r}; choose from {sorted(SCALES)}")
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")


def _features(params, net, tokens, mask, vocab, topk):
    batch = {"tokens": jnp.asarray(tokens), "attention_mask": jnp.asarray(mask)}
    vmask = None
    if vocab == "topk_unique":
        lp = target_logprobs(net.model(params)(batch["tokens"], attention_mask_BT=batch["attention_mask"]).logits)
        keep = attribution.attribution_mask(batch["attention_mask"])
        vmask = attribution.topk_unique_masks(lp, keep, topk)
    out = {}
    for gh in ("gh_raw", "gh_inputln"):
        out[gh] = jax.jit(functools.partial(attribution.sequence_features, net=net, gh=gh))(params, batch,
                                                                                            vocab_mask=vmask)
    return out


def _native(params, net, tokens, mask):
    st = forward_streams(net.model(params), jnp.asarray(tokens), attention_mask_BS=jnp.asarray(mask))
    m = jnp.asarray(mask, jnp.float32)[..., None]
    pooled = jnp.sum(st.final * m, axis=1) / jnp.sum(m, axis=1)
    return np.asarray(pooled / jnp.linalg.norm(pooled, axis=-1, keepdims=True))


def run_seed(cfg: CrosslingualConfig, seed: int) -> dict:
    s = SCALES[cfg.scale]
    facts = languages.make_facts(dataclasses.replace(s.world, seed=seed))
    tokens, mask = languages.corpus(facts, seed)
    model = dataclasses.replace(s.model, arch=cfg.arch, seed=seed).build(facts.config.vocab_size)
    model, losses = fit_arrays(model, tokens, mask.astype(np.float32), steps=s.steps, lr=cfg.lr, seed=seed)
    net, params = Net.split(model)
    split = languages.retrieval_split(facts, seed)
    metrics = {}
    for vocab in VOCABS:
        fq = _features(params, net, split["query_tokens"], split["query_mask"], vocab, cfg.topk)
        fc = _features(params, net, split["cand_tokens"], split["cand_mask"], vocab, cfg.topk)
        for preset in PRESETS:
            gh = attribution.PRESETS[preset][1] or "gh_inputln"
            sc = np.asarray(attribution.gram_scores(fq[gh], fc[gh], preset=preset))
            metrics[f"{preset}/{vocab}"] = languages.retrieval_metrics(sc, split["query_item"], split["cand_item"])
    nq, nc = _native(params, net, split["query_tokens"], split["query_mask"]), _native(
        params, net, split["cand_tokens"], split["cand_mask"])
    metrics["native (cosine of mean-pooled h)"] = languages.retrieval_metrics(nq @ nc.T, split["query_item"],
                                                                              split["cand_item"])
    rng = np.random.default_rng(1000 + seed)
    rand = [languages.retrieval_metrics(rng.random((len(nq), len(nc))), split["query_item"], split["cand_item"])
            for _ in range(100)]
    metrics["random (100 draws)"] = {k: float(np.mean([r[k] for r in rand])) for k in rand[0]}
    return {"seed": seed, "final_loss": float(np.mean(losses[-20:])), "metrics": metrics,
            "queries": int(len(nq)), "candidates": int(len(nc)),
            "readout_norm": float(jnp.linalg.norm(readout_matrix(params, net.cfg)))}


def _plot(out, summary):
    import matplotlib.pyplot as plt

    names = list(summary)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    x = np.arange(len(names))
    for j, key in enumerate(("recall@4", "all_same@4", "top1")):
        ax.bar(x + 0.27 * (j - 1), [summary[n][key][0] for n in names], 0.27,
               yerr=[summary[n][key][1] for n in names], label=key)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=7)
    ax.set(ylabel="retrieval of same-source translations", ylim=(0, 1.05))
    ax.legend(fontsize=8)
    return save_plot(fig, out, "crosslingual_recall")


def run_crosslingual(cfg: CrosslingualConfig) -> dict:
    s = SCALES[cfg.scale]
    results = [run_seed(cfg, seed) for seed in (cfg.seeds or s.seeds)]
    names = list(results[0]["metrics"])
    summary = {n: {k: (float(np.mean([r["metrics"][n][k] for r in results])),
                       float(np.std([r["metrics"][n][k] for r in results])))
                   for k in results[0]["metrics"][n]} for n in names}
    out = pathlib.Path(cfg.out)
    jsonio.write_json_atomic(out / "crosslingual.json", {
        "config": dataclasses.asdict(cfg), "scale": dataclasses.asdict(s), "summary": summary, "seeds": results},
        portable=True, indent=1)
    keys = ("recall@4", "all_same@4", "top1", "recall@10")
    rows = [[n, *(f"{summary[n][k][0]:.3f} ± {summary[n][k][1]:.3f}" for k in keys)] for n in names]
    body = markdown_table(["score / vocabulary", "Recall@4 (top4 item acc.)", "all-4 rate", "top-1", "Recall@10"],
                          rows)
    body += (f"\n{results[0]['queries']} queries (language 0) × {results[0]['candidates']} candidates (languages "
             f"1..{s.world.languages - 1}), seeds {[r['seed'] for r in results]} (mean ± std, ddof 0); model "
             f"{dataclasses.asdict(s.model)}, {s.steps} AdamW steps (lr {cfg.lr:g}); final loss "
             + ", ".join(f"{r['final_loss']:.3f}" for r in results) + f"; topk_unique k = {cfg.topk}.\n")
    write_markdown(out, "crosslingual", "Cross-lingual retrieval (synthetic languages)", body)
    _plot(out, summary)
    return summary
