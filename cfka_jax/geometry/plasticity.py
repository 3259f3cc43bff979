"""Plasticity after CPT, with and without resets, and the transmission-drop vs reset-gain statistic (spec §7.3–§7.5).

* :func:`value_batches`: probe / SFT batches of tokenised biographies whose supervised tokens (``target_mask``,
  keyed by target position) are the value tokens of chosen attributes — the "response tokens" of the Biography
  tasks (spec §2 label masking: forgetting and plasticity score response tokens only).
* :func:`sft_curve`: fine-tune a parameter set on one task for a fixed number of AdamW steps (the engine's jitted
  step, rebuilt only when the architecture changes, run by the engine's loop ``train.loop.run_loop`` in memory: a
  non-finite step stops the curve) and record the probe loss before (``step0_eval``) and after;
  ``plast = L_probe(step0) − L_probe(final)`` (project scalar, §7.3), also the minimum-loss variant.
* The premise of §7.5 (the base model knows task D before CPT): :func:`probe_accuracy`, the greedy next-token
  accuracy on a probe's supervised tokens, against :func:`position_chance`, the accuracy of the best guess that
  sees only the target's position (per column the most frequent supervised token); :func:`knows_task` is
  ``acc ≥ chance + PREMISE_MARGIN · (1 − chance)``.
* :func:`drop_gain` pools points (task D, checkpoint c ≠ base): ``ΔR(D, c) = (R_D(base) − R_D(c)) / R_D(base)``
  against ``gain(D, c) = L_final(c, none) − L_final(c, reset)``, and returns the Spearman ρ with its p-value and n.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry.stats import corr_pvalue, spearman
from cfka_jax.train.losses import masked_mean_nll
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.loop import LoopConfig, run_loop
from cfka_jax.train.step import init_state, make_train_step


def value_batches(split, rows, attributes, *, batch_size: int, pad_id: int, width: int | None = None) -> list[dict]:
    """Batches of the documents ``rows`` of a ``TokenizedSplit``, right-padded to ``width`` (default: longest),
    with ``target_mask`` = 1 on the value tokens ``[idx, idx2)`` of every attribute in ``attributes``."""
    rows = np.asarray(rows)
    docs = [split.doc(int(i)) for i in rows]
    width = width or max(len(d) for d in docs)
    tokens = np.full((len(rows), width), pad_id, np.int32)
    attn = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), np.float32)
    for r, (i, d) in enumerate(zip(rows, docs)):
        tokens[r, :len(d)], attn[r, :len(d)] = d, 1
        for a in attributes:
            mask[r, split.idx[i, a]:split.idx2[i, a]] = 1.0
    return [{"tokens": jnp.asarray(tokens[s:s + batch_size]), "attention_mask": jnp.asarray(attn[s:s + batch_size]),
             "target_mask": jnp.asarray(mask[s:s + batch_size])} for s in range(0, len(rows), batch_size)]


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    """The plasticity fine-tune: AdamW, warm-up then cosine decay to 0, no weight decay, clip 1 (spec §7.3 uses
    lr 2e-5 and a linear schedule over 5 epochs at 1.5B scale; the step count and lr are the scale's)."""

    steps: int = 40
    lr: float = 1e-3
    warmup_fraction: float = 0.05

    def optim(self) -> OptimConfig:
        return OptimConfig(peak_lr=self.lr, min_lr=0.0, warmup_steps=int(self.warmup_fraction * self.steps),
                           total_steps=self.steps, weight_decay=0.0)


class Trainer:
    """Jitted train step and probe loss per graph definition (an untied reset changes the architecture)."""

    def __init__(self, cfg: SFTConfig):
        self.cfg, self.tx = cfg, make_optimizer(cfg.optim())
        self._steps: dict = {}

    def _fns(self, graphdef, rest):
        key = id(graphdef)
        if key not in self._steps:
            from flax import nnx

            def probe_loss(params, batch):
                out = nnx.merge(graphdef, params, rest)(batch["tokens"], attention_mask_BT=batch["attention_mask"])
                loss, count = masked_mean_nll(out.logits, batch["tokens"], batch["target_mask"])
                return loss * count, count

            self._steps[key] = (make_train_step(graphdef, rest, self.tx), jax.jit(probe_loss), graphdef)
        return self._steps[key][:2]

    def probe(self, loss_fn: Callable, params, batches: list[dict]) -> float:
        total = [loss_fn(params, b) for b in batches]
        return float(sum(t[0] for t in total) / max(float(sum(t[1] for t in total)), 1.0))

    def curve(self, graphdef, rest, params, train: list[dict], probe: list[dict]) -> dict:
        """``{L0, L_final, L_min, plast, plast_min}`` of one SFT run (``params`` is copied, not consumed)."""
        return self.fit(graphdef, rest, params, train, probe)[0]

    def fit(self, graphdef, rest, params, train: list[dict], probe: list[dict]) -> tuple[dict, Any]:
        """:meth:`curve` and the fine-tuned parameters (``params`` is copied, not consumed; the returned tree is
        the loop's final state, which nothing donates afterwards)."""
        step, loss_fn = self._fns(graphdef, rest)
        state = init_state(jax.tree.map(jnp.copy, params), self.tx)
        losses = [self.probe(loss_fn, state.params, probe)]
        every = max(1, self.cfg.steps // 4)
        final = run_loop(state, step, lambda t: train[t % len(train)], cfg=LoopConfig(
            steps=self.cfg.steps, log_every=max(1, self.cfg.steps), progress=False),
            state_at=lambda done: done % every == 0 or done == self.cfg.steps,
            on_state=lambda done, s: losses.append(self.probe(loss_fn, s.params, probe))).state
        return {"L0": losses[0], "L_final": losses[-1], "L_min": min(losses), "plast": losses[0] - losses[-1],
                "plast_min": losses[0] - min(losses), "curve": losses}, final.params


PREMISE_MARGIN = 0.5
"""How far above chance the base model's probe accuracy must lie, as a share of the distance from chance to 1."""


def probe_accuracy(loss_net, params, batches: list[dict]) -> float:
    """Greedy next-token accuracy over the supervised tokens (``target_mask``, keyed by target position) of
    ``batches``: token s counts as right when ``argmax logits[s − 1] == tokens[s]``. ``loss_net(params, tokens,
    attention_mask) -> logits [B, S, V]`` (jitted by the caller).

    Raises:
      ValueError: the batches hold no supervised token.
    """
    right = total = 0.0
    for b in batches:
        logits = loss_net(params, b["tokens"], b["attention_mask"])
        pred = np.asarray(jnp.argmax(logits[:, :-1], axis=-1))
        mask = np.asarray(b["target_mask"])[:, 1:]
        right += float(np.sum((pred == np.asarray(b["tokens"])[:, 1:]) * mask))
        total += float(np.sum(mask))
    if total == 0:
        raise ValueError("probe_accuracy: the probe batches hold no supervised token")
    return right / total


def position_chance(tokens: np.ndarray, mask: np.ndarray) -> float:
    """The accuracy of the best position-only guess on the supervised tokens of ``tokens [n, S]`` (``mask`` keyed
    by target position): ``Σ_s max_v #{rows: tokens[:, s] = v, mask = 1} / Σ mask``.

    Raises:
      ValueError: no supervised token, or shapes that differ.
    """
    tokens, mask = np.asarray(tokens), np.asarray(mask) > 0
    if tokens.shape != mask.shape or not mask.any():
        raise ValueError(f"position_chance: tokens {tokens.shape} and mask {mask.shape} must match and mark at "
                         "least one supervised token")
    best = sum(int(np.bincount(tokens[mask[:, s], s]).max()) for s in range(tokens.shape[1]) if mask[:, s].any())
    return best / int(mask.sum())


def knows_task(acc: float, chance: float, margin: float = PREMISE_MARGIN) -> bool:
    """The premise: ``acc ≥ chance + margin · (1 − chance)``."""
    return acc >= chance + margin * (1.0 - chance)


def drop_gain(r_base: dict, r_ckpt: dict, final_none: dict, final_reset: dict) -> dict:
    """Spearman of ``ΔR`` against the reset gain over the pooled points.

    Args:
      r_base: ``{task: R_D(base)}``.
      r_ckpt: ``{(task, c): R_D(c)}`` (the ΔR source: the task's own probe, the bio probe, or a pooled mean).
      final_none / final_reset: ``{(task, c): L_probe_final}`` without / with the reset.
    """
    keys = sorted(r_ckpt)
    drop = np.asarray([(r_base[d] - r_ckpt[(d, c)]) / r_base[d] for d, c in keys])
    gain = np.asarray([final_none[k] - final_reset[k] for k in keys])
    rho = spearman(drop, gain)
    return {"rho": rho, "p": corr_pvalue(rho, len(keys)), "n": len(keys), "drop": drop.tolist(),
            "gain": gain.tolist(), "points": [list(map(str, k)) for k in keys]}
