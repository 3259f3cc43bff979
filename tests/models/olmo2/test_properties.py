"""OLMo-2 properties that need no reference: causality; LoRA and freezing through the registry; scan + remat leave
losses and gradients unchanged; the norm's bfloat16 order of operations is HF's.

The model has grouped-query attention and an untied head, a combination the default-suite parity case (tied)
does not hold.
"""

import numpy as np
import pytest

from cfka_jax.models import family, layers, olmo2
from cfka_jax.models.olmo2 import Olmo2Config
from cfka_jax.models.olmo2.model import olmo2_rms_norm
from tests.models.parity import (
    assert_causal,
    assert_frozen_step,
    assert_lora_round_trip,
    assert_remat_and_scan_preserve_gradients,
)

CFG = Olmo2Config(vocab_size=41, hidden_size=24, intermediate_size=29, num_hidden_layers=3, num_attention_heads=6,
                  num_key_value_heads=2, initializer_range=0.2)
TOKENS = np.random.default_rng(0).integers(0, 41, (2, 11))


@pytest.fixture(scope="module")
def model():
    return family.of(CFG).build(CFG, seed=3)


def test_causal(model):
    assert_causal(model, TOKENS, cut=6)


def test_lora_round_trip(model):
    assert_lora_round_trip(model, TOKENS)


def test_frozen_embedding_and_first_block(model):
    assert_frozen_step(model, TOKENS)


def test_scan_and_remat_preserve_gradients(model):
    assert_remat_and_scan_preserve_gradients(model, olmo2, TOKENS[:, :9], forms=[(True, True)])


@pytest.mark.torch
def test_bf16_norm_scales_in_float32_before_the_cast_as_hf():
    """HF ``Olmo2RMSNorm`` returns ``(w * x_hat).to(bf16)``; Llama's order ``w * x_hat.to(bf16)`` rounds twice."""
    torch = pytest.importorskip("torch")
    import jax.numpy as jnp
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

    rng = np.random.default_rng(5)
    x = torch.tensor(rng.normal(size=(13, 47)) * 3, dtype=torch.bfloat16)
    ref = Olmo2RMSNorm(47, eps=1e-6).to(torch.bfloat16)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(1 + 0.2 * rng.normal(size=47)))
        want = ref(x).float().numpy()
    x_j = jnp.asarray(x.float().numpy()).astype(jnp.bfloat16)
    w_j = jnp.asarray(ref.weight.detach().float().numpy()).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(olmo2_rms_norm(x_j, w_j, 1e-6).astype(jnp.float32)), want)
    llama_order = np.asarray(layers.rms_norm(x_j, w_j, 1e-6).astype(jnp.float32))
    assert (llama_order != want).mean() > 0.05
