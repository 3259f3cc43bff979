"""The hooks of the continual-knowledge-learning methods of the TAALM benchmarks (spec taalm.md §5.4, §6, §7): how
θ is built, which loss and optimiser it trains with, and which per-token fields its batches carry.

A method is resolved once by the one method registry, ``runs/method.resolve(name, "ckl")``, from the paper's
table names (``Finetune``, ``Oracle``, ``RHO-1``, ``Mix-review``, ``RecAdam``, ``K-Adapter``, ``TAALM``, composed
with " + ", e.g. ``TAALM + K-Adapter + Mix-review + RecAdam``; ``K-Adapter (dropout 0.1)`` overrides the adapter
dropout, reference 0.9, quirk #14, and ``RHO-1 (taalm_code)`` the selection rule, default faithful, quirk #9).
The functions here read the resolved method's hooks (:class:`CKLMethod`; ``continual/`` sits below ``runs/``,
so the record is named by its fields, not imported):

* token loss ``nll`` (Finetune, §7.1): the plain LM loss, mean NLL over the batch's target tokens (pads excluded
  by default; ``include_pad_targets`` reproduces the reference, quirk #6). K-Adapter's own loss is the
  per-sequence masked mean (TWPPL with w = 1).
* ``oracle`` (§6): TWPPL with weight 1 on the evidence's object tokens and 0 elsewhere.
* ``uniform``: TWPPL with w = 1, i.e. the per-sequence mean NLL (the TWPPL form of Finetune).
* ``taalm`` (§5.4): TWPPL with φ's frozen weights, ``w = φ(x)·m``.
* ``rho1`` (§7.2): ``continual.rho1`` against the frozen θ0, online, same padding (``options.rho_mode``).
* replay ``mix-review`` (§7.3): each batch is concatenated with as many review documents (ratio 1), same loss.
* optimiser ``recadam`` (§7.4): ``continual.recadam`` (really annealing by default) instead of AdamW.
* update ``kadapter`` (§7.5): ``continual.kadapter`` on the frozen base instead of LoRA
  (``options.kadapter_dropout`` overrides its dropout).

Every method starts from the same θ0: the PT model with fresh LoRA adapters (fixed seed, B = 0), or for
K-Adapter the PT model with fresh adapter blocks.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import optax

from cfka_jax.continual.kadapter import KAdapter, KAdapterConfig, adapter_filter, make_kadapter_logits_fn
from cfka_jax.continual.peft import LoRAConfig, apply_lora
from cfka_jax.continual.recadam import RecAdamConfig, recadam
from cfka_jax.continual.rho1 import make_rho1_loss
from cfka_jax.continual.taalm.phi import make_logits_fn
from cfka_jax.continual.taalm.twppl import twppl, twppl_loss
from cfka_jax.train.losses import masked_mean_nll

TWPPL_LOSSES = ("oracle", "uniform", "taalm")
"""The token losses that are TWPPL with per-token weights (:func:`with_token_weights`)."""


class CKLOptions(Protocol):
    rho_mode: str
    kadapter_dropout: float | None


class CKLMethod(Protocol):
    """The fields of a resolved ``runs.method.Method`` the CKL protocols read (its hooks, module docstring)."""

    name: str
    replay: str | None  # None | mix-review
    token_loss: str  # nll | rho1 | oracle | uniform | taalm
    update: str | None  # None (LoRA or the recipe's --update) | kadapter
    optimizer: str  # adamw | recadam
    options: CKLOptions


def mix_review(method: CKLMethod) -> bool:
    """Each batch is concatenated with review documents."""
    return method.replay == "mix-review"


def phi_weighted(method: CKLMethod) -> bool:
    """The loss reads φ's token weights (TAALM), so the run needs a meta-trained φ."""
    return method.token_loss == "taalm"


@dataclasses.dataclass(frozen=True)
class Theta:
    """θ split for training: pure ``logits(train, frozen, batch, key)``, the trainable and frozen pytrees."""

    logits: object
    train: object
    frozen: object


def build_theta(base: nnx.Module, method: CKLMethod, lora: LoRAConfig, kadapter: KAdapterConfig,
                lora_seed: int = 0) -> Theta:
    """θ0 of ``method``: a copy of the PT model ``base`` with fresh LoRA adapters, or inside a K-Adapter."""
    model = nnx.clone(base)
    if method.update == "kadapter":
        if method.options.kadapter_dropout is not None:
            kadapter = dataclasses.replace(kadapter, dropout=method.options.kadapter_dropout)
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


def method_loss(method: CKLMethod, rho_k: float = 0.6):
    """``loss_fn(logits_BSV, batch) -> (loss, targets)`` of ``method`` (module docstring)."""
    if method.token_loss == "rho1":
        return make_rho1_loss(rho_k, method.options.rho_mode)
    if method.token_loss in TWPPL_LOSSES:
        return twppl_loss
    if method.token_loss != "nll":
        raise ValueError(f"method {method.name!r}: token loss {method.token_loss!r} is not a CKL loss")
    return _mean_per_sequence if method.update == "kadapter" else _plain


def method_tx(method: CKLMethod, *, lr: float, total_updates: int, weight_decay: float = 0.01, b1: float = 0.9,
              b2: float = 0.999, eps: float = 1e-8, recadam_reference_groups: bool = False):
    """AdamW (no schedule, no clipping, as the reference's paged AdamW) or RecAdam rescaled to the run."""
    if method.optimizer == "recadam":
        return recadam(RecAdamConfig.rescaled(total_updates, lr, reference_groups=recadam_reference_groups))
    return optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)


def with_token_weights(method: CKLMethod, batch: dict, phi_weights) -> dict:
    """The batch with the ``token_weights`` its loss reads: the object mask (Oracle), φ's weights (TAALM, given
    per row in token space), ones on the targets (Uniform) or nothing."""
    if method.token_loss == "oracle":
        return dict(batch, token_weights=batch["object_mask"])
    if method.token_loss == "taalm":
        return dict(batch, token_weights=phi_weights * batch["target_mask"])
    if method.token_loss == "uniform":
        return dict(batch, token_weights=batch["target_mask"])
    return batch


def rho_reference(theta: Theta):
    """Jitted ``ref_nll(batch)`` of the frozen θ0 (RHO-1's reference)."""
    from cfka_jax.continual.rho1 import reference_nll

    train0 = jax.tree.map(jnp.copy, theta.train)
    fn = jax.jit(lambda train, frozen, batch: reference_nll(theta.logits(train, frozen, batch, None),
                                                            batch["tokens"]))
    return lambda batch: fn(train0, theta.frozen, batch)
