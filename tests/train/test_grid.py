"""Run grids in one program: per-member learning-rate schedules and EWC λ as traced numbers (``train/ensemble.py``).

The schedule and the unit-rate AdamW scaled by it are checked bit for bit against the lone run's optimiser; a
grid member against its lone run (own schedule, own λ, own batches) to F32.adam_batched_rtol, the ensemble's
tolerance (batched or loop-body kernels vs plain ones, amplified by Adam's per-entry normalisation).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.continual.ewc import EWCAnchor, ewc_anchor, ewc_penalty
from cfka_jax.models.qwen import QwenConfig, QwenModel
from cfka_jax.train import ensemble as ens
from cfka_jax.train.optim import OptimConfig, lr_schedule, make_optimizer
from cfka_jax.train.step import Loss, Update, init_state, make_train_step, optimizer_update
from tests.tolerances import F32

CFG = QwenConfig(model_type="qwen2", vocab_size=23, hidden_size=12, intermediate_size=10, num_hidden_layers=1,
                 num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True)
OPTS = (OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=0, total_steps=10),
        OptimConfig(peak_lr=3e-3, min_lr=3e-4, warmup_steps=2, total_steps=10),
        OptimConfig(peak_lr=5e-3, min_lr=1e-4, warmup_steps=1, total_steps=10, decay="constant", decay_steps=3))
LAMS = (0.0, 50.0, 5e3)


@pytest.mark.parametrize("cfg", OPTS + (OptimConfig(peak_lr=7e-4, min_lr=7e-4, warmup_steps=5, total_steps=9),))
def test_schedule_value_is_lr_schedule_bit_for_bit(cfg):
    steps = jnp.arange(cfg.total_steps + 3, dtype=jnp.int32)
    want = jax.jit(jax.vmap(lr_schedule(cfg)))(steps)
    got = jax.jit(jax.vmap(ens.schedule_value, in_axes=(0, None)))(steps, ens.member_schedule(cfg))
    np.testing.assert_array_equal(got, want)


def _params(seed: int):
    return nnx.split(QwenModel(CFG, rngs=nnx.Rngs(seed)), nnx.Param, ...)


def test_grid_tx_update_is_the_lone_optimisers_bit_for_bit(key):
    _, params, _ = _params(0)
    grads = jax.tree.map(lambda p: jax.random.normal(key, p.shape, p.dtype), params)
    for cfg in OPTS:
        lone, grid = make_optimizer(cfg), ens.grid_tx(cfg, ens.member_schedule(cfg))
        s_lone, s_grid = lone.init(params), grid.init(params)
        for _ in range(4):  # through warm-up into the decay
            u_lone, s_lone = jax.jit(lambda g, s, p: optimizer_update(lone, g, s, p))(grads, s_lone, params)
            u_grid, s_grid = jax.jit(lambda g, s, p: optimizer_update(grid, g, s, p))(grads, s_grid, params)
            jax.tree.map(np.testing.assert_array_equal, u_grid, u_lone)


def _batches(key, steps: int, members: int):
    tokens = jax.random.randint(key, (steps, members, 3, 9), 0, CFG.vocab_size)
    return [{"tokens": tokens[t], "target_mask": jnp.ones(tokens.shape[1:], jnp.float32)} for t in range(steps)]




def _ewc(params):
    fisher = jax.tree.map(lambda p: jnp.full(p.shape, 0.5, jnp.float32), params)
    return fisher, jax.tree.map(lambda p: p * 0.9, params)


@pytest.mark.parametrize("mode", ["vmap", pytest.param("map", marks=pytest.mark.slow)])
def test_grid_members_equal_their_lone_runs(mode, key):
    """Three members, one compiled step: each its own schedule, EWC λ and batch stream; the Fisher and anchor are
    shared operands (in_axes None), λ per member."""
    graphdef, _, rest = _params(0)
    params_E = ens.stack_members([_params(s)[1] for s in (0, 1, 2)])
    fisher, anchor = _ewc(_params(0)[1])
    batches, steps = _batches(key, 3, len(OPTS)), 3
    lone_step = make_train_step(graphdef, rest, make_optimizer(OPTS[0]), loss=Loss(penalty=ewc_penalty))
    lone = []
    for e, (cfg, lam) in enumerate(zip(OPTS, LAMS)):
        state = init_state(jax.tree.map(jnp.copy, ens.member(params_E, e)), make_optimizer(cfg))
        args = ewc_anchor(fisher, anchor, lam)
        step = make_train_step(graphdef, rest, make_optimizer(cfg), loss=Loss(penalty=ewc_penalty)) if e else lone_step
        for t in range(steps):
            state, _ = step(state, ens.member(batches[t], e), args)
        lone.append(state.params)
    tx_of = lambda s: ens.grid_tx(OPTS[0], s)  # noqa: E731
    schedules = ens.stack_members([ens.member_schedule(c) for c in OPTS])
    state = ens.init_grid(jax.tree.map(jnp.copy, params_E), tx_of, schedules)
    step = ens.make_grid_step(graphdef, rest, tx_of(ens.member_schedule(OPTS[0])), penalty=ewc_penalty, mode=mode,
                              in_axes=(0, EWCAnchor(None, None, 0)))
    args = EWCAnchor(fisher, anchor, jnp.asarray(LAMS, jnp.float32))
    for t in range(steps):
        state, metrics = step(state, batches[t], args)
    assert metrics["loss"].shape == (len(OPTS),) and bool(jnp.all(metrics["finite"]))
    assert float(metrics["penalty"][0]) == 0.0 and float(metrics["penalty"][2]) > float(metrics["penalty"][1]) > 0
    for e in range(len(OPTS)):
        assert ens.max_rel_diff(ens.member(state.params, e), lone[e]) <= F32.adam_batched_rtol
    assert ens.max_rel_diff(ens.member(state.params, 1), lone[2]) > 1e3 * F32.adam_batched_rtol


def test_over_members_refuses_other_axes():
    with pytest.raises(ValueError, match="in_axes"):
        ens.over_members(lambda s, b: (s, {}), "vmap", (1,))
    with pytest.raises(ValueError, match="mode"):
        ens.over_members(lambda s, b: (s, {}), "pmap", (0,))
    with pytest.raises(ValueError, match="state_dtype"):
        ens.grid_tx(OptimConfig(state_dtype="bfloat16"), ens.member_schedule(OPTS[0]))


def test_member_masks_equal_lone_masked_runs(key):
    """freeze-k per member: member 0 trains everything but the embedding, member 1 only the final norm and the
    blocks; masked gradients and updates over the same leaves equal each lone run with its trainable mask."""
    graphdef, params, rest = _params(0)
    masks = [jax.tree_util.tree_map_with_path(lambda path, _: "embed" not in str(path), params),
             jax.tree_util.tree_map_with_path(lambda path, _: "embed" not in str(path) and "0" not in str(path[1:2]),
                                              params)]
    assert masks[0] != masks[1]
    params_E = ens.stack_members([params, _params(1)[1]])
    batches, cfg = _batches(key, 3, 2), OPTS[1]
    lone = []
    for e in range(2):
        step = make_train_step(graphdef, rest, make_optimizer(cfg), update=Update(trainable=masks[e]))
        state = init_state(jax.tree.map(jnp.copy, ens.member(params_E, e)), step.tx)
        for t in range(3):
            state, _ = step(state, ens.member(batches[t], e))
        lone.append(state.params)
    masks_E = ens.stack_members([ens.float_mask(m) for m in masks])
    numbers = (ens.stack_members([ens.member_schedule(cfg)] * 2), masks_E)
    step = ens.make_grid_step(graphdef, rest, ens.grid_tx(cfg, *ens.member(numbers, 0)), in_axes=(0, 0),
                              member_masks=True)
    state = ens.init_grid(jax.tree.map(jnp.copy, params_E), lambda n: ens.grid_tx(cfg, *n), numbers)
    for t in range(3):
        state, _ = step(state, batches[t], masks_E)
    for e in range(2):
        got = ens.member(state.params, e)
        assert ens.max_rel_diff(got, lone[e]) <= F32.adam_batched_rtol
        frozen = [(g, p) for g, p, m in zip(jax.tree.leaves(got), jax.tree.leaves(ens.member(params_E, e)),
                                            jax.tree.leaves(masks[e])) if not m]
        assert frozen and all(np.array_equal(g, p) for g, p in frozen)  # frozen leaves bit-identical
