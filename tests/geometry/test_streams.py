"""The streams forward pass equals the port's call, and its streams are the spec's (§3.3, pitfall 24)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry.net import Net, model_facts, param_roles
from cfka_jax.geometry.streams import forward_streams
from cfka_jax.geometry.tiny import build, pythia_cfg
from tests.tolerances import F32


@pytest.mark.parametrize("family", ["pythia", "qwen"])
def test_streams_forward_matches_the_model_call(family, request, tokens):
    model, _, _ = request.getfixturevalue(family)
    mask = jnp.ones_like(tokens).at[2, 6:].set(0)  # a right-padded row
    st = forward_streams(model, tokens, attention_mask_BS=mask)
    out = model(tokens, attention_mask_BT=mask, return_hidden=True)
    np.testing.assert_allclose(st.logits, out.logits, rtol=F32.exact_rtol, atol=F32.op_atol)
    np.testing.assert_allclose(st.final, out.final_hidden, rtol=F32.exact_rtol, atol=F32.op_atol)
    layers = model.cfg.num_hidden_layers
    for layer in range(layers):  # HF hidden_states[l] is the input of block l for l < L
        np.testing.assert_allclose(st.resid_attn[:, :, layer], out.hidden_states[layer], rtol=F32.exact_rtol,
                                   atol=F32.op_atol)
        block = model.layers[layer]
        np.testing.assert_allclose(st.norm_attn[:, :, layer], block.input_layernorm(st.resid_attn[:, :, layer]),
                                   rtol=F32.exact_rtol, atol=F32.op_atol)
        np.testing.assert_allclose(st.norm_mlp[:, :, layer], block.post_attention_layernorm(st.resid_mlp[:, :, layer]),
                                   rtol=F32.exact_rtol, atol=F32.op_atol)


def test_pythia_mlp_stream_is_the_block_input_and_qwen_adds_attention(pythia, qwen, tokens):
    st_p = forward_streams(pythia[0], tokens)
    np.testing.assert_array_equal(st_p.resid_mlp, st_p.resid_attn)  # parallel residual: ln2(x_l)
    st_q = forward_streams(qwen[0], tokens)
    assert float(jnp.max(jnp.abs(st_q.resid_mlp - st_q.resid_attn))) > 1e-3  # sequential: x_l + attn(x_l)


def test_model_facts_and_roles(pythia, qwen):
    assert model_facts(pythia[1].cfg) == {"family": "pythia", "tied": False, "norm": "layernorm", "eps": 1e-5,
                                          "parallel_residual": True, "head_bias": False}
    assert model_facts(qwen[1].cfg)["tied"] and model_facts(qwen[1].cfg)["norm"] == "rmsnorm"
    assert "bias" not in pythia[2]["embed_out"]  # the untied Pythia head has no bias
    roles = param_roles(pythia[2], pythia[1].cfg)
    assert roles[("embed_out", "kernel")] == "readout" and roles[("embed_in", "embedding")] == "embedding"
    assert roles[("layers", 0, "attention", "query_key_value", "kernel")] == "kernel"
    assert roles[("layers", 1, "input_layernorm", "scale")] == "other"
    assert param_roles(qwen[2], qwen[1].cfg)[("embed_tokens", "embedding")] == "tied"


def test_scanned_models_are_refused():
    cfg = dataclasses.replace(pythia_cfg(), scan_layers=True)
    with pytest.raises(ValueError, match="scan_layers"):
        Net.split(build(cfg))


def test_streams_under_jit(pythia, tokens):
    _, net, params = pythia
    st = jax.jit(lambda p, t: forward_streams(net.model(p), t))(params, tokens)
    assert st.resid_attn.shape == (3, 9, 2, 30) and st.logits.shape == (3, 9, 41)


@pytest.mark.parametrize("name", ["olmo", "olmo2"])
def test_streams_of_the_olmo_families(name, tokens):
    """OLMo (parameter-free pre-norms, clamped q/k/v) and OLMo-2 (post-norm: the sublayers read the raw residual)."""
    from cfka_jax.models import Olmo2Config, OlmoConfig

    sizes = dict(vocab_size=37, hidden_size=24, intermediate_size=29, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=2, initializer_range=0.2, max_position_embeddings=64)
    cfg = OlmoConfig(**sizes, clip_qkv=0.5) if name == "olmo" else Olmo2Config(**sizes)
    model = build(cfg)
    mask = jnp.ones_like(tokens).at[2, 6:].set(0)
    st = forward_streams(model, tokens, attention_mask_BS=mask)
    out = model(tokens, attention_mask_BT=mask, return_hidden=True)
    np.testing.assert_allclose(st.logits, out.logits, rtol=F32.exact_rtol, atol=F32.op_atol)
    for layer in range(cfg.num_hidden_layers):
        np.testing.assert_allclose(st.resid_attn[:, :, layer], out.hidden_states[layer], rtol=F32.exact_rtol,
                                   atol=F32.op_atol)
    if name == "olmo2":
        np.testing.assert_array_equal(st.norm_attn, st.resid_attn)  # no norm before the sublayers
        np.testing.assert_array_equal(st.norm_mlp, st.resid_mlp)
    else:  # the parameter-free LayerNorm of the residual
        for layer, block in enumerate(model.layers):
            np.testing.assert_allclose(st.norm_attn[:, :, layer], block.input_layernorm(st.resid_attn[:, :, layer]),
                                       rtol=F32.exact_rtol, atol=F32.op_atol)
    assert float(jnp.max(jnp.abs(st.resid_mlp - st.resid_attn))) > 1e-3
    assert model_facts(cfg)["norm"] == ("nonparametric_layernorm" if name == "olmo" else "rmsnorm")
