"""``cfka geometry energy``: update-energy histogram and energy-threshold masking during SFT (spec §5.1, §5.3).

The synthetic base model (fitted on the pretraining classes) is fine-tuned on the *conflict* task — the
pretraining classes' templates with their second half changed, so the base model predicts the old template token
confidently and wrongly where the new one diverges — for ``sft_steps`` AdamW steps (every token supervised), once
per threshold τ ∈ {∞, 1.8, 1.5, 1.0}, with the engine's train step and
``loss_fn = make_energy_loss(EnergyMaskConfig(tau, normalize))`` (energy from the same forward pass, detached).
Measured per τ: the masked fraction of supervised tokens at the start, the new task's test NLL and token accuracy
after SFT (the analogue of the reported "GSM8K drop ≤ 2.6 points"), and the old format's NLL (the pretraining
examples' template tokens) change after the first step (collision) and after SFT (drift).

Writes ``energy.json`` / ``energy.md``, ``energy_histogram.png`` (E of the new task's supervised tokens under the
base model, with the figure bands 0.8 / 1.8 and the masked regions E ≥ τ) and ``energy_hist.json``.

``--seeds 0,1,2`` repeats it with the task, the model and every fit drawn from each seed (into ``<out>/seed<k>``,
resumable), and ``--record NAME`` writes the produced record ``token-force/NAME`` as seeds finish: per seed one
``base`` row and one row per τ (``plain`` for τ = ∞, else ``masked``), with ``collision`` (old-format NLL change after
step 1) and ``old_nll_delta`` (after SFT) (``geometry_record``)::

    cfka geometry energy --scale small --seeds 0,1,2 --out runs/geometry/energy-s3 --record energy_all
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.geometry.energy import EnergyMaskConfig, histogram, make_energy_loss
from cfka_jax.geometry.force import BANDS, energy
from cfka_jax.geometry.synthetic import fit, template_mask
from cfka_jax.train.losses import masked_mean_nll
from cfka_jax.experiments import geometry_record
from cfka_jax import jsonio
from cfka_jax.experiments.geometry_common import (
    base_model,
    markdown_table,
    save_plot,
    scale,
    write_markdown,
)


@dataclasses.dataclass(frozen=True)
class EnergyConfig:
    scale: str = "smoke"
    arch: str = "qwen"
    taus: tuple[float, ...] = (math.inf, 1.8, 1.5, 1.0)
    normalize: str = "all"
    lr: float = 1e-3
    out: str = "runs/geometry/energy"
    seeds: tuple[int, ...] = ()
    record: str | None = None
    results: str = "results"

    def __post_init__(self):
        for tau in self.taus:
            EnergyMaskConfig(tau=tau, normalize=self.normalize)
        geometry_record.check_seeds(self.seeds)
        geometry_record.check_record_name(self.record)


def _copy(model):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return nnx.merge(graphdef, jax.tree.map(jnp.copy, params), rest)


def _scores(model, task):
    """NLL / accuracy on the new (conflict) task's test split (all targets) and on the old template tokens."""
    def nll(tokens, mask):
        logits = model(jnp.asarray(tokens)).logits
        loss, _ = masked_mean_nll(logits, jnp.asarray(tokens), jnp.asarray(mask))
        pred = jnp.argmax(logits[:, :-1], axis=-1)
        hit = (pred == jnp.asarray(tokens)[:, 1:]).astype(jnp.float32) * jnp.asarray(mask)[:, 1:]
        return float(loss), float(jnp.sum(hit) / jnp.sum(jnp.asarray(mask)[:, 1:]))

    new = task.conflict_test_tokens
    new_nll, new_acc = nll(new, np.ones(new.shape, np.float32))
    old_nll, old_acc = nll(task.pretrain_tokens, template_mask(task.config, len(task.pretrain_tokens)))
    return {"new_nll": new_nll, "new_acc": new_acc, "old_nll": old_nll, "old_acc": old_acc}


def _histogram_plot(out, e, taus):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.hist(e, bins=40, range=(0, 2), color="tab:blue", alpha=0.8)
    for band in BANDS:
        ax.axvline(band, color="k", ls=":", lw=0.8)
    for tau, shade in zip([t for t in taus if math.isfinite(t)], ("tab:red", "tab:orange", "tab:olive")):
        ax.axvspan(tau, 2.0, color=shade, alpha=0.12, label=f"masked at τ = {tau:g} ({np.mean(e >= tau):.1%})")
    ax.set(xlabel="update energy E = ‖g‖²", ylabel="tokens", title="conflict-task supervised tokens (base model)")
    ax.legend(fontsize=8)
    return save_plot(fig, out, "energy_histogram")


def run_energy(cfg: EnergyConfig) -> list[dict]:
    """Every seed of ``cfg`` (resumed where finished); returns the finished seeds' rows files."""
    s = scale(cfg.scale)
    regime = {"model": f"{cfg.arch} port, synthetic base model (cfka_jax/geometry/synthetic.py): {s.model.layers} "
                       f"blocks, d = {s.model.hidden}, {s.pretrain_steps} AdamW steps on {s.task.pretrain_classes} "
                       "pretraining classes of the same generator",
              "pt_quality": "old format NLL / accuracy of the base model per seed (rows variant 'base')",
              "world": "conflict task: the pretraining classes' templates with the second half replaced, fresh "
                       "transformations, every target supervised; drawn from the seed",
              "dose": f"{s.sft_steps} AdamW steps (lr {cfg.lr:g}, batch 32) per τ; E from the same forward, detached",
              "normalize": cfg.normalize, "scale": cfg.scale}
    return geometry_record.run_study("energy", cfg, lambda seed, out: _run_seed(cfg, seed, out), regime)


def _record_rows(cfg, seed, before, rows, result) -> list[dict]:
    r = geometry_record.rounded
    out = [{"variant": "base", "seed": seed, **{k: r(v) for k, v in before.items()},
            "energy_mean": r(result["energy_mean"]), **{f"band_{k}": r(v) for k, v in result["bands"].items()},
            "tokens": result["tokens"]}]
    for row in rows:
        plain = math.isinf(row["tau"])
        out.append({"variant": "plain" if plain else "masked", "tau": None if plain else row["tau"],
                    "normalize": cfg.normalize, "seed": seed, "masked_at_start": r(row["masked_fraction"]),
                    "new_nll": r(row["new_nll"]), "new_acc": r(row["new_acc"]),
                    "collision": r(row["old_nll_change_step1"], 6), "old_nll_delta": r(row["old_nll_change"]),
                    "old_acc": r(row["old_acc"]), "final_train_loss": r(row["final_train_loss"])})
    return out


def _run_seed(cfg: EnergyConfig, seed: int, out: pathlib.Path) -> list[dict]:
    s = scale(cfg.scale)
    task, base, _ = base_model(s, cfg.arch, seed=seed)
    sft = task.conflict_train_tokens
    e = np.asarray(energy(base(jnp.asarray(sft)).logits, jnp.asarray(sft)))[:, 1:].ravel()
    before = _scores(base, task)
    rows = []
    for tau in cfg.taus:
        loss_fn = make_energy_loss(EnergyMaskConfig(tau=tau, normalize=cfg.normalize))
        batch = min(32, len(sft))
        first, _ = fit(_copy(base), task, steps=1, batch_size=batch, lr=cfg.lr, split="conflict_train",
                       loss_fn=loss_fn, seed=seed)
        tuned, losses = fit(_copy(base), task, steps=s.sft_steps, batch_size=batch, lr=cfg.lr,
                            split="conflict_train", loss_fn=loss_fn, seed=seed)
        after = _scores(tuned, task)
        rows.append({"tau": tau, "masked_fraction": float(np.mean(e >= tau)), "final_train_loss": losses[-1],
                     **after, "old_nll_change_step1": _scores(first, task)["old_nll"] - before["old_nll"],
                     "old_nll_change": after["old_nll"] - before["old_nll"]})
    result = {"config": dataclasses.asdict(cfg), "seed": seed, "before": before, "runs": rows,
              "energy_mean": float(e.mean()), "tokens": int(e.size), "bands": {"confident": float(np.mean(e < BANDS[0])),
                                                        "forking": float(np.mean((e >= BANDS[0]) & (e <= BANDS[1]))),
                                                        "extreme": float(np.mean(e > BANDS[1]))}}
    jsonio.write_json_atomic(out / "energy.json", result, portable=True, indent=1)
    jsonio.write_json_atomic(out / "energy_hist.json", histogram(e), portable=True, indent=1)
    table = [[f"{r['tau']:g}", r["masked_fraction"], r["new_nll"], r["new_acc"], r["old_nll_change_step1"],
              r["old_nll_change"], r["old_acc"]] for r in rows]
    body = markdown_table(["τ", "masked fraction", "new-task NLL", "new-task accuracy", "old-format NLL Δ (step 1)",
                           "old-format NLL Δ (end)", "old-format accuracy (end)"], table)
    body += (f"\nBase model: new-task NLL {before['new_nll']:.3f}, accuracy {before['new_acc']:.3f}; old-format NLL "
             f"{before['old_nll']:.3f}, accuracy {before['old_acc']:.3f}. {s.sft_steps} SFT steps, lr {cfg.lr:g}, "
             f"normalize={cfg.normalize}, seed {seed}. Energy of the supervised tokens: mean {e.mean():.3f}; bands " + ", ".join(
                 f"{k} {v:.1%}" for k, v in result["bands"].items()) + ".\n")
    write_markdown(out, "energy", "Energy-threshold masking (synthetic SFT)", body)
    _histogram_plot(out, e, cfg.taus)
    return _record_rows(cfg, seed, before, rows, result)
