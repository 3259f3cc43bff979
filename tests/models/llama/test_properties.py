"""Llama properties that need no reference: causality; scan + remat leave losses and gradients unchanged.

The model is TinyLlama's shape in miniature (grouped-query attention, default RoPE, untied head), the case the
default-suite parity test does not cover.
"""

import numpy as np
import pytest

from cfka_jax.models import family, llama
from cfka_jax.models.llama import LlamaConfig
from tests.models.parity import assert_causal, assert_remat_and_scan_preserve_gradients

CFG = LlamaConfig(vocab_size=41, hidden_size=24, intermediate_size=29, num_hidden_layers=3, num_attention_heads=6,
                  num_key_value_heads=2, initializer_range=0.2)


@pytest.fixture(scope="module")
def model():
    return family.of(CFG).build(CFG, seed=3)


def test_causal(model):
    assert_causal(model, np.random.default_rng(0).integers(0, 41, (2, 11)), cut=6)


@pytest.mark.slow  # the shared scan/remat machinery is checked on Qwen by default; the Llama parity scan case is slow
def test_scan_and_remat_preserve_gradients(model):
    assert_remat_and_scan_preserve_gradients(
        model, llama, np.random.default_rng(1).integers(0, 41, (2, 9)), forms=[(True, True)]
    )
