"""Document masking of packed sequences: segment ids make a packed row behave like its documents run alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.models.pythia import PythiaConfig, PythiaModel
from tests.helpers import tiny_model
from tests.tolerances import F32


def _pythia():
    cfg = PythiaConfig(vocab_size=37, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=29, rotary_pct=0.34, initializer_range=0.2)
    return PythiaModel(cfg, rngs=nnx.Rngs(1))


@pytest.mark.parametrize("make", [tiny_model, _pythia], ids=["qwen", "pythia"])
def test_packed_row_with_segments_equals_documents_alone(make):
    model = make()
    graphdef, state = nnx.split(model)
    call = jax.jit(lambda st, t, p, seg: nnx.merge(graphdef, st)(t, positions_BS=p, segment_ids_BS=seg).logits)
    d1, d2 = np.arange(3, 8, dtype=np.int32), np.arange(11, 17, dtype=np.int32)
    row = np.concatenate([d1, d2])[None]
    pos = np.concatenate([np.arange(5), np.arange(6)]).astype(np.int32)[None]
    seg = np.asarray([[1] * 5 + [2] * 6], np.int32)
    packed = call(state, jnp.asarray(row), jnp.asarray(pos), jnp.asarray(seg))
    alone1 = call(state, jnp.asarray(d1[None]), jnp.asarray(pos[:, :5]), jnp.ones((1, 5), jnp.int32))
    alone2 = call(state, jnp.asarray(d2[None]), jnp.asarray(pos[:, 5:]), jnp.ones((1, 6), jnp.int32))
    np.testing.assert_allclose(packed[:, :5], alone1, atol=F32.model_atol)
    np.testing.assert_allclose(packed[:, 5:], alone2, atol=F32.model_atol)
    unmasked = call(state, jnp.asarray(row), jnp.asarray(pos), jnp.ones_like(jnp.asarray(seg)))
    assert float(jnp.max(jnp.abs(unmasked[:, 5:] - alone2))) > 1e-3  # without segments document 2 sees document 1


def test_segments_with_a_cache_are_rejected():
    model = tiny_model()
    with pytest.raises(ValueError, match="segment_ids"):
        model(jnp.ones((1, 3), jnp.int32), cache=model.init_cache(1, 8), segment_ids_BS=jnp.ones((1, 3), jnp.int32))
