"""The continual-knowledge-learning recipes of the TAALM benchmarks (spec taalm.md §5.4, §6, §7): how θ is built,
and the context a method's hooks (``continual/method.py``) are called with.

A method is resolved once by the one registry, ``runs/method.resolve(name, "ckl")`` (or ``"temporalwiki"``), from
the paper's table names (``Finetune``, ``Oracle``, ``RHO-1``, ``Mix-review``, ``RecAdam``, ``K-Adapter``,
``TAALM``, composed with " + ", e.g. ``TAALM + K-Adapter + Mix-review + RecAdam``; ``K-Adapter (dropout 0.1)``
overrides the adapter dropout, reference 0.9, quirk #14, and ``RHO-1 (taalm_code)`` the selection rule, default
faithful, quirk #9). The protocols (``continual/ckl.py``) call its hooks with a :class:`CKLContext`:

* no token objective (Finetune, §7.1): the plain LM loss, mean NLL over the batch's target tokens (pads excluded
  by default; ``include_pad_targets`` reproduces the reference, quirk #6); under K-Adapter the per-sequence masked
  mean (TWPPL with w = 1), θ's ``plain_loss``;
* Oracle (§6), Uniform, TAALM (§5.4): TWPPL with the object mask, ones, or φ's frozen weights ``w = φ(x)·m``;
* RHO-1 (§7.2): ``continual.rho1`` against the frozen θ0, online, same padding; LwF: distillation towards θ0;
* Mix-review (§7.3): each batch is concatenated with as many review documents (ratio 1), same loss;
* RecAdam (§7.4): ``continual.recadam`` (really annealing by default) instead of AdamW;
* K-Adapter (§7.5): ``continual.kadapter`` on the frozen base instead of LoRA (its dropout overridable).

Every method starts from the same θ0: the PT model with fresh LoRA adapters (fixed seed, B = 0), or for
K-Adapter the PT model with fresh adapter blocks.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import optax

from cfka_jax.continual.kadapter import KAdapter, KAdapterConfig, adapter_filter, make_kadapter_logits_fn
from cfka_jax.continual.method import Method, Recipe
from cfka_jax.continual.peft import LoRAConfig, apply_lora
from cfka_jax.continual.taalm.phi import make_logits_fn
from cfka_jax.continual.taalm.twppl import twppl
from cfka_jax.train.losses import masked_mean_nll

_CKL_HOOKS = {"documents", "token_objective", "update", "optimizer"}
CKL = Recipe("ckl", hooks=_CKL_HOOKS, provides={"review", "reference", "unpacked_rows", "object_mask",
                                                "phi_weights", "kadapter"})
TEMPORALWIKI = Recipe("temporalwiki", hooks=_CKL_HOOKS, provides=CKL.provides - {"object_mask"})
RECIPES = (CKL, TEMPORALWIKI)
"""LAMA-CKL's evidence carries its object (Oracle's mask); TemporalWiki's diff-set documents do not."""


def _mean_per_sequence(logits_BSV, batch):
    mask = batch["target_mask"].astype(jnp.float32)
    return twppl(logits_BSV, batch["tokens"], jnp.ones_like(mask), mask), jnp.sum(mask[:, 1:])


def _plain(logits_BSV, batch):
    return masked_mean_nll(logits_BSV, batch["tokens"], batch["target_mask"])


@dataclasses.dataclass(frozen=True)
class Theta:
    """θ split for training: pure ``logits(train, frozen, batch, key)``, the trainable and frozen pytrees, and
    the plain token loss of this θ (mean NLL over targets; per-sequence mean under K-Adapter)."""

    logits: object
    train: object
    frozen: object
    plain_loss: Callable = _plain


def kadapter_theta(base: nnx.Module, kadapter: KAdapterConfig) -> Theta:
    """θ0 inside a K-Adapter around a copy of ``base`` (its adapter blocks train)."""
    model = KAdapter(nnx.clone(base), kadapter)
    graphdef, train, frozen, rest = nnx.split(model, adapter_filter(), nnx.Param, ...)
    return Theta(make_kadapter_logits_fn(graphdef, rest), train, frozen, _mean_per_sequence)


@dataclasses.dataclass(frozen=True)
class CKLContext:
    """What a CKL method's hooks read: the base model and K-Adapter config (``update``), θ (``reference``: its
    start values are θ0, ``base_loss``), the review stream (Mix-review) and the schedule of the optimiser hook."""

    base: object = None
    kadapter: KAdapterConfig = KAdapterConfig()
    theta: Theta | None = None
    review_stream: object = None
    total_steps: int = 0
    peak_lr: float = 0.0
    recadam_reference_groups: bool = False

    @property
    def base_loss(self):
        return self.theta.plain_loss

    def review(self):
        if self.review_stream is None:
            raise ValueError("Mix-review needs review documents")
        return self.review_stream

    def reference(self, fn):
        """Jitted ``batch ↦ fn(logits of the frozen θ0, batch)`` (θ0 = θ's trainable values now, copied)."""
        theta, train0 = self.theta, jax.tree.map(jnp.copy, self.theta.train)
        ref = jax.jit(lambda train, frozen, batch: fn(theta.logits(train, frozen, batch, None), batch))
        return lambda batch: ref(train0, theta.frozen, batch)


def build_theta(base: nnx.Module, method: Method, lora: LoRAConfig, kadapter: KAdapterConfig,
                lora_seed: int = 0) -> Theta:
    """θ0 of ``method``: its update hook's θ (K-Adapter), else a copy of the PT model ``base`` with fresh LoRA
    adapters."""
    if method.hooks.update is not None:
        return method.hooks.update(CKLContext(base=base, kadapter=kadapter))
    model = nnx.clone(base)
    apply_lora(model, lora, rngs=nnx.Rngs(lora_seed))
    graphdef, train, frozen, rest = nnx.split(model, nnx.LoRAParam, nnx.Param, ...)
    return Theta(make_logits_fn(graphdef, rest), train, frozen)


def method_objective(method: Method, theta: Theta):
    """``(loss_fn, batch transform)`` of ``method`` on ``theta``: its token objective, or θ's plain loss."""
    if method.hooks.token_objective is None:
        return theta.plain_loss, lambda batch: batch
    return method.hooks.token_objective(CKLContext(theta=theta))


def method_tx(method: Method, *, lr: float, total_updates: int, weight_decay: float = 0.01, b1: float = 0.9,
              b2: float = 0.999, eps: float = 1e-8, recadam_reference_groups: bool = False):
    """The optimiser hook's transformation (RecAdam rescaled to the run), else AdamW (no schedule, no clipping,
    as the reference's paged AdamW)."""
    if method.hooks.optimizer is not None:
        return method.hooks.optimizer(CKLContext(total_steps=total_updates, peak_lr=lr,
                                                 recadam_reference_groups=recadam_reference_groups))
    return optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)


def review_of(method: Method, review):
    """The review stream each batch is concatenated with (the documents hook: Mix-review), or None."""
    if method.hooks.documents is None:
        return None
    return method.hooks.documents(CKLContext(review_stream=review))


def needs_phi(method: Method) -> bool:
    """The method's loss reads φ's token weights (TAALM), so the run needs a meta-trained φ."""
    return "phi_weights" in method.needs
