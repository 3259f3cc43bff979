"""Qwen3.5's conserved families (``lm_theory/invariants``): the Noether identity dC/dt = 0 along the per-block
gradient flow for every family, the unit-rate C not conserved by that flow, and the group actions behind the
hybrid model's own families (the output gate's diagonal v/o scaling, the gated norm against out_proj, the
zero-centred q/k norm gains) leave the logits unchanged."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.lm_theory.invariants import port_invariants, relative_drift
from cfka_jax.models.qwen3_5 import Qwen35Config, Qwen35Model
from cfka_jax.train.losses import masked_mean_nll
from tests.lm_theory.test_invariants import _logits, _rate_tree, rate
from tests.tolerances import F32

# GQA, partial RoPE (A = 4 of H = 6), q/k/v/o biases, untied head, both layer kinds; ε small so the
# scale-invariant blocks (q_head, k_head) are conserved to float32 rounding (their drift is O(ε / mean(x²)))
CFG = Qwen35Config(vocab_size=13, hidden_size=12, intermediate_size=10, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=6, partial_rotary_factor=2 / 3, attention_bias=True,
                   linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=5, linear_value_head_dim=3,
                   linear_conv_kernel_dim=3, layer_types=("linear_attention", "full_attention"),
                   initializer_range=0.4, rms_norm_eps=1e-7)
FAMILIES = {"norm_attn", "norm_mlp", "mlp", "qk_norm", "qk_pass_norm", "q_head", "k_head", "vo_diag", "gated_norm",
            "norm_final"}


def _port():
    model = Qwen35Model(CFG, rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = nnx.to_pure_dict(params)
    keys = iter(jax.random.split(jax.random.key(1), 64))
    params = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(next(keys), x.shape), params)  # off the init
    return graphdef, params, rest


@pytest.mark.slow  # 55 s at load average 12 on two cores (two jvps through both layer kinds)
def test_noether_identity_along_the_per_block_flow(key):
    graphdef, params, rest = _port()
    tokens = jax.random.randint(key, (3, 7), 0, CFG.vocab_size)

    @jax.jit
    def rel_dc(params):
        loss = lambda p: masked_mean_nll(_logits(graphdef, rest, p, tokens), tokens, jnp.ones(tokens.shape))[0]  # noqa: E731
        flow = jax.tree.map(lambda g, e: -e * g, jax.grad(loss)(params), _rate_tree(params))
        speed = jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(flow)))
        out = []
        for rates in (rate, None):
            values = lambda p, r=rates: {k: v.value for k, v in port_invariants(p, CFG, r).items()}  # noqa: E731
            _, dc = jax.jvp(values, (params,), (flow,))
            scale = {k: jnp.max(jnp.abs(v.scale)) for k, v in port_invariants(params, CFG, rates).items()}
            out.append({k: jnp.max(jnp.abs(dc[k])) / (scale[k] * speed) for k in dc})
        return out

    conserved, unit = rel_dc(params)
    assert set(conserved) == FAMILIES
    assert max(float(v) for v in conserved.values()) <= F32.exact_rtol, conserved
    assert max(float(v) for v in unit.values()) > 1e2 * F32.exact_rtol


def _actions(params, alpha):
    """vo_diag: v dim 1 of KV head 0 by alpha, o_proj row 1 of its query heads 0, 1 by 1/alpha; gated_norm: dim 2
    of the gated norm by alpha, out_proj rows (u, 2) by 1/alpha; qk_norm: q_norm gains of rotary plane 0 by alpha,
    k_norm's by 1/alpha (the gain is 1 + w)."""
    p = jax.tree.map(jnp.copy, params)
    h = CFG.head_size
    att, lin = p["layers"][1]["self_attn"], p["layers"][0]["linear_attn"]
    att["v_proj"]["kernel"] = att["v_proj"]["kernel"].at[:, 1].multiply(alpha)
    att["v_proj"]["bias"] = att["v_proj"]["bias"].at[1].multiply(alpha)
    att["o_proj"]["kernel"] = att["o_proj"]["kernel"].at[np.array([1, h + 1])].multiply(1 / alpha)
    lin["norm"]["scale"] = lin["norm"]["scale"].at[2].multiply(alpha)
    w = CFG.linear_value_head_dim
    lin["out_proj"]["kernel"] = lin["out_proj"]["kernel"].at[np.array([2, w + 2])].multiply(1 / alpha)
    plane = np.array([0, CFG.rotary_dim // 2])
    for name, f in (("q_norm", alpha), ("k_norm", 1 / alpha)):
        s = att[name]["scale"]
        att[name]["scale"] = s.at[plane].set((1 + s[plane]) * f - 1)
    return p


def test_group_actions_leave_the_port_unchanged(key):
    graphdef, params, rest = _port()
    tokens = jax.random.randint(key, (2, 9), 0, CFG.vocab_size)
    moved = _actions(params, 1.7)
    fwd = jax.jit(functools.partial(_logits, graphdef, rest))
    with jax.default_matmul_precision("float32"):
        np.testing.assert_allclose(fwd(moved, tokens), fwd(params, tokens), rtol=0, atol=F32.model_atol)
    drift = relative_drift(port_invariants(params, CFG), port_invariants(moved, CFG))
    assert min(float(drift[k]) for k in ("vo_diag", "gated_norm", "qk_norm")) > 0.05  # the actions move C ...
    assert float(drift["mlp"]) == 0.0 and float(drift["norm_final"]) == 0.0  # ... and nothing else
