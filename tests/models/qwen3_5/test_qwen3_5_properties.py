"""Qwen3.5 properties that need no reference: causality; LoRA and freezing through the registry; remat leaves
losses and gradients unchanged; ``generate`` with right-padded prompts of different lengths decodes each row as
it would alone (the recurrent state skips the padding); the fused attention path equals the explicit one.
"""

import flax.nnx as nnx
import jax
import numpy as np
import pytest

from cfka_jax.continual import peft
from cfka_jax.models import family, generate, qwen3_5
from cfka_jax.models.qwen3_5 import Qwen35Config
from tests.models.parity import (
    assert_causal,
    assert_close,
    assert_frozen_step,
    assert_remat_and_scan_preserve_gradients,
    forward,
)
from tests.tolerances import F32

CFG = Qwen35Config(vocab_size=41, hidden_size=24, intermediate_size=29, num_hidden_layers=3, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=8, partial_rotary_factor=0.5, linear_num_key_heads=1,
                   linear_num_value_heads=2, linear_key_head_dim=5, linear_value_head_dim=7, linear_conv_kernel_dim=3, initializer_range=0.2,
                   layer_types=("linear_attention", "full_attention", "linear_attention"), chunk_size=4)
TOKENS = np.random.default_rng(0).integers(0, 41, (2, 11))


@pytest.fixture(scope="module")
def model():
    m = family.of(CFG).build(CFG, seed=3)
    for _, leaf in nnx.iter_graph(m):  # zero-init norms and ones would hide misplaced gains: move every parameter
        if isinstance(leaf, nnx.Param):
            leaf[...] = leaf[...] + 0.1 * jax.random.normal(jax.random.key(leaf.size), leaf.shape)
    return m


def test_causal(model):
    assert_causal(model, TOKENS, cut=6)


def test_lora_adapts_every_block_linear_of_both_kinds(model):
    base = np.asarray(forward(model, TOKENS).logits)
    adapted = peft.apply_lora(nnx.clone(model), peft.LoRAConfig(rank=3, alpha=6.0, dropout=0.0), rngs=nnx.Rngs(2))
    adapters = [path for path, m in nnx.iter_modules(adapted) if isinstance(m, peft.LoRALinear)]
    names = {(p[1], p[-1]) for p in adapters}
    assert (0, "in_proj_qkv") in names and (1, "q_proj") in names and (2, "out_proj") in names
    assert len(adapters) == 2 * 5 + 4 + 3 * 3  # two linear mixers, one attention, three MLPs
    assert_close(forward(adapted, TOKENS).logits, base, F32.op_atol, "zero-B LoRA")
    for i, (_, m) in enumerate(p for p in nnx.iter_modules(adapted) if isinstance(p[1], peft.LoRALinear)):
        m.lora_b[...] = 0.3 * jax.random.normal(jax.random.key(3 + i), m.lora_b[...].shape)
    moved = np.asarray(forward(adapted, TOKENS).logits)
    assert np.abs(moved - base).max() > 1e-2
    plain = peft.merge_and_unload(adapted)
    assert qwen3_5.export(plain).keys() == qwen3_5.export(model).keys()
    assert_close(forward(plain, TOKENS).logits, moved, F32.model_atol, "merged LoRA")


def test_frozen_embedding_and_first_block(model):
    assert_frozen_step(model, TOKENS)


@pytest.mark.slow  # ~40 s on two loaded cores
def test_remat_preserves_gradients(model):
    assert_remat_and_scan_preserve_gradients(model, qwen3_5, TOKENS[:, :9], forms=[(False, True)])


@pytest.mark.slow  # ~35 s on two loaded cores (three compiled decode loops)
def test_generate_right_padded_rows_decode_as_alone(model):
    prompts = [TOKENS[0, :9].tolist(), TOKENS[1, :4].tolist()]
    sampler = generate.SamplerConfig(max_new_tokens=6, temperature=0.0)
    tokens, lengths = generate.pad_prompts(prompts)
    with jax.default_matmul_precision("float32"):
        both = generate.generate(model, tokens, lengths, jax.random.key(0), sampler).tokens
        alone = [generate.generate(model, np.asarray([p], np.int32), None, jax.random.key(0), sampler).tokens[0]
                 for p in prompts]
    np.testing.assert_array_equal(np.asarray(both), np.stack([np.asarray(a) for a in alone]))


@pytest.mark.slow  # ~30 s at load average 12 on two cores
def test_fused_attention_equals_explicit(model):
    import dataclasses

    tensors = qwen3_5.export(model)
    fused = qwen3_5.load(dataclasses.replace(CFG, attention_impl="fused"), tensors)
    explicit = qwen3_5.load(dataclasses.replace(CFG, attention_impl="explicit"), tensors)
    mask = np.ones_like(TOKENS)
    mask[1, :3] = 0
    for kw in ({}, {"attention_mask_BT": mask}):
        assert_close(forward(fused, TOKENS, **kw).logits, forward(explicit, TOKENS, **kw).logits, F32.op_atol,
                     f"fused vs explicit {sorted(kw)}")


def test_segment_ids_are_refused(model):
    with pytest.raises(ValueError, match="recurrent state across documents"):
        model(TOKENS, segment_ids_BS=np.zeros_like(TOKENS))


def test_token_mixing_readout_of_a_linear_layer(model):
    """``GatedDeltaNet.token_mixing``: the matrices that mix the layer's values into its delta-rule output."""
    import jax.numpy as jnp

    from cfka_jax.models.qwen3_5 import delta

    block = model.layers[0]
    x = block.input_layernorm(model._lookup(jnp.asarray(TOKENS)))
    a = np.asarray(block.linear_attn.token_mixing(x))
    q, k, v, g, beta, _, _ = block.linear_attn._rule_inputs(x, None, None)
    o, _ = delta.chunked(q, k, v, g, beta, chunk_size=4)
    assert a.shape == (2, CFG.linear_num_value_heads, 11, 11) and np.all(np.triu(a, 1) == 0)
    assert_close(np.einsum("buts,bsuw->btuw", a, np.asarray(v)), o, F32.op_atol, "A v")
