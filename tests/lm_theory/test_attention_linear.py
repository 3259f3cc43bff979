"""Received attention of Gated DeltaNet layers (``lm_theory/attention.py``): one map per layer in layer order, the
linear layers' row-normalised |mixing matrix|, the full layers' softmax weights unchanged; ``measures.py`` reads
the same maps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.lm_theory import biography as bio
from cfka_jax.lm_theory.attention import attention_mass, layer_kinds, layer_maps, received_mass
from cfka_jax.lm_theory.measures import head_masses
from cfka_jax.models import family
from cfka_jax.models.qwen3_5 import Qwen35Config
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.presets import BIOGRAPHY
from tests.lm_theory.test_attention import _brute
from tests.tolerances import F32

CFG = Qwen35Config(vocab_size=41, hidden_size=24, intermediate_size=29, num_hidden_layers=3, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=8, partial_rotary_factor=0.5, linear_num_key_heads=1,
                   linear_num_value_heads=2, linear_key_head_dim=5, linear_value_head_dim=7, linear_conv_kernel_dim=3,
                   initializer_range=0.2, layer_types=("linear_attention", "full_attention", "linear_attention"),
                   chunk_size=4)
TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, 41, (2, 11)), jnp.int32)
POS = jnp.broadcast_to(jnp.arange(11, dtype=jnp.int32), (2, 11))


@pytest.fixture(scope="module")
def model():
    m = family.of(CFG).build(CFG, seed=3)
    for _, leaf in nnx.iter_graph(m):  # move the zero / one initialisations so that a misplaced norm shows
        if isinstance(leaf, nnx.Param):
            leaf[...] = leaf[...] + 0.1 * jax.random.normal(jax.random.key(leaf.size), leaf.shape)
    return m


def test_received_mass_is_the_row_normalised_magnitude():
    a = jnp.asarray([[[[-2.0, 0.0, 0.0], [1.0, -3.0, 0.0], [0.0, 0.0, 0.0]]]])
    want = np.asarray([[[[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.0, 0.0, 0.0]]]])
    np.testing.assert_allclose(received_mass(a), want, rtol=0, atol=F32.few_ulps)


def test_layer_maps_in_layer_order(model):
    assert layer_kinds(model) == CFG.layer_types
    maps = layer_maps(model, TOKENS, positions_BS=POS)
    out = model(TOKENS, positions_BS=POS, return_attn=True)
    assert [m.shape for m in maps] == [(2, 2, 11, 11), (2, 4, 11, 11), (2, 2, 11, 11)]
    np.testing.assert_array_equal(maps[1], out.attentions[0])  # the full layer's softmax weights, untouched
    block = model.layers[0]  # layer 0 reads the embeddings: its map from the mixer directly
    a = block.linear_attn.token_mixing(block.input_layernorm(model.embed_tokens(TOKENS)))
    np.testing.assert_allclose(maps[0], received_mass(a), rtol=F32.exact_rtol, atol=F32.few_ulps)
    for m in (maps[0], maps[2]):
        m = np.asarray(m)
        assert np.all(m >= 0) and np.all(np.triu(m, 1) == 0)  # causal, non-negative
        np.testing.assert_allclose(m.sum(-1), 1.0, rtol=0, atol=1e-5)  # row-stochastic like softmax
        assert not np.allclose(m, np.tril(np.ones((11, 11))) / np.arange(1, 12)[:, None], atol=1e-3)


def test_measures_refuse_layers_with_different_head_counts(model):
    maps = layer_maps(model, TOKENS, positions_BS=POS)
    ex = {k: jnp.zeros(1, jnp.int32) for k in ("b", "q", "start", "fact")} | {"valid": jnp.ones(1, bool)}
    with pytest.raises(ValueError, match="head counts"):
        head_masses(maps, TOKENS, ex, jnp.ones(2, bool), num_tokens=41)


def test_attention_mass_of_a_qwen3_5_port_matches_brute_force(bundle):
    model = build_model(BIOGRAPHY["smoke"], "qwen3_5", len(bundle.tokenizer), seed=2)
    assert layer_kinds(model) == ("linear_attention", "full_attention")
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    ex = bio.examples(bundle, "pt_train", bio.object_vocabulary(bundle))
    packed, _ = bundle.eval["pt_train"]
    keep = ex.chunk < 3
    got = attention_mass(graphdef, params, rest, packed, ex.chunk[keep], ex.query[keep], ex.start[keep],
                         num_tokens=len(bundle.tokenizer), batch_size=2)
    maps = layer_maps(nnx.merge(graphdef, params, rest), jnp.asarray(packed.tokens[:3]),
                      positions_BS=jnp.asarray(packed.positions[:3]))
    abar = np.asarray(jnp.stack([jnp.mean(a, axis=1) for a in maps]))
    want = _brute(abar, packed.tokens[:3], ex.chunk[keep], ex.query[keep], ex.start[keep], len(bundle.tokenizer))
    assert got.shape[0] == 2 and got[0].sum() > 0  # the linear layer is measured
    np.testing.assert_allclose(got, want, rtol=F32.exact_rtol, atol=F32.few_ulps)
