"""Seed ensembles in one jitted program: member e equals the lone run of its state and batches.

Not bit for bit: ``vmap`` mode runs batched matmuls, whose XLA:CPU kernels accumulate in another order than the
2-D GEMMs of a lone run, and ``map`` mode compiles the lone step as the body of a loop, where XLA fuses it
differently (measured: a few entries differ by 1 ulp after 3 steps). Under plain SGD both match
lone runs to float32 rounding, F32.exact_rtol ("vmap vs a lone run over tens of steps"; measured ≤ 4e-7 of each
leaf's largest entry); under AdamW, whose per-entry normalisation amplifies those ulps in gradient entries near ε,
to F32.adam_batched_rtol (measured ≤ 3e-5).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from cfka_jax.models.qwen import QwenConfig, QwenModel
from cfka_jax.train import ensemble as ens
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import init_state, make_train_step
from tests.tolerances import F32

CFG = QwenConfig(model_type="qwen2", vocab_size=23, hidden_size=12, intermediate_size=10, num_hidden_layers=1,
                 num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True)
SEEDS = (0, 3, 5, 8)
TX = {"sgd": lambda: optax.sgd(0.1),
      "adamw": lambda: make_optimizer(OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=0, total_steps=10))}
TOL = {"sgd": F32.exact_rtol, "adamw": F32.adam_batched_rtol}


def _members():
    return [QwenModel(CFG, rngs=nnx.Rngs(s)) for s in SEEDS]


def _batch(key, lead=()):
    tokens = jax.random.randint(key, lead + (3, 9), 0, CFG.vocab_size)
    return {"tokens": tokens, "target_mask": jnp.ones(tokens.shape, jnp.float32)}


def _tx():
    return TX["sgd"]()


@functools.lru_cache(maxsize=2)
def _lone_runs(opt: str, steps: int = 3):
    """(graphdef, params_E, rest, batches, final params of each lone run) for the optimiser ``opt``."""
    graphdef, params_E, rest = ens.split_members(_members())
    batches = [_batch(k, (len(SEEDS),)) for k in jax.random.split(jax.random.key(0), steps)]
    step, out = make_train_step(graphdef, rest, TX[opt]()), []
    for e in range(len(SEEDS)):
        state = init_state(jax.tree.map(jnp.copy, ens.member(params_E, e)), TX[opt]())
        for t in range(steps):
            state, _ = step(state, ens.member(batches[t], e))
        out.append(state.params)
    return graphdef, params_E, rest, batches, out


def _train(graphdef, rest, params_E, batches, steps, tx=None, **kw):
    tx = tx or _tx()
    step = ens.make_ensemble_step(graphdef, rest, tx, **kw)
    state = ens.init_ensemble(jax.tree.map(jnp.copy, params_E), tx)
    for t in range(steps):
        state, metrics = step(state, batches[t])
    return state, metrics




SLOW = pytest.mark.slow  # ~10 s each when the 2-core machine is idle: a loop-body or 2-device compile


@pytest.mark.parametrize("mode,opt", [("vmap", "sgd"), pytest.param("vmap", "adamw", marks=SLOW),
                                      pytest.param("map", "sgd", marks=SLOW), pytest.param("map", "adamw", marks=SLOW)])
def test_member_equals_lone_run(mode, opt):
    graphdef, params_E, rest, batches, lone = _lone_runs(opt)
    state, metrics = _train(graphdef, rest, params_E, batches, 3, tx=TX[opt](), mode=mode)
    assert metrics["loss"].shape == (len(SEEDS),) and bool(jnp.all(metrics["finite"]))
    np.testing.assert_array_equal(state.step, 3)
    for e in range(len(SEEDS)):
        assert ens.max_rel_diff(ens.member(state.params, e), lone[e]) <= TOL[opt]
    assert ens.max_rel_diff(ens.member(state.params, 0), lone[1]) > 1e3 * TOL[opt]  # members are distinct runs


@pytest.mark.parametrize("mode", [pytest.param("map", marks=SLOW), pytest.param("vmap", marks=SLOW)])
def test_shared_batch_stream(mode, key):
    graphdef, params_E, rest = ens.split_members(_members())
    batch = _batch(key)
    shared, _ = _train(graphdef, rest, params_E, [batch], 1, shared_batch=True, mode=mode)
    copied, _ = _train(graphdef, rest, params_E, [jax.tree.map(lambda x: jnp.stack([x] * len(SEEDS)), batch)], 1,
                       mode=mode)
    assert ens.max_rel_diff(shared.params, copied.params) <= F32.exact_rtol
    assert ens.max_rel_diff(ens.member(shared.params, 0), ens.member(shared.params, 1)) > F32.exact_rtol  # seeds differ


@SLOW
def test_sharded_over_two_devices_equals_one_device(key):
    sharding = ens.member_sharding(len(SEEDS))
    assert sharding is not None and len(jax.devices()) == 2  # tests/conftest.py: two fake CPU devices
    assert ens.member_sharding(3) is None
    graphdef, params_E, rest = ens.split_members(_members())
    batches = [_batch(k, (len(SEEDS),)) for k in jax.random.split(key, 2)]
    plain, _ = _train(graphdef, rest, params_E, batches, 2)
    sharded, _ = _train(graphdef, rest, ens.shard_members(params_E, sharding), batches, 2)
    assert len(sharded.params["embed_tokens"]["embedding"].sharding.device_set) == 2
    assert ens.max_rel_diff(sharded.params, plain.params) <= F32.exact_rtol


@pytest.mark.parametrize("mode", [pytest.param("map", marks=SLOW), "vmap"])
def test_finite_guard_is_per_member(mode, key):
    graphdef, params_E, rest = ens.split_members(_members())
    params_E = jax.tree.map(lambda x: x, params_E)
    params_E["norm"]["scale"] = params_E["norm"]["scale"].at[1, 0].set(jnp.nan)
    state, metrics = _train(graphdef, rest, params_E, [_batch(key, (len(SEEDS),))], 1, mode=mode)
    np.testing.assert_array_equal(metrics["finite"], [True, False, True, True])
    jax.tree.map(np.testing.assert_array_equal, ens.member(state.params, 1), ens.member(params_E, 1))
    assert ens.max_rel_diff(ens.member(state.params, 0), ens.member(params_E, 0)) > F32.exact_rtol


def test_members_must_share_architecture_and_rest():
    other = QwenModel(QwenConfig(**{**CFG.__dict__, "intermediate_size": 11}), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="member 1"):
        ens.split_members([_members()[0], other])
    with pytest.raises(ValueError, match="mode"):
        ens.make_ensemble_step(*ens.split_members(_members())[::2], _tx(), mode="pmap")


def test_stack_and_member_round_trip():
    trees = [{"a": jnp.full((2,), float(i)), "b": {"c": jnp.arange(3) + i}} for i in range(3)]
    stacked = ens.stack_members(trees)
    assert stacked["a"].shape == (3, 2) and stacked["b"]["c"].shape == (3, 3)
    for i, t in enumerate(trees):
        jax.tree.map(np.testing.assert_array_equal, ens.member(stacked, i), t)
