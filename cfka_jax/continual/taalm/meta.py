"""The TAALM meta-gradient: ``jax.grad`` of the outer loss through θ's inner update (spec taalm.md §4).

For one pair (D, T_D), with θ reset to θ0 and a fresh inner optimiser (§4.3 steps 1–2)::

    w   = φ(D)                                           token weights, graph to φ kept (§3)
    θ_K = inner(θ0; D, w)                                K inner steps on TWPPL(D; θ, w)
    L   = L_solve(θ_K; T_D) = Σ y·nll / (Σ y + 1e-6)     object tokens y of the probe (or all of T_D)
    ∇_φ L                                                second order: through ∇_θ TWPPL and the moments

Two inner forms behind ``MetaConfig.inner_form`` (quirk #1):

* ``adamw2_ref`` (default, the released code): ``n_warmup`` AdamW steps that see ``stop_gradient(w)`` and whose
  θ and moments are then detached, followed by ``n_diff`` differentiated AdamW steps (reference: 1 + 1, lr 2e-4,
  the epsilon placement of ``adamw.py``). The meta-gradient is truncated to the differentiated steps.
* ``sgd1_paper`` (the paper's Algorithm 1): ``n_diff`` SGD steps θ ← θ − α·∇_θ TWPPL, α = ``sgd_lr``.

The meta-batch of pairs is averaged: pairs are padded to common lengths (right padding with explicit masks
leaves every per-pair value unchanged), split into chunks of ``pair_chunk`` pairs that are ``vmap``-ed, and the
chunks are ``lax.scan``-ned with the gradient sum as carry (memory of one chunk). The outer optimiser is a
persistent AdamW on φ's trainable pytree (§4.4), one step per meta-batch. ``remat`` wraps every inner gradient
∇_θ TWPPL (forward + backward of θ) and the outer forward in ``jax.checkpoint``: the outer backward keeps their
inputs only and recomputes them (``bench/taalm.py`` measures what it saves; the ports' block-level ``remat``
field, ``nnx.remat``, cannot be used inside this nested ``jax.grad``: NNX rejects it as a cross-trace mutation).

Model access is through two pure functions (:class:`ModelFns`, built by ``phi.make_logits_fn`` /
``phi.make_weights_fn`` or any hand-written model): ``logits(theta, theta_frozen, batch, key)`` and
``weights(phi, phi_frozen, batch, key)``; ``key=None`` means no dropout.

A pair is ``{"d": D batch, "t": T_D batch}``, each a dict of ``B S`` arrays (B = 1 inside the map; a meta-batch
adds a leading P axis): ``tokens``, ``attention_mask``, ``target_mask`` (token space, ``twppl.target_mask``) and,
for T_D, ``object_mask`` (y). An optional ``object_mask`` on D feeds the diagnostics only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from cfka_jax.continual.taalm.adamw import AdamWConfig, AdamWState, adamw_init, adamw_step, sgd_step
from cfka_jax.continual.taalm.twppl import object_nll, twppl
from cfka_jax.train.step import Loss, Placement, Update, make_train_step

INNER_FORMS = ("adamw2_ref", "sgd1_paper")
OUTER_OBJECTIVES = ("object", "whole")


@dataclasses.dataclass(frozen=True)
class MetaConfig:
    """Inner update and outer objective of the meta-gradient.

    Attributes:
        inner_form: ``adamw2_ref`` | ``sgd1_paper`` (module docstring).
        inner: the inner AdamW (lr 2e-4, betas (0.9, 0.999), eps 1e-8, eps_root 1e-8, wd 0.01).
        n_warmup: detached AdamW steps before the differentiated ones (``adamw2_ref`` only; reference 1).
        n_diff: differentiated inner steps (reference 1).
        sgd_lr: α of ``sgd1_paper`` (not given by the reference; must be tuned).
        outer_objective: ``object`` (L_solve on the probe's object tokens, reference) or ``whole`` (all of T_D).
        remat: ``jax.checkpoint`` each inner gradient and the outer forward (memory for recompute).
        pair_chunk: pairs vmapped together; the meta-batch size must be a multiple of it.
        dropout: LoRA dropout in θ and φ with explicit keys (False: deterministic).
    """

    inner_form: str = "adamw2_ref"
    inner: AdamWConfig = AdamWConfig()
    n_warmup: int = 1
    n_diff: int = 1
    sgd_lr: float = 1e-2
    outer_objective: str = "object"
    remat: bool = False
    pair_chunk: int = 1
    dropout: bool = True

    def __post_init__(self):
        if self.inner_form not in INNER_FORMS:
            raise ValueError(f"inner_form must be one of {INNER_FORMS}, got {self.inner_form!r}")
        if self.outer_objective not in OUTER_OBJECTIVES:
            raise ValueError(f"outer_objective must be one of {OUTER_OBJECTIVES}, got {self.outer_objective!r}")
        if self.n_warmup < 0 or self.n_diff < 1 or self.pair_chunk < 1:
            raise ValueError(f"need n_warmup >= 0, n_diff >= 1, pair_chunk >= 1; got {self.n_warmup}, "
                             f"{self.n_diff}, {self.pair_chunk}")
        if not (math.isfinite(self.sgd_lr) and self.sgd_lr > 0):
            raise ValueError(f"sgd_lr must be a positive number, got {self.sgd_lr}")


class ModelFns(NamedTuple):
    """The two pure model functions the meta-gradient differentiates through."""

    logits: Callable[..., jax.Array]
    weights: Callable[..., jax.Array]


class Operands(NamedTuple):
    """What the meta-gradient needs besides φ's trainable pytree (all passed as jit arguments)."""

    phi_frozen: Any
    theta0: Any
    theta_frozen: Any


def _keys(key, n: int):
    return [None] * n if key is None else list(jax.random.split(key, n))


def inner_update(theta0, theta_frozen, w_BS, d: dict, fns: ModelFns, cfg: MetaConfig, key=None, w_warmup_BS=None):
    """θ_K after the inner steps on TWPPL(D; θ, w) from θ0 with a fresh optimiser (module docstring).

    ``w_warmup_BS`` (default ``w_BS``) are the weights the detached warm-up steps see; passing a φ-independent
    array makes the truncated objective an ordinary function of φ whose exact derivative is this meta-gradient
    (what ``check_grads`` needs).
    """

    def loss(theta, w, k):
        return twppl(fns.logits(theta, theta_frozen, d, k), d["tokens"], w, d["target_mask"])

    grad = jax.grad(loss)
    if cfg.remat:  # the outer backward saves only (θ, w) per inner gradient and recomputes its forward/backward
        grad = jax.checkpoint(grad)
    keys = _keys(key, cfg.n_warmup + cfg.n_diff)
    theta = theta0
    if cfg.inner_form == "sgd1_paper":
        for k in keys[cfg.n_warmup:]:
            theta = sgd_step(theta, grad(theta, w_BS, k), cfg.sgd_lr)
        return theta
    state = adamw_init(theta0)
    w_detached = jax.lax.stop_gradient(w_BS if w_warmup_BS is None else w_warmup_BS)
    for k in keys[:cfg.n_warmup]:
        theta, state = adamw_step(theta, grad(theta, w_detached, k), state, cfg.inner)
    theta, state = jax.lax.stop_gradient((theta, state))
    for k in keys[cfg.n_warmup:]:
        theta, state = adamw_step(theta, grad(theta, w_BS, k), state, cfg.inner)
    return theta


def outer_loss(phi, ops: Operands, pair: dict, fns: ModelFns, cfg: MetaConfig, key=None, phi_warmup=None):
    """L_solve(θ_K(φ); T_D) for one pair (B = 1 or more rows); differentiable in ``phi``.

    ``phi_warmup``: φ parameters whose weights the warm-up steps use (default ``phi``; same gradient at
    ``phi == phi_warmup``, see :func:`inner_update`).

    Returns:
        ``(loss, aux)`` with aux the mean φ weight on D's object tokens and on its other targets (NaN-free: an
        absent ``object_mask`` gives zeros).
    """
    k_phi, k_in, k_out = _keys(key, 3)
    d, t = pair["d"], pair["t"]
    w_BS = fns.weights(phi, ops.phi_frozen, d, k_phi)
    w_warm = None if phi_warmup is None else fns.weights(phi_warmup, ops.phi_frozen, d, k_phi)
    theta = inner_update(ops.theta0, ops.theta_frozen, w_BS, d, fns, cfg, k_in, w_warm)
    logits_fn = jax.checkpoint(fns.logits) if cfg.remat else fns.logits
    y = t["object_mask"] if cfg.outer_objective == "object" else t["target_mask"]
    loss = object_nll(logits_fn(theta, ops.theta_frozen, t, k_out), t["tokens"], y)
    return loss, weight_summary(jax.lax.stop_gradient(w_BS), d)


def weight_summary(w_BS, d: dict) -> dict:
    """Mean weight over D's object-token targets and over its other targets (0 where a set is empty)."""
    m = d["target_mask"].astype(w_BS.dtype)
    obj = d.get("object_mask", jnp.zeros_like(m)).astype(w_BS.dtype) * m
    rest = m - obj
    mean = lambda x: jnp.sum(w_BS * x) / jnp.maximum(jnp.sum(x), jnp.asarray(1.0, w_BS.dtype))  # noqa: E731
    return {"w_object": mean(obj), "w_other": mean(rest)}


def meta_batch_grad(phi, ops: Operands, pairs: dict, fns: ModelFns, cfg: MetaConfig, key=None):
    """Mean over the P pairs of ``(loss, aux, ∇_φ loss)``; pairs carry a leading P axis (P % pair_chunk == 0)."""
    p = jax.tree.leaves(pairs)[0].shape[0]
    c = cfg.pair_chunk
    if p % c:
        raise ValueError(f"meta-batch of {p} pairs is not a multiple of pair_chunk={c}")
    keys = jax.random.split(jax.random.key(0) if key is None else key, p)
    chunks = jax.tree.map(lambda x: x.reshape(p // c, c, *x.shape[1:]), (pairs, keys))
    grad_fn = jax.value_and_grad(outer_loss, has_aux=True)

    def one(pair, k):
        row = jax.tree.map(lambda x: x[None], pair)
        return grad_fn(phi, ops, row, fns, cfg, k if key is not None else None)

    def chunk_sum(chunk):
        (loss, aux), g = jax.vmap(one)(*chunk)
        return jax.tree.map(lambda x: jnp.sum(x, 0), (loss, aux, g))

    def body(total, chunk):
        return jax.tree.map(jnp.add, total, chunk_sum(chunk)), None

    first = jax.tree.map(lambda x: x[0], chunks)
    zero = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(chunk_sum, first))
    total, _ = jax.lax.scan(body, zero, chunks)
    return jax.tree.map(lambda x: x / jnp.asarray(p, x.dtype), total)


class MetaState(NamedTuple):
    """φ's trainable pytree, its persistent outer AdamW state and the outer step."""

    phi: Any
    opt: AdamWState
    step: jax.Array


def init_meta_state(phi) -> MetaState:
    return MetaState(phi, adamw_init(phi), jnp.zeros((), jnp.int32))


def make_meta_step(fns: ModelFns, cfg: MetaConfig, outer: AdamWConfig = AdamWConfig(), *, donate: bool = True):
    """Jitted ``step(state, ops, pairs, key) -> (state, metrics)``: the meta-batch gradient, one outer AdamW
    step on φ — the engine's ``make_train_step`` with this gradient (``value_and_grad``) and this AdamW
    (``update``). A non-finite loss, gradient, update or optimiser moment keeps the previous state
    (``finite = False``). Metrics: ``outer_loss``, ``w_object``, ``w_other``, ``grad_norm``, ``finite``."""

    def value_and_grad(phi, ops: Operands, pairs: dict, key):
        loss, aux, g = meta_batch_grad(phi, ops, pairs, fns, cfg, key if cfg.dropout else None)
        return (loss, {"outer_loss": loss, **aux}), g

    def update(g, opt: AdamWState, phi):
        return adamw_step(phi, g, opt, outer)

    return make_train_step(None, None, None, loss=Loss(value_and_grad=value_and_grad), update=Update(update=update),
                           placement=Placement(donate=donate))
