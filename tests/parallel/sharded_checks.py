"""Sharded against single-device runs, on 8 forced host CPU devices (run in a subprocess by test_sharding.py).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m tests.parallel.sharded_checks OUT.json

Prints nothing on success; writes the measured differences to OUT.json for the test to assert on. The process
sets the strict promotion rules of tests/conftest.py itself (it is not run under pytest).
"""

from __future__ import annotations

import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

from cfka_jax.models.generate import SamplerConfig, generate  # noqa: E402
from cfka_jax.parallel.mesh import MeshConfig, make_mesh  # noqa: E402
from cfka_jax.parallel.rules import batch_sharding, place, tree_shardings  # noqa: E402
from cfka_jax.theory.rate_sweep import make_grid, sweep_jit, sweep_sharded  # noqa: E402
from cfka_jax.theory.train import SGDConfig  # noqa: E402
from cfka_jax.theory.world import WorldConfig, make_world  # noqa: E402
from cfka_jax.train.checkpoint import restore, save  # noqa: E402
from cfka_jax.train.optim import OptimConfig, make_optimizer  # noqa: E402
from cfka_jax.train.step import Loss, Placement, chunked_token_nll_loss, init_state, make_train_step  # noqa: E402
from cfka_jax.models.qwen import QwenConfig, QwenModel  # noqa: E402


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _model() -> QwenModel:
    """Sizes divisible by the mesh axes (hidden 32, heads 4 × 8, MLP 64, vocabulary 48), so every rule shards."""
    cfg = QwenConfig(model_type="qwen2", vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, initializer_range=0.2)
    return QwenModel(cfg, rngs=nnx.Rngs(0))


def _batch(t: int) -> dict:
    rng = np.random.default_rng(t)
    tokens = rng.integers(1, 48, size=(8, 12)).astype(np.int32)
    mask = np.ones((8, 12), np.float32)
    mask[:, 0] = 0.0
    return {"tokens": jnp.asarray(tokens), "target_mask": jnp.asarray(mask)}


def sweep_check() -> dict:
    world = make_world(WorldConfig())
    grid = make_grid(seeds=range(4), eta_ys=[0.5, 1.0], eta_zs=[0.02])  # 8 configurations
    cfg = SGDConfig(steps=30, batch_size=8, log_every=30)
    single = sweep_jit(world, grid, cfg=cfg)
    sharded = sweep_sharded(world, grid, cfg=cfg, mesh=make_mesh(MeshConfig(data=8)))
    return {"sweep_max_diff": _max_diff(single, sharded),
            "sweep_devices": len(jax.tree.leaves(sharded)[0].sharding.device_set)}


def _train(mesh, steps: int = 3, **loss):
    graphdef, params, rest = nnx.split(_model(), nnx.Param, ...)
    tx = make_optimizer(OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=8))
    state, shardings = init_state(params, tx), None
    if mesh is not None:
        shardings = tree_shardings(state, mesh)
        state = place(state, shardings)
    step = make_train_step(graphdef, rest, tx, loss=Loss(**loss), placement=Placement(state_sharding=shardings))
    for t in range(steps):
        b = _batch(t) if mesh is None else place(_batch(t), batch_sharding(mesh))
        state, metrics = step(state, b)
    return state, float(metrics["loss"])


def train_check() -> dict:
    single, loss = _train(None)
    out = {}
    for shape in ((2, 4, 1), (2, 2, 2)):
        mesh = make_mesh(MeshConfig(*shape))
        sharded, loss_s = _train(mesh)
        kernel = sharded.params["layers"][0]["self_attn"]["q_proj"]["kernel"][...]
        out[f"train_{shape}"] = {"max_diff": _max_diff(single, sharded), "loss_diff": abs(loss - loss_s),
                                 "q_kernel_spec": str(kernel.sharding.spec)}
    tiled = {"loss_fn": chunked_token_nll_loss(20, vocab_tile=13)}  # the vocabulary-tiled head loss on a sharded head
    single_t, loss_t = _train(None, **tiled)
    sharded_t, loss_ts = _train(make_mesh(MeshConfig(2, 2, 2)), **tiled)
    embedding = sharded_t.params["embed_tokens"]["embedding"][...]
    out["train_tiled_(2, 2, 2)"] = {"max_diff": _max_diff(single_t, sharded_t), "loss_diff": abs(loss_t - loss_ts),
                                    "vs_full_logits": abs(loss_t - loss), "embedding_spec": str(embedding.sharding.spec)}
    return out


def generate_check() -> dict:
    model = _model()
    tokens = np.random.default_rng(0).integers(1, 48, size=(8, 5)).astype(np.int32)
    cfg = SamplerConfig(max_new_tokens=10, temperature=0.0, eos_token_id=0, pad_token_id=0, ignore_eos=True)
    single = generate(model, tokens, None, jax.random.key(0), cfg)
    mesh = make_mesh(MeshConfig(data=8))
    graphdef, state = nnx.split(model)
    sharded_model = nnx.merge(graphdef, place(state, tree_shardings(state, mesh)))
    sharded = generate(sharded_model, place(jnp.asarray(tokens), batch_sharding(mesh)), None, jax.random.key(0), cfg)
    return {"generate_same_tokens": bool(np.array_equal(np.asarray(single.tokens), np.asarray(sharded.tokens)))}


def checkpoint_check(folder: pathlib.Path) -> dict:
    state, _ = _train(make_mesh(MeshConfig(2, 4, 1)), steps=1)
    save(folder / "ckpt", state, step=1, force=True)
    out = {}
    for name, mesh in (("mesh_8x1", make_mesh(MeshConfig(data=8))), ("one_device", None)):
        target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
        shardings = tree_shardings(state, mesh) if mesh is not None else jax.tree.map(
            lambda x: jax.sharding.SingleDeviceSharding(jax.devices()[0]), state)
        target = jax.tree.map(lambda t, s: jax.ShapeDtypeStruct(t.shape, t.dtype, sharding=s), target, shardings)
        restored, step = restore(folder / "ckpt", target)
        devices = {len(x.sharding.device_set) for x in jax.tree.leaves(restored)}
        out[name] = {"max_diff": _max_diff(state, restored), "step": step, "devices": sorted(devices)}
    return out


def main(out: str) -> None:
    assert jax.device_count() == 8, f"needs 8 devices, got {jax.device_count()}"
    path = pathlib.Path(out)
    results = {"devices": jax.device_count(), **sweep_check(), **train_check(), **generate_check(),
               "checkpoint": checkpoint_check(path.parent)}
    path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
