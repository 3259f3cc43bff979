"""``OptimConfig.state_dtype``: AdamW moments stored in bfloat16, each update computed in float32."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfka_jax.train.optim import OptimConfig, make_optimizer, state_in_dtype
from cfka_jax.train.step import optimizer_update
from tests.tolerances import F32


def _params_and_grads(key):
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"w": jax.random.normal(k1, (7, 5)), "b": jax.random.normal(k2, (5,))}
    grads = [jax.tree.map(lambda p, i=i: jax.random.normal(jax.random.fold_in(k3, i), p.shape), params)
             for i in range(3)]
    return params, grads


def _run(tx, params, grads):
    state, out = tx.init(params), []
    for g in grads:
        updates, state = jax.jit(lambda g, s, p: optimizer_update(tx, g, s, p))(g, state, params)
        params = optax.apply_updates(params, updates)
        out.append((updates, state))
    return out


def test_float32_storage_is_bit_identical(key):
    params, grads = _params_and_grads(key)
    tx = make_optimizer(OptimConfig(warmup_steps=0, total_steps=3))
    for (u1, _), (u2, _) in zip(_run(tx, params, grads), _run(state_in_dtype(tx, jnp.float32), params, grads)):
        jax.tree.map(np.testing.assert_array_equal, u1, u2)


def test_bfloat16_moments_are_stored_rounded_and_used_in_float32(key):
    params, grads = _params_and_grads(key)
    base = make_optimizer(OptimConfig(warmup_steps=0, total_steps=3))
    tx = make_optimizer(OptimConfig(warmup_steps=0, total_steps=3, state_dtype="bfloat16"))
    steps = _run(tx, params, grads)
    floats = [x for x in jax.tree.leaves(steps[-1][1]) if jnp.issubdtype(x.dtype, jnp.floating)]
    ints = [x for x in jax.tree.leaves(steps[-1][1]) if not jnp.issubdtype(x.dtype, jnp.floating)]
    assert floats and all(x.dtype == jnp.bfloat16 for x in floats) and all(x.dtype == jnp.int32 for x in ints)
    # Step 2's update is the float32 update computed from step 1's stored (rounded) moments (to FMA contraction:
    # the two are different compiled programs of the same expressions).
    up32 = jax.tree.map(lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, steps[0][1])
    p1 = optax.apply_updates(params, steps[0][0])
    want, _ = jax.jit(lambda g, s, p: optimizer_update(base, g, s, p))(grads[1], up32, p1)
    for got, ref in zip(jax.tree.leaves(steps[1][0]), jax.tree.leaves(want)):
        np.testing.assert_allclose(got, ref, rtol=0, atol=F32.contraction_rtol * float(np.max(np.abs(ref))))


def test_unknown_state_dtype_is_refused():
    with pytest.raises(ValueError, match="opt-state-dtype"):
        OptimConfig(state_dtype="float16")
