"""``guard="gradient"``: the update under ``lax.cond`` in the donated buffers (no second copy of the state), the
same numbers as the default guard, and the same rollback: a non-finite loss, gradient or update keeps the
previous state."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import Loss, Placement, Update, init_state, make_train_step
from tests.helpers import batch, split, tiny_model
from tests.tolerances import F32

CFG = OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=2, total_steps=10)


def test_gradient_guard_equals_state_guard_on_finite_steps():
    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(CFG)
    a = b = init_state(params, tx)
    sa = make_train_step(graphdef, rest, tx, placement=Placement(donate=False))
    sb = make_train_step(graphdef, rest, tx, update=Update(guard="gradient"), placement=Placement(donate=False))
    for i in range(3):
        a, ma = sa(a, batch(i))
        b, mb = sb(b, batch(i))
        assert bool(mb["finite"]) and float(ma["loss"]) == float(mb["loss"])
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_gradient_guard_keeps_the_state_on_a_non_finite_loss_and_on_a_non_finite_update():
    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(CFG)
    step = make_train_step(graphdef, rest, tx, loss=Loss(penalty=lambda p, a: jnp.asarray(jnp.nan, jnp.float32)),
                           update=Update(guard="gradient"))
    state = init_state(params, tx)
    before = jax.tree.map(np.asarray, state.params)
    state, metrics = step(state, batch(0))
    assert not bool(metrics["finite"]) and int(state.step) == 0
    jax.tree.map(np.testing.assert_array_equal, state.params, before)
    # an update that is NaN from a finite gradient: reported, and rolled back (the state is the previous one)
    nan_tx = optax.GradientTransformation(lambda p: optax.EmptyState(),
                                          lambda g, s, p=None: (jax.tree.map(lambda x: x * jnp.nan, g), s))
    step = make_train_step(graphdef, rest, nan_tx, update=Update(guard="gradient"))
    state, metrics = step(init_state(params, nan_tx), batch(0))
    assert np.isfinite(float(metrics["grad_norm"])) and not bool(metrics["finite"]) and int(state.step) == 0
    jax.tree.map(np.testing.assert_array_equal, state.params, before)
    with pytest.raises(ValueError, match="guard"):
        make_train_step(graphdef, rest, tx, update=Update(guard="none"))


def test_gradient_guard_holds_no_second_state():
    """XLA's buffer assignment of the donated step where the state dominates (a quadratic objective of four
    512 × 512 matrices): the default guard keeps the old state while the new one is checked (temporaries ≥ the
    state's size), ``guard="gradient"`` updates in place (here 8 MiB against 14: the gradient and one
    parameter-sized tree, against those and a second params + moments)."""
    params = {f"w{i}": jax.ShapeDtypeStruct((512, 512), jnp.float32) for i in range(4)}
    tx = make_optimizer(CFG)
    state = jax.eval_shape(lambda p: init_state(p, tx), params)
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))

    def objective(p, x):
        return sum(jnp.sum(jnp.square(w - x)) for w in p.values()), {}

    def temp(guard):
        step = make_train_step(None, None, tx, loss=Loss(objective=objective), update=Update(guard=guard))
        return step.lower(state, jnp.float32(0.5)).compile().memory_analysis().temp_size_in_bytes

    assert state_bytes <= temp("state") and temp("gradient") + 0.4 * state_bytes < temp("state")
    # the rollback's finiteness pass stores nothing leaf-sized: the gradient and one parameter-sized tree (8 of the
    # 12 MiB; a pass with one reduction per leaf kept a leaf's new moments alive, 8.75)
    assert temp("gradient") <= 0.7 * state_bytes


@pytest.mark.parametrize("scan,remat", [(False, False), (True, True)], ids=["loop", "scan+remat"])
def test_blocks_cast_in_their_call_equal_casting_everything_up_front(scan, remat):
    """``compute_params`` leaves the blocks' float32 masters to each block's own cast (inside the scanned,
    rematerialised call): loss and gradients are bit-identical to casting every parameter up front."""
    from flax import nnx

    from cfka_jax.models.qwen import QwenConfig, QwenModel
    from cfka_jax.train.step import cast_floating, compute_params, lm_loss, master_params

    cfg = QwenConfig(model_type="qwen2", vocab_size=37, hidden_size=24, intermediate_size=29, num_hidden_layers=3,
                     num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True, initializer_range=0.2,
                     dtype=jnp.bfloat16, scan_layers=scan, remat=remat)
    graphdef, params, rest = nnx.split(QwenModel(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)
    masters = master_params(params)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(compute_params(masters, jnp.bfloat16)["layers"]))

    def loss(cast):
        return jax.jit(jax.value_and_grad(lambda p: lm_loss(cast(p), graphdef, rest, batch(0))[0]))(masters)

    (a, ga), (b, gb) = loss(lambda p: cast_floating(p, jnp.bfloat16)), loss(lambda p: compute_params(p, jnp.bfloat16))
    assert float(a) == float(b)
    jax.tree.map(np.testing.assert_array_equal, ga, gb)


@pytest.mark.parametrize("remat", [False, True], ids=["plain", "remat"])
def test_trainable_gradient_equals_the_full_gradient_on_the_trained_leaves(remat):
    """LoRA on a rematerialised model: differentiating the trained leaves only gives the full gradient's values
    there (to float32 rounding: the program fuses differently, ulp-level differences in a few entries) and exact
    zeros on the frozen leaves (nnx.remat must see frozen variables of its own trace)."""
    from flax import nnx

    from cfka_jax.models.qwen import QwenConfig, QwenModel
    from cfka_jax.runs.methods import apply_update
    from cfka_jax.train.step import lm_loss, trainable_value_and_grad

    cfg = QwenConfig(model_type="qwen2", vocab_size=37, hidden_size=24, intermediate_size=29, num_hidden_layers=2,
                     num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True, initializer_range=0.2,
                     remat=remat)
    model, trainable = apply_update(QwenModel(cfg, rngs=nnx.Rngs(0)), "lora", freeze_layers=0, lora_rank=4, seed=0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    mask = trainable(params)

    def objective(p, b):
        return lm_loss(p, graphdef, rest, b)[0], {}

    (va, _), ga = jax.jit(jax.value_and_grad(objective, has_aux=True))(params, batch(0))
    (vb, _), gb = jax.jit(trainable_value_and_grad(objective, mask))(params, batch(0))
    np.testing.assert_allclose(float(vb), float(va), rtol=F32.one_ulp)
    flat_mask = jax.tree.leaves(mask)
    subtrees = jax.tree.structure(mask).flatten_up_to
    for m, a, b in zip(flat_mask, subtrees(ga), subtrees(gb)):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            if m:
                np.testing.assert_allclose(y, x, rtol=F32.exact_rtol, atol=F32.one_ulp)
            else:
                np.testing.assert_array_equal(y, np.zeros_like(x))
    assert 0 < sum(flat_mask) < len(flat_mask)
