"""The streams forward pass on the families beyond Pythia / Qwen2: OLMo (non-parametric LayerNorm), OLMo-2
(post-norm) and Qwen3.5 (Gated DeltaNet and full-attention blocks, ``block.mixer()``): logits, h and the block
inputs equal the model call's, with a right-padded row."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.geometry.streams import forward_streams
from cfka_jax.models import family
from cfka_jax.models.family import ModelSize
from tests.tolerances import F32


def _model(name: str):
    fam = family.get(name)
    model = fam.build(fam.from_size(ModelSize(32, 3, 4, 2, 40), vocab_size=37), seed=1)
    for _, leaf in nnx.iter_graph(model):  # move zero / one initialisations so that a misplaced norm shows
        if isinstance(leaf, nnx.Param):
            leaf[...] = leaf[...] + 0.05 * jax.random.normal(jax.random.key(leaf.size), leaf.shape)
    return model


@pytest.mark.parametrize("name", ["olmo", "olmo2", "qwen3_5"])
def test_streams_forward_matches_the_model_call(name):
    model = _model(name)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 37, (3, 9)), jnp.int32)
    mask = jnp.ones_like(tokens).at[2, 6:].set(0)
    st = forward_streams(model, tokens, attention_mask_BS=mask)
    out = model(tokens, attention_mask_BT=mask, return_hidden=True)
    keep = np.asarray(mask, bool)  # padded positions' outputs are not compared
    np.testing.assert_allclose(np.asarray(st.logits)[keep], np.asarray(out.logits)[keep], rtol=F32.exact_rtol,
                               atol=F32.op_atol)
    np.testing.assert_allclose(np.asarray(st.final)[keep], np.asarray(out.final_hidden)[keep],
                               rtol=F32.exact_rtol, atol=F32.op_atol)
    for layer in range(3):
        np.testing.assert_allclose(np.asarray(st.resid_attn[:, :, layer])[keep],
                                   np.asarray(out.hidden_states[layer])[keep], rtol=F32.exact_rtol,
                                   atol=F32.op_atol)
    if name == "qwen3_5":
        assert [b.kind for b in model.layers] == ["linear_attention", "linear_attention", "full_attention"]
