"""The fused clip + AdamW (train/optim.fused_clip_adamw) is optax's chain to float32 rounding (the same operations;
LLVM may contract a·x + b·y into one FMA in one compiled form and not the other), with the same state tree, and a
compiled update that holds no gradient-sized temporary beside its inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfka_jax.train.optim import (OptimConfig, fused_clip_adamw, make_optimizer, masked_tx, reference_clip_adamw,
                                  state_in_dtype)
from cfka_jax.train.step import optax_update
from tests.tolerances import F32


def assert_same(got, want):
    """Equal trees, leaf by leaf to FMA contraction (``F32.contraction_rtol`` of the leaf's largest entry)."""
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        scale = float(np.max(np.abs(np.asarray(b, np.float32)))) if np.size(b) else 0.0
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=0,
                                   atol=F32.contraction_rtol * max(scale, 1.0))


def _params(key):
    k = jax.random.split(key, 4)
    return {"w": jax.random.normal(k[0], (23, 17)), "b": jax.random.normal(k[1], (17,)),
            "e": {"table": jax.random.normal(k[2], (31, 23)), "scale": jnp.ones((23,))}}


def _run(tx, params, steps, key, trainable=None):
    """params and state after ``steps`` updates with gradients alternating above and below the clip norm."""
    tx = tx if trainable is None else masked_tx(tx, trainable)
    update = jax.jit(optax_update(tx))
    state = tx.init(params)
    for t in range(steps):
        scale = 5.0 if t % 2 == 0 else 0.01  # clipped, then not clipped
        grads = jax.tree.map(lambda x: scale * jax.random.normal(jax.random.fold_in(key, t), x.shape, x.dtype), params)
        params, state = update(grads, state, params)
    return params, state


@pytest.mark.parametrize("post", [False, True])
def test_fused_equals_optax(key, post):
    cfg = OptimConfig(peak_lr=3e-2, warmup_steps=2, total_steps=9)
    extra = optax.scale(0.5) if post else None
    params = _params(key)
    want = _run(reference_clip_adamw(cfg, extra), params, 6, key)
    got = _run(fused_clip_adamw(cfg, extra), params, 6, key)
    assert_same(got, want)


def test_fused_equals_optax_under_a_trainable_mask_and_bf16_moments(key):
    cfg = OptimConfig(peak_lr=1e-2, warmup_steps=1, total_steps=5, state_dtype="bfloat16")
    params = _params(key)
    trainable = {"w": True, "b": False, "e": {"table": True, "scale": False}}
    ref = state_in_dtype(reference_clip_adamw(cfg), jnp.bfloat16)
    want = _run(ref, params, 4, key, trainable)
    got = _run(make_optimizer(cfg), params, 4, key, trainable)
    assert_same(got, want)
    np.testing.assert_array_equal(got[0]["b"], params["b"])  # frozen leaves untouched


def test_make_optimizer_uses_the_fused_form_and_restores_reference_state(key):
    """A state written by the reference chain is the fused form's state (checkpoints of either restore)."""
    cfg = OptimConfig(warmup_steps=1, total_steps=4)
    params = _params(key)
    p1, s1 = _run(reference_clip_adamw(cfg), params, 2, key)
    update = jax.jit(optax_update(make_optimizer(cfg)))
    grads = jax.tree.map(jnp.ones_like, params)
    a = update(grads, s1, p1)
    b = jax.jit(optax_update(reference_clip_adamw(cfg)))(grads, s1, p1)
    assert_same(a, b)


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_the_compiled_update_holds_no_clipped_gradient():
    """optax materialises the clipped gradient of every leaf (it feeds both moments); the fused update holds no
    leaf-sized temporary. Gradients, moments and parameters are donated, as inside a train step, where the
    gradient is a temporary that dies with the update (1 MiB leaves)."""
    cfg = OptimConfig(warmup_steps=1, total_steps=4)
    params = {f"w{i}": jax.ShapeDtypeStruct((512, 512), jnp.float32) for i in range(4)}
    leaf = 512 * 512 * 4
    temps = {}
    for name, tx in (("optax", reference_clip_adamw(cfg)), ("fused", fused_clip_adamw(cfg))):
        state = jax.eval_shape(tx.init, params)
        fn = jax.jit(lambda g, s, p, tx=tx: optax_update(tx)(g, s, p), donate_argnums=(0, 1, 2))
        temps[name] = fn.lower(params, state, params).compile().memory_analysis().temp_size_in_bytes
    assert temps["optax"] >= 4 * leaf and temps["fused"] < leaf, temps
