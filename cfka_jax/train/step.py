"""The shared train step: split once, one jitted pure function of the state, donation, a finite-guard.

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    state = TrainState(params, tx.init(params), step=0)
    step = make_train_step(graphdef, rest, tx, penalty=...)
    state, metrics = step(state, batch)

A batch is a dict with ``tokens`` (int32 ``B S``), ``target_mask`` (``B S``, 1 where the token is a training
target) and optionally ``positions`` (``B S``), ``attention_mask`` (``B S``, 1 keep / 0 pad) and ``segment_ids``
(``B S``, document masking of packed chunks). The loss is the
mean next-token NLL over targets (``train/losses.py``) plus an optional penalty of the parameters (EWC).
If the loss or the gradient norm is not finite the step returns the *previous* state unchanged with
``finite = False``: the caller stops and the last good state (and checkpoint) survive.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from cfka_jax.train.losses import masked_mean_nll

Penalty = Callable[[Any], jax.Array]


class TrainState(NamedTuple):
    """Parameters, optimiser state and the step counter (a pytree)."""

    params: Any
    opt_state: Any
    step: jax.Array


def init_state(params, tx: optax.GradientTransformation) -> TrainState:
    return TrainState(params, tx.init(params), jnp.zeros((), jnp.int32))


def model_logits(graphdef, params, rest, batch: dict) -> jax.Array:
    """Logits of the merged model on a batch (pure in ``params``)."""
    model = nnx.merge(graphdef, params, rest)
    out = model(batch["tokens"], positions_BS=batch.get("positions"), attention_mask_BT=batch.get("attention_mask"),
                segment_ids_BS=batch.get("segment_ids"))
    return out.logits


def lm_loss(params, graphdef, rest, batch: dict):
    """(mean NLL over target tokens, number of targets)."""
    return masked_mean_nll(model_logits(graphdef, params, rest, batch), batch["tokens"], batch["target_mask"])


def _select(pred, new, old):
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), new, old)


def optimizer_update(tx: optax.GradientTransformation, grads, opt_state, params):
    """``tx.update`` under standard dtype promotion.

    optax's Adam bias correction computes ``b1 ** count`` with a Python float and an int32 count, which strict
    promotion (our test setting) rejects; the result is the same float32 either way, so only this third-party
    call is relaxed and our own code stays under the caller's promotion rules.
    """
    with jax.numpy_dtype_promotion("standard"):
        return tx.update(grads, opt_state, params)


def master_params(params):
    """Float32 master copy of the parameters (mixed precision keeps these in the optimiser state)."""
    return jax.tree.map(lambda p: p.astype(jnp.float32) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)


def _cast(params, dtype):
    return jax.tree.map(lambda p: p.astype(dtype) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)


def make_train_step(graphdef, rest, tx: optax.GradientTransformation, *, penalty: Penalty | None = None,
                    donate: bool = True, compute_dtype=None):
    """Builds ``step(state, batch) -> (state, metrics)``, jitted once, state buffers donated.

    With ``compute_dtype`` (e.g. bfloat16) the state holds float32 master parameters (``master_params``) and the
    forward/backward pass runs on a copy cast to ``compute_dtype``; logits, loss, penalty, gradients and the
    optimiser update stay float32 (the gradient flows back through the cast). Use a model whose config ``dtype``
    is the same ``compute_dtype`` so its layers compute in it.

    Metrics: ``loss`` (LM loss), ``penalty``, ``grad_norm`` (of the full gradient), ``targets``, ``finite``.
    """

    def objective(params, batch):
        compute = params if compute_dtype is None else _cast(params, compute_dtype)
        lm, count = lm_loss(compute, graphdef, rest, batch)
        pen = penalty(params) if penalty is not None else jnp.zeros((), jnp.float32)
        return lm + pen, (lm, pen, count)

    def step(state: TrainState, batch: dict):
        (total, (lm, pen, count)), grads = jax.value_and_grad(objective, has_aux=True)(state.params, batch)
        updates, opt_state = optimizer_update(tx, grads, state.opt_state, state.params)
        new = TrainState(optax.apply_updates(state.params, updates), opt_state, state.step + 1)
        gnorm = optax.global_norm(grads)
        finite = jnp.isfinite(total) & jnp.isfinite(gnorm)
        metrics = {"loss": lm, "penalty": pen, "grad_norm": gnorm, "targets": count, "finite": finite}
        return _select(finite, new, state), metrics

    return jax.jit(step, donate_argnums=(0,) if donate else ())


def make_eval_logits(graphdef, rest, compute_dtype=None):
    """Jitted ``logits(params, batch)`` for evaluation (no gradients, no donation); parameters are cast to
    ``compute_dtype`` first when given (mixed precision, as in the train step)."""
    cast = (lambda p: p) if compute_dtype is None else (lambda p: _cast(p, compute_dtype))
    return jax.jit(lambda params, batch: model_logits(graphdef, cast(params), rest, batch))
