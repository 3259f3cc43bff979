"""The continual-knowledge-learning methods of the TAALM benchmarks (spec taalm.md §5.4, §6, §7): how θ is built,
which loss and optimiser it trains with, and which per-token fields its batches carry.

Methods are named as in the paper's table and compose with " + ": ``Finetune``, ``Oracle``, ``RHO-1``,
``Mix-review``, ``RecAdam``, ``K-Adapter``, ``TAALM`` and e.g. ``TAALM + K-Adapter + Mix-review + RecAdam``;
``K-Adapter (dropout 0.1)`` overrides the adapter dropout (reference 0.9, quirk #14) and ``RHO-1 (taalm_code)``
the selection rule (default faithful, quirk #9).

* Finetune (§7.1): the plain LM loss, mean NLL over the batch's target tokens (pads excluded by default;
  ``include_pad_targets`` reproduces the reference, quirk #6). K-Adapter's own loss is the per-sequence masked
  mean (TWPPL with w = 1).
* Oracle (§6): TWPPL with weight 1 on the evidence's object tokens and 0 elsewhere.
* Uniform: TWPPL with w = 1, i.e. the per-sequence mean NLL (the TWPPL form of Finetune).
* TAALM (§5.4): TWPPL with φ's frozen weights, ``w = φ(x)·m``.
* RHO-1 (§7.2): ``continual.rho1`` against the frozen θ0, online, same padding.
* Mix-review (§7.3): each batch is concatenated with as many review documents (ratio 1), same loss.
* RecAdam (§7.4): ``continual.recadam`` (really annealing by default) instead of AdamW.
* K-Adapter (§7.5): ``continual.kadapter`` on the frozen base instead of LoRA.

Every method starts from the same θ0: the PT model with fresh LoRA adapters (fixed seed, B = 0), or for
K-Adapter the PT model with fresh adapter blocks.

These names are components of the one method registry (``runs/method.py``; ``resolve(name, "ckl").ckl()`` is
the :class:`Method` that :meth:`Method.parse` returns, tested for every table name); :class:`Method` is the record
of switches the CKL protocols (``continual/ckl``) read.
"""

from __future__ import annotations

import dataclasses
import re

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import optax

from cfka_jax.continual.kadapter import KAdapter, KAdapterConfig, adapter_filter, make_kadapter_logits_fn
from cfka_jax.continual.peft import LoRAConfig, apply_lora
from cfka_jax.continual.recadam import RecAdamConfig, recadam
from cfka_jax.continual.rho1 import RHO_MODES, make_rho1_loss
from cfka_jax.continual.taalm.phi import make_logits_fn
from cfka_jax.continual.taalm.twppl import twppl, twppl_loss
from cfka_jax.train.losses import masked_mean_nll

COMPONENTS = ("Finetune", "Oracle", "Uniform", "RHO-1", "Mix-review", "RecAdam", "K-Adapter", "TAALM")
_KADAPTER_DROPOUT = re.compile(r"K-Adapter \(dropout ([0-9]*\.?[0-9]+)\)")
_RHO_MODE = re.compile(r"RHO-1 \((faithful|taalm_code)\)")


@dataclasses.dataclass(frozen=True)
class Method:
    """One row of the table: the token weights, and the switches that compose with them."""

    name: str
    weights: str = "plain"  # plain | oracle | uniform | taalm
    rho: str | None = None
    mix_review: bool = False
    recadam: bool = False
    kadapter: bool = False
    kadapter_dropout: float | None = None  # "K-Adapter (dropout 0.1)": overrides KAdapterConfig.dropout

    @classmethod
    def parse(cls, name: str, *, rho_mode: str = "faithful") -> "Method":
        """``Method`` of a table name such as ``TAALM + K-Adapter`` (module docstring).

        Raises:
            ValueError: an unknown component, or weights (Oracle/TAALM/RHO-1) combined with each other.
        """
        parts = [p.strip() for p in name.split("+")]
        dropout = None
        for i, p in enumerate(parts):
            m = _KADAPTER_DROPOUT.fullmatch(p)
            if m:
                parts[i], dropout = "K-Adapter", float(m.group(1))
            m = _RHO_MODE.fullmatch(p)
            if m:
                parts[i], rho_mode = "RHO-1", m.group(1)
        unknown = [p for p in parts if p not in COMPONENTS]
        if unknown or not parts:
            raise ValueError(f"unknown method component(s) {unknown} in {name!r}; choose from {COMPONENTS}")
        sources = [p for p in parts if p in ("Oracle", "Uniform", "TAALM", "RHO-1")]
        if len(sources) > 1:
            raise ValueError(f"{name!r} combines token-weight sources {sources}")
        if rho_mode not in RHO_MODES:
            raise ValueError(f"rho_mode must be one of {RHO_MODES}, got {rho_mode!r}")
        weights = {"Oracle": "oracle", "Uniform": "uniform", "TAALM": "taalm"}.get(sources[0] if sources else "",
                                                                                  "plain")
        return cls(name, weights, rho_mode if "RHO-1" in parts else None, "Mix-review" in parts,
                   "RecAdam" in parts, "K-Adapter" in parts, dropout)


@dataclasses.dataclass(frozen=True)
class Theta:
    """θ split for training: pure ``logits(train, frozen, batch, key)``, the trainable and frozen pytrees."""

    logits: object
    train: object
    frozen: object


def build_theta(base: nnx.Module, method: Method, lora: LoRAConfig, kadapter: KAdapterConfig,
                lora_seed: int = 0) -> Theta:
    """θ0 of ``method``: a copy of the PT model ``base`` with fresh LoRA adapters, or inside a K-Adapter."""
    model = nnx.clone(base)
    if method.kadapter:
        if method.kadapter_dropout is not None:
            kadapter = dataclasses.replace(kadapter, dropout=method.kadapter_dropout)
        model = KAdapter(model, kadapter)
        graphdef, train, frozen, rest = nnx.split(model, adapter_filter(), nnx.Param, ...)
        return Theta(make_kadapter_logits_fn(graphdef, rest), train, frozen)
    apply_lora(model, lora, rngs=nnx.Rngs(lora_seed))
    graphdef, train, frozen, rest = nnx.split(model, nnx.LoRAParam, nnx.Param, ...)
    return Theta(make_logits_fn(graphdef, rest), train, frozen)


def _mean_per_sequence(logits_BSV, batch):
    mask = batch["target_mask"].astype(jnp.float32)
    return twppl(logits_BSV, batch["tokens"], jnp.ones_like(mask), mask), jnp.sum(mask[:, 1:])


def _plain(logits_BSV, batch):
    return masked_mean_nll(logits_BSV, batch["tokens"], batch["target_mask"])


def method_loss(method: Method, rho_k: float = 0.6):
    """``loss_fn(logits_BSV, batch) -> (loss, targets)`` of ``method`` (module docstring)."""
    if method.rho is not None:
        return make_rho1_loss(rho_k, method.rho)
    if method.weights in ("oracle", "uniform", "taalm"):
        return twppl_loss
    return _mean_per_sequence if method.kadapter else _plain


def method_tx(method: Method, *, lr: float, total_updates: int, weight_decay: float = 0.01, b1: float = 0.9,
              b2: float = 0.999, eps: float = 1e-8, recadam_reference_groups: bool = False):
    """AdamW (no schedule, no clipping, as the reference's paged AdamW) or RecAdam rescaled to the run."""
    if method.recadam:
        return recadam(RecAdamConfig.rescaled(total_updates, lr, reference_groups=recadam_reference_groups))
    return optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)


def with_token_weights(method: Method, batch: dict, phi_weights) -> dict:
    """The batch with the ``token_weights`` its loss reads: the object mask (Oracle), φ's weights (TAALM, given
    per row in token space), ones on the targets (Uniform) or nothing."""
    if method.weights == "oracle":
        return dict(batch, token_weights=batch["object_mask"])
    if method.weights == "taalm":
        return dict(batch, token_weights=phi_weights * batch["target_mask"])
    if method.weights == "uniform":
        return dict(batch, token_weights=batch["target_mask"])
    return batch


def rho_reference(theta: Theta):
    """Jitted ``ref_nll(batch)`` of the frozen θ0 (RHO-1's reference)."""
    from cfka_jax.continual.rho1 import reference_nll

    train0 = jax.tree.map(jnp.copy, theta.train)
    fn = jax.jit(lambda train, frozen, batch: reference_nll(theta.logits(train, frozen, batch, None),
                                                            batch["tokens"]))
    return lambda batch: fn(train0, theta.frozen, batch)
