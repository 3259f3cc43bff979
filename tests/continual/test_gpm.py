"""GPM: the bases capture the stored inputs' span, and a projected AdamW step leaves W x unchanged on it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.continual import gpm
from cfka_jax.train.optim import OptimConfig, make_optimizer
from tests.tolerances import F32


def _inputs(seed, n, d_in, rank):
    """n inputs of width d_in spanning a rank-``rank`` subspace."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, rank)) @ rng.normal(size=(rank, d_in))


def test_bases_span_the_stored_inputs_and_grow_orthonormally():
    x1, x2 = _inputs(0, 40, 7, 2), _inputs(1, 40, 7, 3)
    b1 = gpm.update_bases(None, {("layer",): x1.T @ x1}, threshold=0.999)
    m1 = b1[("layer",)].astype(np.float64)
    assert m1.shape == (7, 2)
    np.testing.assert_allclose(m1 @ m1.T @ x1.T, x1.T, atol=F32.model_atol)     # x1 lies in span(M1)
    b2 = gpm.update_bases(b1, {("layer",): x2.T @ x2}, threshold=0.999)
    m2 = b2[("layer",)].astype(np.float64)
    assert m2.shape[1] <= 5
    np.testing.assert_allclose(m2.T @ m2, np.eye(m2.shape[1]), atol=F32.op_atol)
    np.testing.assert_allclose(m2 @ m2.T @ m1, m1, atol=F32.op_atol)          # the old span is kept
    np.testing.assert_allclose(m2 @ m2.T @ x2.T, x2.T, atol=F32.model_atol)


def test_threshold_keeps_the_fewest_directions():
    x = np.diag([10.0, 3.0, 1.0, 0.1])        # energies 100, 9, 1, 0.01 of 110.01
    for eps, k in ((0.9, 1), (0.99, 2), (0.9995, 3), (0.99995, 4)):
        assert gpm.update_bases(None, {("l",): x.T @ x}, eps)[("l",)].shape[1] == k
    full = gpm.update_bases(None, {("l",): x.T @ x}, 0.99995)
    assert gpm.update_bases(full, {("l",): x.T @ x}, 0.99)[("l",)].shape[1] == 4   # nothing new to add


def test_projected_adamw_step_leaves_the_stored_span_unchanged():
    x = _inputs(2, 30, 7, 3).astype(np.float32)
    bases = gpm.update_bases(None, {("layer",): (x.T @ x).astype(np.float64)}, threshold=0.9999)
    w = jax.random.normal(jax.random.key(0), (7, 5))
    params = {"layer": {"kernel": w, "bias": jnp.zeros(5)}, "other": {"kernel": jnp.ones((7, 5))}}
    tx = make_optimizer(OptimConfig(peak_lr=0.1, min_lr=0.01, warmup_steps=0, total_steps=10),
                        post=gpm.gpm_projection(bases))
    grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(1), p.shape), params)
    with jax.numpy_dtype_promotion("standard"):  # optax's bias correction mixes a Python float and int32
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    new = jax.tree.map(jnp.add, params, updates)
    np.testing.assert_allclose(x @ new["layer"]["kernel"], x @ w, atol=F32.model_atol)
    assert float(jnp.abs(new["layer"]["kernel"] - w).max()) > 1e-2                # it does move off the span
    assert float(jnp.abs(new["other"]["kernel"] - 1.0).max()) > 1e-2               # uncovered layers train freely


def test_input_grams_are_the_linear_layers_inputs():
    from cfka_jax.models.qwen import QwenConfig, QwenModel

    cfg = QwenConfig(model_type="qwen2", vocab_size=31, hidden_size=8, intermediate_size=12, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                     max_position_embeddings=64)
    model = QwenModel(cfg, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(3), (2, 5), 0, 31)
    batch = {"tokens": tokens, "positions": jnp.tile(jnp.arange(5), (2, 1))}
    grams = gpm.input_grams(model, [batch, batch])
    assert ("layers", 1, "mlp", "down_proj") in grams and grams[("layers", 1, "mlp", "down_proj")].shape == (12, 12)
    x = model.layers[0].input_layernorm(model.embed_tokens(tokens)).reshape(-1, 8)
    np.testing.assert_allclose(grams[("layers", 0, "self_attn", "q_proj")], 2 * np.asarray(x.T @ x),
                               rtol=F32.exact_rtol, atol=F32.op_atol)
    assert all(isinstance(m, nnx.Linear) for p, m in nnx.iter_modules(model) if p and p[-1] == "q_proj")


def test_bad_config_and_round_trip(tmp_path):
    with pytest.raises(ValueError, match="threshold"):
        gpm.GPMConfig(threshold=1.0)
    bases = {("layers", 0, "mlp", "up_proj"): np.eye(4, 2, dtype=np.float32)}
    gpm.save_bases(tmp_path / "b.npz", bases)
    back = gpm.load_bases(tmp_path / "b.npz")
    assert list(back) == list(bases)
    np.testing.assert_array_equal(back[("layers", 0, "mlp", "up_proj")], bases[("layers", 0, "mlp", "up_proj")])
