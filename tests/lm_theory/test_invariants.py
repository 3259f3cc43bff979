"""Conserved quantities of the ports: the Noether identity dC/dt = 0 along the per-block flow, and the group
actions behind each family leave the logits unchanged."""

import dataclasses
import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.lm_theory.invariants import port_invariants, relative_drift
from cfka_jax.models.olmo import OlmoConfig, OlmoModel
from cfka_jax.models.olmo2 import Olmo2Config, Olmo2Model
from cfka_jax.models.pythia import PythiaConfig, PythiaModel
from cfka_jax.models.qwen import QwenConfig, QwenModel
from cfka_jax.train.losses import masked_mean_nll
from tests.tolerances import F32

QWEN = dict(vocab_size=13, hidden_size=12, intermediate_size=10, num_hidden_layers=1, initializer_range=0.4)
PORTS = {
    "qwen2": (QwenModel, QwenConfig(model_type="qwen2", num_attention_heads=6, num_key_value_heads=2, **QWEN)),
    "qwen2-linear": (QwenModel, QwenConfig(model_type="qwen2", num_attention_heads=6, num_key_value_heads=2,
                                           attention_kind="linear", tie_word_embeddings=True, **QWEN)),
    "qwen3": (QwenModel, QwenConfig(model_type="qwen3", num_attention_heads=4, num_key_value_heads=2, head_dim=6,
                                    attention_bias=True, **QWEN)),
    "pythia-scan": (PythiaModel, PythiaConfig(vocab_size=13, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
                                              intermediate_size=10, rotary_pct=0.5, hidden_act="relu",
                                              initializer_range=0.4, scan_layers=True,
                                              use_parallel_residual=False)),
    # OLMo-2: GQA, whole-projection q/k norms, post-norms, biases; ε small so the scale-invariant blocks are
    # conserved to float32 rounding (module docstring: their drift is O(ε / mean(x²)))
    "olmo2": (Olmo2Model, Olmo2Config(num_attention_heads=4, num_key_value_heads=2, head_dim=6, attention_bias=True,
                                      rms_norm_eps=1e-7, **QWEN)),
    "olmo": (OlmoModel, OlmoConfig(num_attention_heads=6, num_key_value_heads=2, **QWEN)),
    "olmo-clip": (OlmoModel, OlmoConfig(num_attention_heads=6, num_key_value_heads=2, clip_qkv=1.5, **QWEN)),
}
FAMILIES = {
    "qwen2": {"qk_rot", "vo", "norm_attn", "norm_mlp", "mlp", "norm_final"},
    "qwen2-linear": {"qk_rot", "vo", "norm_attn", "norm_mlp", "mlp", "qo", "kv"},
    "qwen3": {"qk_norm", "q_head", "k_head", "vo", "norm_attn", "norm_mlp", "mlp", "norm_final"},
    "pythia-scan": {"qk_rot", "qk_pass", "vo", "norm_attn", "norm_mlp", "mlp", "norm_final"},
    "olmo2": {"qk_norm", "q_proj", "k_proj", "vo", "o_proj", "down_proj", "mlp", "norm_final"},
    "olmo": {"qk_rot", "vo", "mlp"},
    "olmo-clip": {"mlp"},
}


def rate(path: str) -> float:
    return 0.5 + (zlib.crc32(path.encode()) % 1000) / 500


def _port(name):
    cls, cfg = PORTS[name]
    graphdef, params, rest = nnx.split(cls(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)
    return cfg, graphdef, nnx.to_pure_dict(params), rest


def _logits(graphdef, rest, params, tokens):
    return nnx.merge(graphdef, params, rest)(tokens).logits


def _rate_tree(params):
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    names = ["/".join(str(getattr(k, "key", k)) for k in kp) for kp, _ in flat]
    return jax.tree_util.tree_unflatten(jax.tree.structure(params), [rate(n) for n in names])


SLOW = pytest.mark.slow  # ~5 s each on an idle 2-core machine; proofs_check/check_port_invariants covers every
# port, and qwen2-linear (default) holds every qwen2 family but norm_final (tied head) plus qo and kv


@pytest.mark.parametrize("name", [pytest.param("qwen2", marks=SLOW), "qwen2-linear", pytest.param("qwen3", marks=SLOW),
                                  pytest.param("pythia-scan", marks=SLOW), "olmo2", pytest.param("olmo", marks=SLOW),
                                  pytest.param("olmo-clip", marks=SLOW)])
def test_noether_identity_along_the_per_block_flow(name, key):
    cfg, graphdef, params, rest = _port(name)
    tokens = jax.random.randint(key, (3, 7), 0, cfg.vocab_size)

    @jax.jit
    def rel_dc(params):
        loss = lambda p: masked_mean_nll(_logits(graphdef, rest, p, tokens), tokens, jnp.ones(tokens.shape))[0]  # noqa: E731
        flow = jax.tree.map(lambda g, e: -e * g, jax.grad(loss)(params), _rate_tree(params))
        speed = jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(flow)))
        out = []
        for rates in (rate, None):  # the per-block C, and the unit-rate C that this flow does not conserve
            values = lambda p, r=rates: {k: v.value for k, v in port_invariants(p, cfg, r).items()}  # noqa: E731
            _, dc = jax.jvp(values, (params,), (flow,))
            scale = {k: jnp.max(jnp.abs(v.scale)) for k, v in port_invariants(params, cfg, rates).items()}
            out.append({k: jnp.max(jnp.abs(dc[k])) / (scale[k] * speed) for k in dc})
        return out

    conserved, unit = rel_dc(params)
    assert set(conserved) == FAMILIES[name]
    assert max(float(v) for v in conserved.values()) <= F32.exact_rtol
    assert max(float(v) for v in unit.values()) > 1e2 * F32.exact_rtol  # wrong rates: not conserved


def _qwen_actions(params, cfg, alpha, g_hh):
    """qk_rot on rotary plane 0 of KV head 0 (layer 0) by alpha, and GL(H) by g_hh on v/o of KV head 1."""
    p = jax.tree.map(jnp.copy, params)
    att = p["layers"][0]["self_attn"]
    h, half, group = cfg.head_size, cfg.head_size // 2, cfg.num_attention_heads // cfg.num_key_value_heads
    cols_q = np.array([n * h + d for n in range(group) for d in (0, half)])
    for name, cols, f in (("q_proj", cols_q, alpha), ("k_proj", np.array([0, half]), 1 / alpha)):
        att[name]["kernel"] = att[name]["kernel"].at[:, cols].multiply(f)
        att[name]["bias"] = att[name]["bias"].at[cols].multiply(f)
    v = slice(h, 2 * h)
    att["v_proj"]["kernel"] = att["v_proj"]["kernel"].at[:, v].set(att["v_proj"]["kernel"][:, v] @ g_hh)
    att["v_proj"]["bias"] = att["v_proj"]["bias"].at[v].set(att["v_proj"]["bias"][v] @ g_hh)
    inv = jnp.linalg.inv(g_hh)
    for n in range(group, 2 * group):
        rows = slice(n * h, (n + 1) * h)
        att["o_proj"]["kernel"] = att["o_proj"]["kernel"].at[rows].set(inv @ att["o_proj"]["kernel"][rows])
    return p


def test_group_actions_leave_the_port_unchanged(key):
    cfg, graphdef, params, rest = _port("qwen2")
    k1, k2 = jax.random.split(key)
    tokens = jax.random.randint(k1, (2, 9), 0, cfg.vocab_size)
    g_hh = jnp.eye(cfg.head_size) + 0.3 * jax.random.normal(k2, (cfg.head_size, cfg.head_size))
    moved = _qwen_actions(params, cfg, 1.7, g_hh)
    fwd = jax.jit(functools.partial(_logits, graphdef, rest))
    np.testing.assert_allclose(fwd(moved, tokens), fwd(params, tokens), rtol=0, atol=F32.model_atol)
    before, after = port_invariants(params, cfg), port_invariants(moved, cfg)
    drift = relative_drift(before, after)
    assert float(drift["qk_rot"]) > 0.1 and float(drift["vo"]) > 0.1  # the actions move C itself ...
    assert float(drift["mlp"]) == 0.0  # ... and nothing else


def test_olmo_clamp_breaks_the_attention_families(key):
    """With the q/k/v clamp active, qk_rot and vo of the unclamped layout drift along the clamped model's flow:
    the families ``port_invariants`` leaves out for ``clip_qkv`` are not conserved."""
    cfg, graphdef, params, rest = _port("olmo-clip")
    tokens = jax.random.randint(key, (3, 7), 0, cfg.vocab_size)
    loss = lambda p: masked_mean_nll(_logits(graphdef, rest, p, tokens), tokens, jnp.ones(tokens.shape))[0]  # noqa: E731
    flow = jax.tree.map(lambda g, e: -e * g, jax.grad(loss)(params), _rate_tree(params))
    speed = jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(flow)))
    unclamped = dataclasses.replace(cfg, clip_qkv=None)
    values = lambda p: {k: v.value for k, v in port_invariants(p, unclamped, rate).items()}  # noqa: E731
    _, dc = jax.jvp(values, (params,), (flow,))
    scale = {k: jnp.max(jnp.abs(v.scale)) for k, v in port_invariants(params, unclamped, rate).items()}
    for name in ("qk_rot", "vo"):
        assert float(jnp.max(jnp.abs(dc[name])) / (scale[name] * speed)) > 1e2 * F32.exact_rtol
