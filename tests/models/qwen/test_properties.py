"""Qwen properties that need no reference: causality; scan + remat leaves losses and gradients unchanged."""

import flax.nnx as nnx
import numpy as np
import pytest

from cfka_jax.models import QwenConfig, QwenModel, qwen
from tests.models.parity import assert_causal, assert_remat_and_scan_preserve_gradients

CFG = QwenConfig(
    model_type="qwen3", vocab_size=41, hidden_size=23, head_dim=6, intermediate_size=29, num_hidden_layers=3,
    num_attention_heads=6, num_key_value_heads=3, initializer_range=0.2,
)


@pytest.fixture(scope="module")
def model():
    return QwenModel(CFG, rngs=nnx.Rngs(3))


def test_causal(model):
    assert_causal(model, np.random.default_rng(0).integers(0, 41, (2, 11)), cut=6)


def test_scan_and_remat_preserve_gradients(model):
    assert_remat_and_scan_preserve_gradients(
        model, qwen, np.random.default_rng(1).integers(0, 41, (2, 9)), forms=[(True, True)]
    )
