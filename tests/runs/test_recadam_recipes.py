"""RecAdam through ``runs/engine.train_lm`` (#21: every optimiser usable by every recipe where it makes sense): the
registry lets Biography, corpus CPT and KnowEdit run it, a train_lm run equals the RecAdam update written out by
hand (clip → RecAdam on the trainable leaves), frozen leaves stay put, and the bad combinations are refused before
anything is built, naming the flag."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from cfka_jax.continual.recadam import RecAdamConfig, recadam
from cfka_jax.experiments import corpus_cpt as cc
from cfka_jax.experiments import knowedit as ke
from cfka_jax.runs.engine import RunUpdate, train_lm
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.method import resolve
from cfka_jax.runs.methods import apply_update, optimizer_core
from cfka_jax.runs.specs import CPTSpec
from cfka_jax.train.loop import LoopConfig
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import lm_loss
from tests.helpers import batch, tiny_model
from tests.tolerances import F32

OPT = OptimConfig(peak_lr=3e-2, min_lr=1e-3, warmup_steps=2, total_steps=6, clip_norm=0.5)
LOOP = LoopConfig(steps=6, log_every=1, ckpt_every=0, progress=False)


@pytest.mark.parametrize("recipe", ["biography", "corpus", "knowedit"])
def test_the_train_lm_recipes_resolve_recadam_and_compose_it(recipe):
    m = resolve("stoc + RecAdam", recipe)
    assert (m.replay, m.optimizer) == ("stoc", "recadam")
    with pytest.raises(ValueError, match=f"kadapter.*not available in the {recipe} recipe"):
        resolve("K-Adapter", recipe)
    with pytest.raises(ValueError, match="both set the optimizer hook"):
        resolve("recadam + RecAdam", recipe)
    if recipe != "knowedit":  # GPM's projection follows any optimiser core: a hook of its own
        assert resolve("recadam + gpm", recipe).hooks.filled() == ("optimizer", "transform")


def test_optimizer_core_is_none_for_adamw_and_rescaled_recadam_otherwise():
    assert optimizer_core(resolve("stoc", "corpus"), OPT) is None
    core = optimizer_core(resolve("recadam", "corpus"), OPT)
    ref = recadam(RecAdamConfig.rescaled(OPT.total_steps, OPT.peak_lr))
    p = {"w": jnp.arange(4.0)}
    g = {"w": jnp.asarray([0.3, -1.0, 2.0, 0.5])}
    got, _ = core.update(g, core.init(p), p)
    want, _ = ref.update(g, ref.init(p), p)
    np.testing.assert_array_equal(got["w"], want["w"])


def _by_hand(model, trainable, steps: int):
    """The parameters after ``steps`` updates: grad of the step's loss → global-norm clip over the trainable
    leaves → RecAdam (rescaled to OPT) on the trainable leaves, frozen leaves unchanged."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    mask = trainable(params) if trainable is not None else jax.tree.map(lambda _: True, params)
    rec = recadam(RecAdamConfig.rescaled(OPT.total_steps, OPT.peak_lr))
    pick = lambda tree: [x for x, m in zip(jax.tree.leaves(tree), jax.tree.leaves(mask)) if m]  # noqa: E731
    state = rec.init(pick(params))
    grad = jax.jit(jax.grad(lambda p, b: lm_loss(p, graphdef, rest, b)[0]))
    for t in range(steps):
        grads = grad(params, batch(t))
        g = pick(grads)
        norm = optax.tree.norm(g)
        g = [x * jnp.minimum(1.0, OPT.clip_norm / norm) for x in g]
        upd, state = rec.update(g, state, pick(params))
        leaves, it = jax.tree.leaves(params), iter(upd)
        params = jax.tree.unflatten(jax.tree.structure(params),
                                    [x + next(it) if m else x for x, m in zip(leaves, jax.tree.leaves(mask))])
    return params


@pytest.mark.parametrize("update", ["full", "lora"])
def test_a_train_lm_run_with_recadam_is_the_update_written_out(tmp_path, update):
    model, trainable = apply_update(tiny_model(0), update, freeze_layers=1, lora_rank=2, seed=0)
    before = nnx.split(model, nnx.Param, ...)[1]
    want = _by_hand(model, trainable, LOOP.steps)
    run = train_lm(model, batch,
                   update=RunUpdate(opt=OPT, trainable=trainable,
                                    optimizer=optimizer_core(resolve("recadam", "corpus"), OPT)),
                   loop=LOOP, folder=RunFolder(tmp_path / update))
    for got, w in zip(jax.tree.leaves(run.params), jax.tree.leaves(want)):  # jitted step vs the loop above
        err = float(np.max(np.abs(np.asarray(got) - np.asarray(w))))
        assert err <= F32.adam_batched_rtol * float(np.max(np.abs(np.asarray(w))))
    mask = trainable(before) if trainable is not None else None
    if mask is not None:  # frozen leaves bit-identical, trained ones moved
        for got, b, m in zip(jax.tree.leaves(run.params), jax.tree.leaves(before), jax.tree.leaves(mask)):
            assert np.array_equal(np.asarray(got), np.asarray(b)) != bool(m)


def test_recadam_with_bf16_optimiser_state_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--opt-state-dtype"):
        make_optimizer(OptimConfig(state_dtype="bfloat16"), core=optimizer_core(resolve("recadam", "corpus"), OPT))
    with pytest.raises(ValueError, match="--opt-state-dtype bfloat16.*recadam"):
        cc.CorpusCPTConfig(data=("c",), model="m", out="o", method="recadam", opt_state_dtype="bfloat16")
    with pytest.raises(ValueError, match="--opt-state-dtype bfloat16.*recadam"):
        ke.KnowEditRun(data="t.json", model="m", out="o", methods=("naive", "recadam"), opt_state_dtype="bfloat16")
    cc.CorpusCPTConfig(data=("c",), model="m", out="o", method="recadam")  # float32 state: accepted


def test_biography_spec_accepts_recadam():
    spec = CPTSpec(method="stoc + recadam")
    assert spec.resolved.optimizer == "recadam"
