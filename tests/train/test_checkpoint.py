"""Orbax checkpoints: exact round trip of parameters + optimizer state + step; clear errors naming the path."""

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfka_jax.continual import peft
from cfka_jax.models import QwenConfig, QwenModel
from cfka_jax.train import checkpoint as ckpt

CFG = QwenConfig(
    model_type="qwen3", vocab_size=31, hidden_size=14, head_dim=4, intermediate_size=19, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
)
LORA = peft.LoRAConfig(rank=2, alpha=4.0, dropout=0.1, target_modules=("q_proj", "down_proj"))


def _make(cfg=CFG):
    """A LoRA model (adapters + dropout RNG state) and an AdamW optimizer over the adapters only."""
    model = peft.apply_lora(QwenModel(cfg, rngs=nnx.Rngs(0)), LORA, rngs=nnx.Rngs(1))
    return model, nnx.Optimizer(model, optax.adamw(1e-2), wrt=peft.trainable_filter(model, lora=True))


def _trained():
    model, opt = nnx.jit(_make)()  # one compiled init instead of one per op
    grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.LoRAParam))
    with jax.numpy_dtype_promotion("standard"):  # optax's bias correction mixes a Python float and int32
        opt.update(model, grads)
    return model, opt


def _leaves(x):
    return [np.asarray(jax.random.key_data(v) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key) else v)
            for v in jax.tree.leaves(nnx.state(x))]


def test_model_and_optimizer_round_trip_exactly_into_abstract_state(tmp_path):
    model, opt = _trained()
    assert int(opt.step[...]) == 1
    ckpt.save_train_state(tmp_path / "ckpt", model, opt, step=17)
    abstract_model, abstract_opt = nnx.eval_shape(_make)
    step = ckpt.restore_train_state(tmp_path / "ckpt", abstract_model, abstract_opt)
    assert step == 17
    for name, a, b in (("model", model, abstract_model), ("optimizer", opt, abstract_opt)):
        before, after = _leaves(a), _leaves(b)
        assert len(before) == len(after) > 0
        for x, y in zip(before, after, strict=True):
            assert x.dtype == y.dtype, name
            np.testing.assert_array_equal(y, x, err_msg=name)


def test_pure_tree_round_trip(tmp_path):
    params = {"w": jnp.arange(6.0).reshape(2, 3), "layers": [jnp.ones((2,), jnp.bfloat16), jnp.int32(4)]}
    ckpt.save(tmp_path / "c", (params, {"mu": params["w"] * 2}), step=3)
    abstract = jax.eval_shape(lambda: (params, {"mu": params["w"]}))
    (restored, aux), step = ckpt.restore(tmp_path / "c", abstract)
    assert step == 3 and restored["layers"][0].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(aux["mu"]), np.asarray(params["w"]) * 2)
    np.testing.assert_array_equal(np.asarray(restored["layers"][1]), 4)


def test_missing_checkpoint_names_the_path(tmp_path):
    model, opt = _make()
    with pytest.raises(ckpt.CheckpointError, match=str(tmp_path / "nowhere")):
        ckpt.restore_train_state(tmp_path / "nowhere", model, opt)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("not a checkpoint")
    with pytest.raises(ckpt.CheckpointError, match="junk.*malformed"):
        ckpt.restore_train_state(tmp_path / "junk", model, opt)


def test_mismatched_checkpoint_lists_every_problem(tmp_path):
    path = ckpt.save(tmp_path / "c", {"a": jnp.zeros((2, 3)), "b": jnp.zeros((4,)), "c": jnp.zeros(())}, step=0)
    target = {"a": jnp.zeros((2, 3)), "b": jnp.zeros((5,)), "d": jnp.zeros((), jnp.int32)}
    with pytest.raises(ckpt.CheckpointError) as err:
        ckpt.restore(path, target)
    msg = str(err.value)
    assert str(path) in msg
    assert "missing (1):\n  d" in msg and "unexpected (1):\n  c" in msg
    assert "b: stored (4,) float32, expected (5,) float32" in msg


def test_compressed_and_uncompressed_checkpoints_restore_exactly(tmp_path):
    """``save`` writes uncompressed arrays by default (no staged compressed copy in memory); a compressed one (as
    every checkpoint was written before) restores the same way, and is the smaller on a compressible tree."""
    tree = {"w": jax.random.normal(jax.random.key(0), (64, 33)), "z": jnp.zeros((256, 256)),
            "n": {"b": jnp.arange(7, dtype=jnp.int32)}}
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
    sizes = {}
    for compress in (False, True):
        path = ckpt.save(tmp_path / str(compress), tree, step=3, compress=compress)
        restored, step = ckpt.restore(path, abstract)
        assert step == 3
        for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(tree)):
            np.testing.assert_array_equal(a, b)
        sizes[compress] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert sizes[True] < sizes[False] - 200_000, sizes  # the 256 KiB of zeros
