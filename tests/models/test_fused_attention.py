"""The fused attention path (``jax.nn.dot_product_attention``) against the explicit one (models/layers.py).

On CPU the fused path is XLA's implementation; on GPU the same calls reach cuDNN's flash kernel for bf16. Both
paths must give the same outputs within the float32 tolerances, for plain causal calls (``is_causal``), padding,
packed segments, GQA and the KV cache; calls that return attention maps take the explicit path.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.models import layers
from cfka_jax.models.generate import SamplerConfig, generate
from cfka_jax.models.pythia import PythiaConfig, PythiaModel
from cfka_jax.models.qwen import QwenConfig, QwenModel
from tests.tolerances import BF16, F32

QWEN = QwenConfig(model_type="qwen2", vocab_size=53, hidden_size=24, intermediate_size=37, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, head_dim=4, initializer_range=0.2)
PYTHIA = PythiaConfig(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=41, rotary_pct=0.5, initializer_range=0.2)


def _pair(cfg, family):
    explicit = family(dataclasses.replace(cfg, attention_impl="explicit"), rngs=nnx.Rngs(0))
    fused = family(dataclasses.replace(cfg, attention_impl="fused"), rngs=nnx.Rngs(0))
    return explicit, fused


def _tokens(rows: int = 3, seq: int = 13, seed: int = 0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, 53, size=(rows, seq)), jnp.int32)


def test_auto_is_explicit_on_cpu_and_bad_names_are_refused():
    assert jax.default_backend() == "cpu" and layers.resolve_attention_impl("auto") == "explicit"
    with pytest.raises(ValueError, match="attention_impl"):
        layers.resolve_attention_impl("flash")
    with pytest.raises(ValueError, match="attention_impl"):
        dataclasses.replace(QWEN, attention_impl="flash")
    assert "attention_impl" not in QWEN.to_hf_config() and "attention_impl" not in PYTHIA.to_hf_config()


@pytest.mark.parametrize("masked", [False, True])
def test_kernel_matches_the_explicit_attention_with_gqa(masked):
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 9, heads, 4)), jnp.float32) for heads in (6, 2, 2))
    causal = jnp.tril(jnp.ones((9, 9), bool))[None].repeat(2, 0)
    mask = causal & jnp.asarray(rng.random((2, 1, 9)) > 0.3) | jnp.eye(9, dtype=bool)[None] if masked else causal
    want, _ = layers.attention(q, k, v, mask)
    got = layers.fused_attention(q, k, v, mask if masked else None)
    np.testing.assert_allclose(got, want, rtol=0, atol=F32.op_atol)


@pytest.mark.parametrize("cfg, family", [(QWEN, QwenModel), pytest.param(PYTHIA, PythiaModel, marks=pytest.mark.slow)],
                         ids=["qwen", "pythia"])
def test_model_logits_and_gradients_agree(cfg, family):
    explicit, fused = _pair(cfg, family)
    tokens = _tokens()
    np.testing.assert_allclose(fused(tokens).logits, explicit(tokens).logits, rtol=0, atol=F32.model_atol)

    def loss(model):
        return jnp.mean(jax.nn.logsumexp(model(tokens).logits, axis=-1))

    grad = nnx.jit(nnx.grad(loss))
    g_e, g_f = grad(explicit), grad(fused)
    for a, b in zip(jax.tree.leaves(g_e), jax.tree.leaves(g_f)):
        np.testing.assert_allclose(b, a, rtol=F32.model_rtol, atol=F32.model_atol)


def test_pythia_logits_agree():
    """Partial rotary and the parallel residual through the fused kernel (gradients: the slow variant above)."""
    explicit, fused = _pair(PYTHIA, PythiaModel)
    tokens = _tokens(seed=5)
    np.testing.assert_allclose(fused(tokens).logits, explicit(tokens).logits, rtol=0, atol=F32.model_atol)


def test_padding_segments_and_maps():
    explicit, fused = _pair(QWEN, QwenModel)
    tokens = _tokens(seed=2)
    pad = jnp.asarray(np.arange(13)[None, :] < np.array([[13], [9], [4]]), jnp.int32)
    valid = np.asarray(pad, bool)
    got, want = fused(tokens, attention_mask_BT=pad).logits, explicit(tokens, attention_mask_BT=pad).logits
    np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(want)[valid], rtol=0, atol=F32.model_atol)
    seg = jnp.asarray(np.repeat([[0] * 5 + [1] * 8], 3, axis=0), jnp.int32)
    pos = jnp.asarray(np.repeat([list(range(5)) + list(range(8))], 3, axis=0), jnp.int32)
    np.testing.assert_allclose(fused(tokens, segment_ids_BS=seg, positions_BS=pos).logits,
                               explicit(tokens, segment_ids_BS=seg, positions_BS=pos).logits,
                               rtol=0, atol=F32.model_atol)
    out = fused(tokens, return_attn=True)  # maps asked for: the explicit path, same numbers
    assert out.attentions is not None and len(out.attentions) == QWEN.num_hidden_layers
    np.testing.assert_array_equal(out.logits, explicit(tokens, return_attn=True).logits)


def test_cached_greedy_generation_is_identical():
    explicit, fused = _pair(QWEN, QwenModel)
    prompt, lengths = _tokens(rows=2, seq=5, seed=3), jnp.asarray([5, 3], jnp.int32)
    cfg = SamplerConfig(max_new_tokens=8, temperature=0.0)
    a = generate(explicit, prompt, lengths, jax.random.key(0), cfg)
    b = generate(fused, prompt, lengths, jax.random.key(0), cfg)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))


def test_bfloat16_fused_is_within_bf16_tolerance():
    cfg = dataclasses.replace(QWEN, dtype=jnp.bfloat16)
    explicit, fused = _pair(cfg, QwenModel)
    tokens = _tokens(seed=4)
    np.testing.assert_allclose(fused(tokens).logits, explicit(tokens).logits, rtol=0, atol=BF16.model_atol)
