"""PT/CPT recipes: glue between a model, a batch source, the optimiser, the train step and the loop.

    state, params = train_lm(model, batcher, opt=..., loop=..., out_dir=..., evaluate=..., penalty=..., trainable=...)

The model is split once (``nnx.split(model, nnx.Param, ...)``); everything after that works on the pure ``params``
pytree (convention 5). ``evaluate(params, step)`` returns a flat dict of metrics recorded in the run's JSONL.
"""

from __future__ import annotations

import pathlib
from typing import Callable

from flax import nnx

from cfka_jax.eval.fta import fta
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import TrainState, init_state, make_eval_logits, make_train_step, master_params
from cfka_jax.train.loop import LoopConfig, run_loop


def fta_evaluator(graphdef, rest, eval_sets: dict, *, batch_size: int = 16, stride: int = 1,
                  compute_dtype=None) -> Callable:
    """``evaluate(params, step)`` computing hFTA/sFTA on each named ``(packed, targets)`` set.

    Keys are ``<set>/<metric>``, e.g. ``Original/sFTA``.
    """
    logits_fn = make_eval_logits(graphdef, rest, compute_dtype)

    def evaluate(params, step):
        out = {}
        for name, (packed, targets) in eval_sets.items():
            res = fta(logits_fn, params, packed, targets, batch_size=batch_size, stride=stride)
            out.update({f"{name}/{k}": v for k, v in res.items()})
        return out

    return evaluate


def train_lm(model: nnx.Module, batch_at: Callable[[int], dict], *, opt: OptimConfig, loop: LoopConfig,
             out_dir: pathlib.Path, evaluate_factory: Callable | None = None, penalty=None,
             trainable=None, compute_dtype=None) -> tuple[TrainState, object, object]:
    """Trains ``model`` (resuming from ``out_dir/checkpoints``) and returns (state, graphdef, rest).

    Args:
      model: the NNX model holding the initial parameters.
      batch_at: step → batch (deterministic).
      opt, loop: optimiser and loop settings.
      out_dir: run folder.
      evaluate_factory: ``(graphdef, rest) → evaluate(params, step)``, or None.
      penalty: ``params → scalar`` added to the loss (EWC), or None.
      trainable: ``params → pytree of bools`` (False = frozen), or None.
      compute_dtype: mixed precision (e.g. bfloat16 for a bf16-config model): float32 master parameters, the
        forward/backward pass in ``compute_dtype``, float32 loss (``train/step.py``).
    """
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    if compute_dtype is not None:
        params = master_params(params)
    tx = make_optimizer(opt, trainable(params) if trainable is not None else None)
    step = make_train_step(graphdef, rest, tx, penalty=penalty, compute_dtype=compute_dtype)
    evaluate = evaluate_factory(graphdef, rest) if evaluate_factory is not None else None
    state = run_loop(init_state(params, tx), step, batch_at, cfg=loop, out_dir=out_dir, evaluate=evaluate)
    return state, graphdef, rest
