"""The one train step: split once, one jitted pure function of the state, donation, a finite guard.

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    state = init_state(params, tx)
    step = make_train_step(graphdef, rest, tx, loss=Loss(penalty=ewc_penalty, loss_fn=token_nll_loss))
    state, metrics = step(state, batch, penalty_args)          # penalty_args: e.g. EWC (fisher, anchor, λ)

A batch is a dict with ``tokens`` (int32 ``B S``), ``target_mask`` (``B S``, 1 where the token is a training
target) and optionally ``positions`` (``B S``), ``attention_mask`` (``B S``, 1 keep / 0 pad), ``segment_ids``
(``B S``, document masking of packed chunks) and whatever extra per-token fields a ``loss_fn`` reads (TAALM's
``token_weights``). The objective is ``loss_fn(logits_BSV, batch)`` (default: the mean next-token NLL over targets,
``train/losses.py``) plus an optional ``penalty(params, penalty_args)``. Large penalty operands (the EWC Fisher and
anchor) are *arguments* of the jitted step, not constants baked into the compiled program.

Every trainer of the package is this builder with a different hook (one program shape, one guard). The builder
takes the model, the optimiser and three small option groups, each a frozen dataclass checked on construction:

* :class:`Loss`, what is differentiated: the language-model objective above (``loss_fn``, ``penalty``,
  ``compute_dtype``), or ``objective(params, *inputs) -> (loss, metrics)``, any differentiable function of the
  trainable pytree and the step's inputs (CKL's θ with its frozen half and a dropout key, ``continual/ckl.py``;
  the step is then ``step(state, *inputs)``), or ``value_and_grad(params, *inputs) -> ((loss, metrics), grads)``,
  a gradient that is not ``jax.grad`` of one function (TAALM's meta-gradient, summed over chunks of pairs by a
  scan, ``continual/taalm/meta.py``);
* :class:`Update`, how the gradient becomes the new state: ``update(grads, opt_state, params) -> (params,
  opt_state)`` instead of the optax ``tx`` (TAALM's hand-written AdamW); ``trainable`` (a pytree of bools) and
  ``transform`` (an optax transformation after ``tx``) change the optimiser (``step.tx`` is then the one to build
  the state with); the finite ``guard``; ``accumulate`` micro-batches per update;
* :class:`Placement`, where the state lives: ``donate``, ``state_sharding`` (a mesh), ``ensemble="vmap" | "map"``
  (the same step over a leading member axis E, ``train/ensemble.py``) and ``shared_batch``.

Finite guard: if the loss, the gradient norm, any updated parameter or any optimiser-state leaf is not finite, the
step returns the *previous* state unchanged with ``finite = False``; the caller (``train/loop.run_loop``) stops
and the last good state (and checkpoint) survive. Keeping the previous state while the new one is checked costs
one state-sized temporary (``guard="state"``: 12 B per trained parameter with AdamW, the largest temporary of a
full-update step). ``guard="gradient"`` rolls back the same cases with no second copy: it first evaluates the
update only inside finiteness reductions (``all_finite(update(...))``, fused by XLA into the optimiser arithmetic,
nothing state-sized stored), then runs the update under ``lax.cond`` in place in the donated buffers. A non-finite
loss, gradient, or update of a finite gradient (an infinite learning rate) returns the previous state unchanged
under either guard, and on finite steps the two give bit-identical states; the cost of ``"gradient"`` is the
optimiser's elementwise arithmetic twice.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from cfka_jax.train.accumulate import accumulated, check_accumulate
from cfka_jax.train.losses import chunked_masked_mean_nll, masked_mean_nll, tiled_masked_mean_nll
from cfka_jax.train.optim import masked_tx, row_mask, trains

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


token_nll_loss.mean_over = "targets"  # a mean over target tokens: accumulation weights micro-batches by them


VOCAB_TILE = 8192
"""Columns of the head's weight one tile of :func:`chunked_token_nll_loss` holds (a ``[chunk, 8192]`` float32
block of logits is 8 MiB at 256 rows)."""


def chunked_token_nll_loss(chunk: int, vocab_tile: int = VOCAB_TILE) -> LossFn:
    """The default objective computed from the final hidden states, ``chunk`` predicting rows at a time: the same
    mean NLL without the ``[B, S, V]`` logits, log-softmax and their gradients in memory (the logits buffers
    dominate a train step's temporaries at real vocabularies). The returned loss is marked ``on_hidden``:
    :func:`lm_loss` calls it as ``loss(final_hidden_BSD, head, batch)`` with the model's ``head_view()``
    (``models/layers.HeadView``); the model's full logits are then never used, and the compiler drops them.

    When the head is one plain matrix (a tied embedding, a bias-free untied linear) the vocabulary is tiled as
    well (``losses.tiled_masked_mean_nll``, ``vocab_tile`` columns at a time, a custom gradient that writes the
    head's gradient tile by tile): no copy of the head's weight in any dtype is held, forward or backward.
    Otherwise (an adapted head) each chunk calls the head (``losses.chunked_masked_mean_nll``)."""
    for name, value in (("loss chunk", chunk), ("vocab tile", vocab_tile)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer (rows per chunk / columns per tile), got {value!r}")

    def loss(final_BSD, head, batch: dict):
        tokens, mask = batch["tokens"], batch["target_mask"]
        weight = getattr(head, "weight", None)
        if weight is not None:
            return tiled_masked_mean_nll(final_BSD, weight, tokens, mask, layout=head.layout,
                                         compute_dtype=head.dtype, row_chunk=chunk, vocab_tile=vocab_tile)
        return chunked_masked_mean_nll(final_BSD, head, tokens, mask, chunk)

    loss.on_hidden = True
    loss.chunk = chunk
    loss.mean_over = "targets"
    return loss


def lm_loss(params, graphdef, rest, batch: dict, loss_fn: LossFn = token_nll_loss):
    """(loss, number of targets) of the merged model on ``batch``: ``loss_fn(logits, batch)``, or for a loss marked
    ``on_hidden`` (:func:`chunked_token_nll_loss`) ``loss_fn(final_hidden, head, batch)`` where ``head`` is the
    model's ``head_view()`` (its ``_head`` for a model without one)."""
    if getattr(loss_fn, "on_hidden", False):
        model = nnx.merge(graphdef, params, rest)
        out = model(batch["tokens"], positions_BS=batch.get("positions"),
                    attention_mask_BT=batch.get("attention_mask"), segment_ids_BS=batch.get("segment_ids"))
        head = model.head_view() if hasattr(model, "head_view") else model._head
        return loss_fn(out.final_hidden, head, batch)
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


BLOCKS = "layers"
"""The attribute of a ``models.layers.DecoderLM`` holding its blocks (looped list or one stacked block)."""


def compute_params(params, dtype, keep: tuple[str, ...] = (BLOCKS,)):
    """The parameters a mixed-precision step runs on: every floating leaf cast to ``dtype`` except the top-level
    entries named in ``keep``, whose modules cast them to the model's ``cfg.dtype`` where they use them: the blocks
    (``params[BLOCKS]``: each block inside its own call, ``models/layers.forward_decoder``'s ``param_dtype``) and,
    as the model names them (``DecoderLM.cast_on_use``), the input embedding and a plain head. The same loss and
    gradients as casting everything up front (use a model whose ``cfg.dtype`` is ``dtype``; a tied embedding's
    lookup and head gradients are summed in float32 instead of ``dtype``), without a ``dtype`` copy of each held
    from the forward to the backward pass (with ``scan_layers`` and ``remat`` only one block's copy exists at a
    time; the tiled loss casts one tile of the head at a time)."""
    if not hasattr(params, "items") or not any(k in params for k in keep):
        return cast_floating(params, dtype)
    return type(params)({k: v if k in keep else cast_floating(v, dtype) for k, v in params.items()})


def cast_on_use(graphdef, params, rest) -> tuple[str, ...]:
    """The top-level parameter names the merged model casts itself (``DecoderLM.cast_on_use``; the blocks only for
    a model without that method)."""
    model = nnx.merge(graphdef, params, rest)
    return tuple(model.cast_on_use()) if hasattr(model, "cast_on_use") else (BLOCKS,)


def master_params(params):
    """Float32 master copy of the parameters (mixed precision keeps these in the optimiser state)."""
    return cast_floating(params, jnp.float32)


ENSEMBLE_MODES = ("vmap", "map")


def lm_objective(graphdef, rest, *, loss_fn: LossFn = token_nll_loss, penalty: Penalty | None = None,
                 compute_dtype=None):
    """``objective(params, batch, penalty_args=None) -> (lm + penalty, metrics)`` of the merged model.

    With ``compute_dtype`` the forward/backward pass runs on the (float32 master) parameters cast to it
    (:func:`compute_params`; the gradient flows back through the cast); the loss and the penalty stay float32. Metrics: ``loss`` (the
    ``loss_fn`` value), ``penalty`` (0 without one), ``targets``.
    """

    def objective(params, batch, penalty_args=None):
        compute = (params if compute_dtype is None
                   else compute_params(params, compute_dtype, cast_on_use(graphdef, params, rest)))
        lm, count = lm_loss(compute, graphdef, rest, batch, loss_fn)
        pen = penalty(params, penalty_args) if penalty is not None else jnp.zeros((), jnp.float32)
        return lm + pen, {"loss": lm, "penalty": pen, "targets": count}

    return objective


def optax_update(tx: optax.GradientTransformation):
    """``update(grads, opt_state, params) -> (params, opt_state)`` of an optax transformation."""

    def update(grads, opt_state, params):
        updates, opt_state = optimizer_update(tx, grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return update


GUARDS = ("state", "gradient")
"""Finite-guard modes of :func:`make_train_step` (module docstring)."""


def trainable_value_and_grad(objective: Callable, trainable) -> Callable:
    """``value_and_grad(params, *inputs)`` of ``objective`` differentiated in the trainable leaves only
    (``trainable``: a pytree of bools like the parameters): the frozen leaves enter as constants, so the backward
    pass never computes (nor holds) their gradients, and the returned gradient has exact zeros there. The trainable
    leaves' gradients are those of ``jax.value_and_grad(objective)`` to float32 rounding (the smaller program
    fuses differently: ulp-level differences in a few entries). A leaf's mask may be a row mask
    (``optim.trains``: the blocks of a scanned model, some frozen): the leaf is differentiated and its frozen rows'
    gradients are set to exact zeros."""

    mask, treedef = jax.tree.flatten(trainable)  # the mask's leaves sit where the parameters' leaves (or their
    # wrappers, e.g. nnx.Param nodes of an nnx.State) are: split the parameters up to its structure
    trained = [trains(m) for m in mask]

    def value_and_grad(params, *inputs):
        parts = treedef.flatten_up_to(params)

        def of_trained(sub):
            # fresh wrappers (e.g. nnx.Param nodes) for the frozen leaves, made at this trace level: nnx's lifted
            # transforms (a block's nnx.remat) refuse variables of an outer trace
            it, frozen = iter(sub), iter(jax.tree.map(lambda x: x, [x for x, t in zip(parts, trained) if not t]))
            return objective(treedef.unflatten([next(it) if t else next(frozen) for t in trained]), *inputs)

        out, grads = jax.value_and_grad(of_trained, has_aux=True)([x for x, t in zip(parts, trained) if t])
        it = iter(grads)
        return out, treedef.unflatten([jax.tree.map(functools.partial(row_mask, m), next(it)) if t
                                       else jax.tree.map(jnp.zeros_like, x) for x, m, t in zip(parts, mask, trained)])

    return value_and_grad


def _update_finite(update, grads, opt_state, params) -> jax.Array:
    """True iff ``update(grads, opt_state, params)`` gives finite parameters and a finite optimiser state.

    The leaves' finiteness masks are AND-ed per shape before any reduction, so a parameter, its moments and its
    update (same shape) meet in one elementwise expression with one reduction, which XLA fuses with the optimiser's
    arithmetic: nothing leaf-sized is stored (one reduction per leaf kept a leaf's new moments alive: at the
    Qwen2.5-0.5B shape two embedding-sized temporaries, 1.0 GiB)."""
    new_params, new_opt_state = update(grads, opt_state, params)
    by_shape: dict[tuple, jax.Array] = {}
    for x in jax.tree.leaves((new_params, new_opt_state)):
        if jnp.issubdtype(x.dtype, jnp.floating):
            ok = jnp.isfinite(x)
            by_shape[x.shape] = ok if x.shape not in by_shape else by_shape[x.shape] & ok
    return jnp.all(jnp.stack([jnp.all(ok) for ok in by_shape.values()])) if by_shape else jnp.asarray(True)


def _pure_step(value_and_grad, update, guard: str = "state"):
    """The unjitted step: gradient, update, finite guard (module docstring)."""
    if guard not in GUARDS:
        raise ValueError(f"guard must be one of {GUARDS}, got {guard!r}")

    def step(state, *inputs):  # state: (params, opt_state, step), a TrainState or any 3-field NamedTuple
        params0, opt_state0, count = state
        (total, metrics), grads = value_and_grad(params0, *inputs)
        with jax.numpy_dtype_promotion("standard"):  # frozen bf16 leaves' zero gradients beside float32 ones
            gnorm = optax.tree.norm(grads).astype(jnp.float32)
        inputs_ok = jnp.isfinite(total) & jnp.isfinite(gnorm)

        def updated(_):
            params, opt_state = update(grads, opt_state0, params0)
            return type(state)(params, opt_state, count + 1)

        if guard == "state":
            new = updated(None)
            finite = inputs_ok & all_finite(new[0]) & all_finite(new[1])
            return _select(finite, new, state), {**metrics, "grad_norm": gnorm, "finite": finite}
        # "gradient": decide first, then update in place. The update is evaluated twice: here only inside
        # finiteness reductions (XLA fuses the elementwise optimiser arithmetic into them, so no new state is
        # materialised), then under lax.cond in the donated buffers when it is finite.
        finite = jax.lax.cond(inputs_ok, lambda _: _update_finite(update, grads, opt_state0, params0),
                              lambda _: jnp.asarray(False), None)
        new = jax.lax.cond(finite, updated, lambda _: state, None)
        return new, {**metrics, "grad_norm": gnorm, "finite": finite}

    return step


def _over_members(lone, mode: str, shared_batch: bool):
    """``lone`` (a jitted one-member step) over a leading member axis E of the state (and of the inputs unless
    ``shared_batch``): ``jax.vmap`` (batched kernels) or ``lax.map`` (the members in turn, unbatched kernels)."""
    if mode not in ENSEMBLE_MODES:
        raise ValueError(f"ensemble must be one of {ENSEMBLE_MODES} or None, got {mode!r}")
    if mode == "vmap":
        return lambda state, *inputs: jax.vmap(lone, in_axes=(0, *[None if shared_batch else 0] * len(inputs)))(
            state, *inputs)
    if shared_batch:
        return lambda state, *inputs: jax.lax.map(lambda s: lone(s, *inputs), state)
    return lambda state, *inputs: jax.lax.map(lambda si: lone(si[0], *si[1]), (state, inputs))


@dataclasses.dataclass(frozen=True)
class Loss:
    """What a step differentiates (:func:`make_train_step`'s ``loss``).

    The language-model objective (``lm_objective``, inputs ``(batch, penalty_args=None)``) is
    ``loss_fn(logits_BSV, batch) + penalty(params, penalty_args)``, run in ``compute_dtype`` when given (float32
    master parameters cast on use, float32 loss; use a model whose config ``dtype`` is the same). A custom
    ``objective(params, *inputs) -> (loss, metrics)`` replaces it (``penalty`` / ``compute_dtype`` then belong
    inside it), and ``value_and_grad(params, *inputs) -> ((loss, metrics), grads)`` replaces
    ``jax.value_and_grad(objective, has_aux=True)`` (a gradient that is not ``jax.grad`` of one function).

    Raises:
      ValueError: naming the field, for a non-callable hook or ``objective`` together with ``penalty`` /
        ``compute_dtype``.
    """

    loss_fn: LossFn = token_nll_loss
    penalty: Penalty | None = None
    compute_dtype: Any = None
    objective: Callable | None = None
    value_and_grad: Callable | None = None

    def __post_init__(self):
        if not callable(self.loss_fn):
            raise ValueError(f"Loss.loss_fn must be callable (logits_BSV, batch) -> (loss, count), got "
                             f"{self.loss_fn!r}")
        for name in ("penalty", "objective", "value_and_grad"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"Loss.{name} must be callable or None, got {value!r}")
        if self.objective is not None and (self.penalty is not None or self.compute_dtype is not None):
            raise ValueError("Loss.penalty and Loss.compute_dtype belong to the language-model objective; fold them "
                             "into the Loss.objective you pass")

    @property
    def custom(self) -> bool:
        """True when the step runs a given ``objective`` / ``value_and_grad`` instead of the language model's."""
        return self.objective is not None or self.value_and_grad is not None


@dataclasses.dataclass(frozen=True)
class Update:
    """How a gradient becomes the new state (:func:`make_train_step`'s ``update``).

    ``update(grads, opt_state, params) -> (params, opt_state)`` replaces the optax ``tx`` (``optax_update``);
    ``trainable`` (a pytree of bools like the parameters: frozen leaves get exactly zero updates through
    ``optim.masked_tx`` and no gradient, :func:`trainable_value_and_grad`; a custom ``Loss.value_and_grad`` is
    used as given) and ``transform`` (an optax transformation chained after ``tx``) change the optax ``tx``: build
    the state from ``step.tx`` then. ``guard``: the finite guard, ``"state"`` or ``"gradient"`` (module docstring:
    the second holds no second copy of the state). ``accumulate``: split the first input (the batch) into this
    many micro-batches and run one optimiser update on their combined gradient (``train/accumulate.py``: a
    ``lax.scan``, one micro-batch's activations in memory); the language-model objective weights them by their
    target tokens when ``loss_fn.mean_over`` is ``"targets"`` (the default NLL, equal to the large batch to float32
    rounding), else equally (a mean over rows, e.g. TWPPL); a custom objective is weighted equally.

    Raises:
      ValueError: naming the field: ``guard`` not in :data:`GUARDS`, ``accumulate`` not an integer >= 1, a
        non-callable ``update``, or ``trainable`` / ``transform`` beside a custom ``update``.
    """

    update: Callable | None = None
    trainable: Any = None
    transform: optax.GradientTransformation | None = None
    guard: str = "state"
    accumulate: int = 1

    def __post_init__(self):
        if self.guard not in GUARDS:
            raise ValueError(f"Update.guard must be one of {GUARDS}, got {self.guard!r}")
        check_accumulate(self.accumulate)
        if self.update is not None and not callable(self.update):
            raise ValueError(f"Update.update must be callable (grads, opt_state, params) -> (params, opt_state), "
                             f"got {self.update!r}")
        if self.update is not None and (self.transform is not None or self.trainable is not None):
            raise ValueError("Update.trainable / Update.transform change an optax tx; with a custom Update.update, "
                             "apply them in it")


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the step's state lives and how it is compiled (:func:`make_train_step`'s ``placement``).

    ``donate``: donate the state buffers. ``state_sharding``: a pytree of shardings like the state
    (``parallel/rules.tree_shardings`` for a ``Mesh``): the new state keeps that placement (``out_shardings``);
    place the state and each batch before calling, and the compiler partitions the step (data parallel over the
    batch rows, FSDP/tensor over the parameters). ``ensemble``: None (one model), ``"vmap"`` or ``"map"``: the step
    over a leading member axis E of the state (member e is the same function of its state and its inputs as a lone
    run, to float32 rounding: batched kernels, and a step compiled as a loop body, accumulate and fuse
    differently). ``shared_batch``: every member reads the same inputs (no E axis on them).

    Raises:
      ValueError: naming the field: ``ensemble`` not None nor in :data:`ENSEMBLE_MODES`, a non-bool ``donate`` /
        ``shared_batch``.
    """

    donate: bool = True
    state_sharding: Any = None
    ensemble: str | None = None
    shared_batch: bool = False

    def __post_init__(self):
        if self.ensemble is not None and self.ensemble not in ENSEMBLE_MODES:
            raise ValueError(f"Placement.ensemble must be one of {ENSEMBLE_MODES} or None, got {self.ensemble!r}")
        for name in ("donate", "shared_batch"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Placement.{name} must be a bool, got {getattr(self, name)!r}")


def make_train_step(graphdef, rest, tx: optax.GradientTransformation | None, *, loss: Loss = Loss(),
                    update: Update = Update(), placement: Placement = Placement()):
    """Builds ``step(state, *inputs) -> (state, metrics)``, jitted once, state buffers donated.

    Args:
      graphdef, rest: the model (``nnx.split``) of the default language-model objective (``lm_objective``:
        ``step(state, batch, penalty_args=None)``); unused (may be None) with ``loss.objective`` /
        ``loss.value_and_grad``.
      tx: the optax optimiser; unused (may be None) with ``update.update``.
      loss: :class:`Loss`, what is differentiated (default: the mean next-token NLL of the model, no penalty).
      update: :class:`Update`, how the gradient becomes the new state (default: ``tx``, every leaf trained, the
        ``"state"`` guard, one micro-batch).
      placement: :class:`Placement`, donation, sharding and the ensemble axis (default: one model, donated).

    Metrics: the objective's (``loss``, ``penalty``, ``targets`` for the default), ``grad_norm`` (of the full
    gradient) and ``finite`` (module docstring).
    """
    trainable = update.trainable
    weight_key = ("targets" if not loss.custom and getattr(loss.loss_fn, "mean_over", None) == "targets" else None)
    value_and_grad = loss.value_and_grad
    if value_and_grad is None:
        objective = loss.objective
        if objective is None:
            objective = lm_objective(graphdef, rest, loss_fn=loss.loss_fn, penalty=loss.penalty,
                                     compute_dtype=loss.compute_dtype)
        value_and_grad = (jax.value_and_grad(objective, has_aux=True) if trainable is None
                          else trainable_value_and_grad(objective, trainable))
    apply = update.update
    if apply is None:
        if tx is None:
            raise ValueError("make_train_step needs an optax tx or an Update.update function")
        if update.transform is not None or trainable is not None:
            tx = optax.chain(tx, update.transform) if update.transform is not None else tx
            tx = masked_tx(tx, trainable) if trainable is not None else tx
        apply = optax_update(tx)
    step = _pure_step(accumulated(value_and_grad, update.accumulate, weight_key=weight_key), apply, update.guard)
    if placement.ensemble is not None:
        step = _over_members(jax.jit(step), placement.ensemble, placement.shared_batch)
    out = None if placement.state_sharding is None else (placement.state_sharding, None)
    jitted = jax.jit(step, donate_argnums=(0,) if placement.donate else (), out_shardings=out)
    jitted.tx = tx
    return jitted


def make_eval_logits(graphdef, rest, compute_dtype=None):
    """Jitted ``logits(params, batch)`` for evaluation (no gradients, no donation); parameters are cast to
    ``compute_dtype`` first when given (mixed precision, as in the train step)."""
    cast = (lambda p: p) if compute_dtype is None else (lambda p: cast_floating(p, compute_dtype))
    return jax.jit(lambda params, batch: model_logits(graphdef, cast(params), rest, batch))
