"""The shared train step: split once, one jitted pure function of the state, donation, a finite guard.

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    state = init_state(params, tx)
    step = make_train_step(graphdef, rest, tx, penalty=ewc_penalty, loss_fn=token_nll_loss)
    state, metrics = step(state, batch, penalty_args)          # penalty_args: e.g. EWC (fisher, anchor, λ)

A batch is a dict with ``tokens`` (int32 ``B S``), ``target_mask`` (``B S``, 1 where the token is a training
target) and optionally ``positions`` (``B S``), ``attention_mask`` (``B S``, 1 keep / 0 pad), ``segment_ids``
(``B S``, document masking of packed chunks) and whatever extra per-token fields a ``loss_fn`` reads (TAALM's
``token_weights``). The objective is ``loss_fn(logits_BSV, batch)`` (default: the mean next-token NLL over targets,
``train/losses.py``) plus an optional ``penalty(params, penalty_args)``. Large penalty operands (the EWC Fisher and
anchor) are *arguments* of the jitted step, not constants baked into the compiled program.

Finite guard: if the loss, the gradient norm or any updated parameter is not finite, the step returns the
*previous* state unchanged with ``finite = False``; the caller stops and the last good state (and checkpoint)
survive.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from cfka_jax.train.losses import masked_mean_nll

Penalty = Callable[[Any, Any], jax.Array]
"""``penalty(params, penalty_args) -> scalar`` added to the loss (float32)."""
LossFn = Callable[[jax.Array, dict], tuple[jax.Array, jax.Array]]
"""``loss_fn(logits_BSV, batch) -> (scalar loss, number of targets)``."""


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


def token_nll_loss(logits_BSV: jax.Array, batch: dict) -> tuple[jax.Array, jax.Array]:
    """The default objective: mean next-token NLL over ``batch['target_mask']`` (``masked_mean_nll``)."""
    return masked_mean_nll(logits_BSV, batch["tokens"], batch["target_mask"])


def lm_loss(params, graphdef, rest, batch: dict, loss_fn: LossFn = token_nll_loss):
    """(loss, number of targets) of the merged model on ``batch``."""
    return loss_fn(model_logits(graphdef, params, rest, batch), batch)


def _select(pred, new, old):
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), new, old)


def all_finite(tree) -> jax.Array:
    """True iff every floating leaf of ``tree`` is finite everywhere."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def optimizer_update(tx: optax.GradientTransformation, grads, opt_state, params):
    """``tx.update`` under standard dtype promotion.

    optax's Adam bias correction computes ``b1 ** count`` with a Python float and an int32 count, which strict
    promotion (our test setting) rejects; the result is the same float32 either way, so only this third-party
    call is relaxed and our own code stays under the caller's promotion rules.
    """
    with jax.numpy_dtype_promotion("standard"):
        return tx.update(grads, opt_state, params)


def cast_floating(params, dtype):
    """``params`` with every floating leaf cast to ``dtype`` (integer leaves unchanged)."""
    return jax.tree.map(lambda p: p.astype(dtype) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)


def master_params(params):
    """Float32 master copy of the parameters (mixed precision keeps these in the optimiser state)."""
    return cast_floating(params, jnp.float32)


def make_train_step(graphdef, rest, tx: optax.GradientTransformation, *, penalty: Penalty | None = None,
                    loss_fn: LossFn = token_nll_loss, donate: bool = True, compute_dtype=None,
                    state_sharding=None):
    """Builds ``step(state, batch, penalty_args=None) -> (state, metrics)``, jitted once, state buffers donated.

    With ``state_sharding`` (a pytree of shardings like the state, ``parallel/rules.tree_shardings``) the new
    state keeps that placement (``out_shardings``); place the state and each batch before calling, and the
    compiler partitions the step (data parallel over the batch rows, FSDP/tensor over the parameters).

    With ``compute_dtype`` (e.g. bfloat16) the state holds float32 master parameters (``master_params``) and the
    forward/backward pass runs on a copy cast to ``compute_dtype``; logits, loss, penalty, gradients and the
    optimiser update stay float32 (the gradient flows back through the cast). Use a model whose config ``dtype``
    is the same ``compute_dtype`` so its layers compute in it.

    Metrics: ``loss`` (the ``loss_fn`` value), ``penalty``, ``grad_norm`` (of the full gradient), ``targets``,
    ``finite`` (loss, gradient norm and every updated parameter finite).
    """

    def objective(params, batch, penalty_args):
        compute = params if compute_dtype is None else cast_floating(params, compute_dtype)
        lm, count = lm_loss(compute, graphdef, rest, batch, loss_fn)
        pen = penalty(params, penalty_args) if penalty is not None else jnp.zeros((), jnp.float32)
        return lm + pen, (lm, pen, count)

    def step(state: TrainState, batch: dict, penalty_args=None):
        grad_fn = jax.value_and_grad(objective, has_aux=True)
        (total, (lm, pen, count)), grads = grad_fn(state.params, batch, penalty_args)
        updates, opt_state = optimizer_update(tx, grads, state.opt_state, state.params)
        new = TrainState(optax.apply_updates(state.params, updates), opt_state, state.step + 1)
        gnorm = optax.tree.norm(grads)
        finite = jnp.isfinite(total) & jnp.isfinite(gnorm) & all_finite(new.params) & all_finite(new.opt_state)
        metrics = {"loss": lm, "penalty": pen, "grad_norm": gnorm, "targets": count, "finite": finite}
        return _select(finite, new, state), metrics

    out = None if state_sharding is None else (state_sharding, None)
    return jax.jit(step, donate_argnums=(0,) if donate else (), out_shardings=out)


def make_eval_logits(graphdef, rest, compute_dtype=None):
    """Jitted ``logits(params, batch)`` for evaluation (no gradients, no donation); parameters are cast to
    ``compute_dtype`` first when given (mixed precision, as in the train step)."""
    cast = (lambda p: p) if compute_dtype is None else (lambda p: cast_floating(p, compute_dtype))
    return jax.jit(lambda params, batch: model_logits(graphdef, cast(params), rest, batch))
