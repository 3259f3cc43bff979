"""Energy-threshold masking as a training ``loss_fn``, energy statistics and histograms (spec §5.1, §5.3).

Masking [DERIVED reconstruction; thresholds 1.8 / 1.5 / 1.0 REPORTED]: for each supervised token t the energy
``E_t`` is computed from the **same forward pass's** logits under ``stop_gradient`` (pitfall 23; or read from the
batch with ``energy_source='base'``), ``w_t = 1[E_t < τ]`` and

    loss = Σ_t w_t·CE_t / N_sup,       N_sup = number of supervised tokens (LLaMA-Factory token mean),

or ``Σ_t w_t·CE_t / Σ_t w_t`` with ``normalize='kept'`` (pitfall 22). With ``τ = ∞`` nothing is masked and the
loss is the engine's plain mean NLL bit for bit, under ``jit`` too (``tests/geometry/test_energy.py``).

The loss plugs into the engine as
``make_train_step(..., loss=Loss(loss_fn=make_energy_loss(EnergyMaskConfig(tau=1.8))))``; a batch is the engine's
(``tokens``, ``target_mask`` keyed by target position), plus ``base_energy`` (``[B, S]``, keyed by target position)
for ``energy_source='base'``. :func:`energy_stats` gives the per-step log (masked fraction, mean E, counts per band).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry.force import BANDS, band_counts, energy_from_logprobs
from cfka_jax.shapes import Array, Float
from cfka_jax.train.losses import gold_log_probs, masked_mean_nll, next_token_nll, shifted_log_softmax

NORMALIZE = ("all", "kept")
SOURCES = ("current", "base")


@dataclasses.dataclass(frozen=True)
class EnergyMaskConfig:
    """``tau``: drop tokens with ``E ≥ tau`` (``inf`` keeps all); ``normalize``: ``'all'`` divides by every
    supervised token, ``'kept'`` by the kept ones; ``energy_source``: ``'current'`` (same forward, detached) or
    ``'base'`` (``batch['base_energy']``, computed once with the pre-training model)."""

    tau: float = math.inf
    normalize: str = "all"
    energy_source: str = "current"

    def __post_init__(self):
        if not (self.tau > 0.0):
            raise ValueError(f"tau must be positive (E >= 0 always), got {self.tau}")
        if self.normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {NORMALIZE}, got {self.normalize!r}")
        if self.energy_source not in SOURCES:
            raise ValueError(f"energy_source must be one of {SOURCES}, got {self.energy_source!r}")


def token_energy(logits_BSV: Float[Array, "B S V"], batch: dict, cfg: EnergyMaskConfig) -> Float[Array, "B S-1"]:
    """E of targets 1..S−1 (detached): from these logits, or ``batch['base_energy'][:, 1:]``."""
    if cfg.energy_source == "base":
        return jax.lax.stop_gradient(batch["base_energy"][:, 1:].astype(jnp.float32))
    lp = shifted_log_softmax(jax.lax.stop_gradient(logits_BSV))
    return energy_from_logprobs(lp, batch["tokens"][:, 1:])


def energy_masked_loss(logits_BSV: Float[Array, "B S V"], batch: dict, *, cfg: EnergyMaskConfig
                       ) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """``(loss, count)``: the masked token-mean NLL and its denominator (N_sup, or the kept count).

    ``tau = ∞`` masks nothing, so it *is* the engine's loss (``masked_mean_nll``, the same program bit for bit and
    no energy pass); a finite τ above 2 (E's maximum) keeps every token through the general path.
    """
    if math.isinf(cfg.tau):
        return masked_mean_nll(logits_BSV, batch["tokens"], batch["target_mask"])
    nll = next_token_nll(logits_BSV, batch["tokens"])
    sup = batch["target_mask"][:, 1:].astype(jnp.float32)
    keep = (token_energy(logits_BSV, batch, cfg) < cfg.tau).astype(jnp.float32)
    w = sup * keep
    count = jnp.sum(sup) if cfg.normalize == "all" else jnp.sum(w)
    return jnp.sum(w * nll) / jnp.maximum(count, 1.0), count


def make_energy_loss(cfg: EnergyMaskConfig):
    """The engine ``loss_fn(logits_BSV, batch) -> (loss, count)`` for ``cfg``."""
    return functools.partial(energy_masked_loss, cfg=cfg)


def energy_stats(logits_BSV: Float[Array, "B S V"], batch: dict, cfg: EnergyMaskConfig) -> dict[str, Array]:
    """Per-step log: ``masked_fraction`` (of supervised tokens), ``energy_mean``, the means of the entropy of π and
    of ``aop_kl = −log π_y`` (logged alongside E, §5.1), and token counts per band."""
    e = token_energy(logits_BSV, batch, cfg)
    sup = batch["target_mask"][:, 1:].astype(jnp.float32)
    n = jnp.maximum(jnp.sum(sup), 1.0)
    masked = sup * (e >= cfg.tau).astype(jnp.float32)
    lp = shifted_log_softmax(jax.lax.stop_gradient(logits_BSV))
    entropy = -jnp.sum(jnp.exp(lp) * lp, axis=-1)
    nll = -gold_log_probs(lp, batch["tokens"])
    out = {"masked_fraction": jnp.sum(masked) / n, "energy_mean": jnp.sum(sup * e) / n,
           "entropy_mean": jnp.sum(sup * entropy) / n, "aop_kl_mean": jnp.sum(sup * nll) / n}
    out.update({f"band_{k}": v for k, v in band_counts(e.ravel(), sup.ravel()).items()})
    return out


def energy_evaluator(sets: dict[str, list[dict]], cfg: EnergyMaskConfig):
    """An evaluator factory for the training loop, ``factory(graphdef, rest) -> evaluate(params, step)``, logging
    :func:`energy_stats` (token-weighted over each set's batches) as ``<set>/masked_fraction``, ``<set>/energy_mean``
    and ``<set>/band_*``; batches are the engine's (``tokens``, ``target_mask``, optional ``positions`` /
    ``attention_mask`` / ``base_energy``)."""

    def factory(graphdef, rest):
        from cfka_jax.train.step import model_logits

        stats = jax.jit(lambda p, b: (energy_stats(model_logits(graphdef, p, rest, b), b, cfg),
                                      jnp.sum(b["target_mask"][:, 1:])))

        def evaluate(params, step):
            out = {}
            for name, batches in sets.items():
                parts = [stats(params, b) for b in batches]
                n = sum(float(c) for _, c in parts)
                for k in parts[0][0]:
                    w = [float(s[k]) * (float(c) if not k.startswith("band_") else 1.0) for s, c in parts]
                    out[f"{name}/{k}"] = sum(w) / max(n, 1.0) if not k.startswith("band_") else sum(w)
            return out

        return evaluate

    return factory


def histogram(energies: np.ndarray, *, bins: int = 40) -> dict[str, list[float]]:
    """Counts of ``energies`` on ``bins`` equal bins of [0, 2] (E's range), as lists for JSON."""
    counts, edges = np.histogram(np.asarray(energies, np.float64), bins=bins, range=(0.0, 2.0))
    return {"counts": counts.astype(float).tolist(), "edges": edges.tolist(), "bands": list(BANDS)}
