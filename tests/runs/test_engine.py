"""The run engine (cfka_jax/runs/engine.py): ``train_lm`` keeps the whole history in memory, ``finish_run`` writes
``final.json`` from it; a resumed run holds every step once and reproduces the uninterrupted one."""

import functools
import json
import math

import jax
import numpy as np
import pytest

from cfka_jax.runs.engine import (RunHooks, RunMemory, RunObjective, RunUpdate, TrainedRun, best_step, finish_run,
                                  train_lm)
from cfka_jax.runs.folder import RunFolder
from cfka_jax.train.loop import LoopConfig
from cfka_jax.train.optim import OptimConfig
from cfka_jax.train.step import lm_loss
from tests.helpers import batch, tiny_model

OPT = OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=4)
LOOP = LoopConfig(steps=4, log_every=1, eval_every=2, ckpt_every=2, progress=False)
EVAL_BATCH = batch(99)


@functools.partial(jax.jit, static_argnums=1)  # one compilation for every run of the module (equal graphdefs)
def _eval_nll(params, graphdef, rest):
    return lm_loss(params, graphdef, rest, EVAL_BATCH)[0]


def evaluate_factory(graphdef, rest):
    """A deterministic evaluation with one FTA-named metric (exp(−NLL) of a held-out batch) and two others."""

    def evaluate(params, step):
        loss = float(_eval_nll(params, graphdef, rest))
        return {"Original/hFTA": math.exp(-loss), "Original/loss": loss, "Original/n": 3.0}

    return evaluate


def _train(path, batch_at=batch) -> TrainedRun:
    return train_lm(tiny_model(), batch_at, update=RunUpdate(opt=OPT), loop=LOOP, folder=RunFolder(path),
                    hooks=RunHooks(evaluate_factory=evaluate_factory))


def _steps(history):
    return [(r["kind"], r["step"]) for r in history]


def _without_time(history):
    from cfka_jax.train.throughput import WALL_CLOCK

    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in history]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "run"
    return path, _train(path)


def test_history_is_what_metrics_jsonl_holds(run):
    path, trained = run
    assert trained.history == RunFolder(path).metrics.records()
    assert _steps(trained.history) == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2), ("train", 3),
                                       ("train", 4), ("eval", 4)]
    assert trained.step == 4 and [r["step"] for r in trained.evals()] == [0, 2, 4]
    assert trained.history[-1]["Original/loss"] < trained.history[0]["Original/loss"]  # it trained


def test_last_eval_record_is_of_the_returned_parameters(run):
    _, trained = run
    now = evaluate_factory(trained.graphdef, trained.rest)(trained.params, trained.step)
    assert trained.eval_at(4) == now
    assert trained.eval_at(3) == {}


def test_best_step_picks_the_highest_eval_and_keeps_fta_metrics():
    history = [
        {"kind": "eval", "step": 0, "Original/hFTA": 0.1, "Original/sFTA": 0.3, "Original/n": 5.0},
        {"kind": "train", "step": 1, "Original/hFTA": 0.9},  # train records never count
        {"kind": "eval", "step": 2, "Original/hFTA": 0.4, "Original/sFTA": 0.2, "Original/n": 5.0,
         "Original/per/hFTA": 0.7},
        {"kind": "eval", "step": 4, "Original/hFTA": 0.3, "Original/sFTA": 0.5, "Original/n": 5.0},
    ]
    assert best_step(history, "Original/hFTA") == {"best[Original/hFTA]/step": 2,
                                                   "best[Original/hFTA]/Original/hFTA": 0.4,
                                                   "best[Original/hFTA]/Original/sFTA": 0.2}
    assert best_step(history, "Original/sFTA")["best[Original/sFTA]/step"] == 4
    assert best_step(history, "Continual/hFTA") == {}


def test_resumed_run_holds_every_step_once_and_equals_the_uninterrupted_run(run, tmp_path):
    _, full = run

    class Killed(Exception):
        pass

    def dies_at_step_3(t):
        if t == 3:
            raise Killed
        return batch(t)

    # Killed while fetching step 3's batch; the loop checks step t's finite flag after dispatching step t + 1, so
    # step 2 (a checkpoint step, checked at once) is the last one logged and checkpointed.
    with pytest.raises(Killed):
        _train(tmp_path / "run", dies_at_step_3)
    logged = _steps(RunFolder(tmp_path / "run").metrics.records())
    assert ("train", 2) in logged and ("train", 3) not in logged
    resumed = _train(tmp_path / "run")
    assert resumed.history == RunFolder(tmp_path / "run").metrics.records()
    assert _steps(resumed.history) == _steps(full.history)  # every step once, in order
    assert _without_time(resumed.history) == _without_time(full.history)
    for a, b in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(full.params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_finish_run_writes_the_last_eval_record_to_final_json(run):
    path, trained = run

    def never(params, step):
        raise AssertionError("finish_run re-evaluated a step the history already holds")

    result = finish_run(RunFolder(path), never, trained, extra={"method": "naive"})
    on_disk = json.loads((path / "final.json").read_text())
    assert on_disk == result.final == RunFolder(path).final()
    last = trained.evals()[-1]
    assert on_disk["step"] == last["step"] == 4 and on_disk["method"] == "naive"
    assert {k: on_disk[k] for k in last if k not in ("kind", "step")} == {
        k: v for k, v in last.items() if k not in ("kind", "step")}
    best = max(trained.evals(), key=lambda r: r["Original/hFTA"])
    assert on_disk["best[Original/hFTA]/step"] == best["step"]
    assert on_disk["best[Original/hFTA]/Original/hFTA"] == best["Original/hFTA"]
    assert not any(k.startswith("best[Continual/hFTA]") for k in on_disk)  # no such metric in this run
    assert result.history is trained.history and result.params is trained.params


def test_finish_run_evaluates_when_the_history_has_no_final_eval(run, tmp_path):
    _, trained = run
    calls = []

    def evaluate(params, step):
        calls.append(step)
        return evaluate_factory(trained.graphdef, trained.rest)(params, step)

    no_final_eval = TrainedRun(trained.state, trained.graphdef, trained.rest,
                               [r for r in trained.history if r["step"] < 4])
    result = finish_run(RunFolder(tmp_path), evaluate, no_final_eval, extra={})
    assert calls == [4]
    assert result.final == {"step": 4, **trained.eval_at(4), **best_step(no_final_eval.history, "Original/hFTA")}
    assert json.loads((tmp_path / "final.json").read_text()) == result.final


@pytest.mark.parametrize("update", ["full", "lora"])
def test_consume_trains_the_same_and_frees_the_models_buffers(tmp_path, update):
    """``consume=True`` hands a bf16 model's arrays to the run: the same parameters as the copying run, frozen
    leaves kept in bf16 (no float32 master), and the model's own buffers deleted or donated afterwards."""
    import jax.numpy as jnp
    from flax import nnx

    from cfka_jax.models.qwen import QwenConfig, QwenModel
    from cfka_jax.runs.methods import apply_update

    cfg = QwenConfig(model_type="qwen2", vocab_size=37, hidden_size=24, intermediate_size=29, num_hidden_layers=2,
                     num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True, initializer_range=0.2,
                     dtype=jnp.bfloat16)

    def run(path, consume):
        model, trainable = apply_update(QwenModel(cfg, rngs=nnx.Rngs(0)), update, freeze_layers=0, lora_rank=4, seed=0)
        out = train_lm(model, batch, update=RunUpdate(opt=OPT, trainable=trainable),
                       loop=LoopConfig(steps=2, log_every=1, progress=False), folder=RunFolder(path),
                       objective=RunObjective(compute_dtype=jnp.bfloat16), memory=RunMemory(consume=consume))
        return model, out

    _, copied = run(tmp_path / "copy", False)
    model, consumed = run(tmp_path / "consume", True)
    jax.tree.map(np.testing.assert_array_equal, copied.params, consumed.params)
    dtypes = {x.dtype for x in jax.tree.leaves(consumed.params)}
    assert dtypes == ({jnp.dtype("float32")} if update == "full" else {jnp.dtype("float32"), jnp.dtype("bfloat16")})
    assert all(x.is_deleted() for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize("make, match", [
    (lambda: RunUpdate(opt={"peak_lr": 1e-3}), "RunUpdate.opt must be a train.optim.OptimConfig"),
    (lambda: RunUpdate(opt=OPT, trainable="lora"), "RunUpdate.trainable must be callable"),
    (lambda: RunObjective(loss_fn=None), "RunObjective.loss_fn must be callable"),
    (lambda: RunObjective(penalty=1.0), "RunObjective.penalty must be callable"),
    (lambda: RunMemory(guard="none"), "--guard must be one of"),
    (lambda: RunMemory(loss_chunk=-1), "--loss-chunk must be an integer"),
    (lambda: RunMemory(final_checkpoint="some"), "--final-checkpoint must be one of"),
    (lambda: RunMemory(consume=1), "RunMemory.consume must be a bool"),
    (lambda: RunHooks(on_record="tb"), "RunHooks.on_record must be callable"),
])
def test_run_option_groups_refuse_bad_fields(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_train_lm_takes_eight_parameters():
    import inspect

    assert list(inspect.signature(train_lm).parameters) == ["model", "batch_at", "update", "loop", "folder",
                                                            "objective", "memory", "hooks"]
