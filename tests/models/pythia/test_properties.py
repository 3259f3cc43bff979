"""Pythia properties that need no reference: causality; remat leaves losses and gradients unchanged
(scan + remat is checked on Qwen, scan alone on both families in the parity suite)."""

import flax.nnx as nnx
import numpy as np
import pytest

from cfka_jax.models import PythiaConfig, PythiaModel, pythia
from tests.models.parity import assert_causal, assert_remat_and_scan_preserve_gradients

CFG = PythiaConfig(
    vocab_size=41, hidden_size=28, num_attention_heads=2, intermediate_size=31, num_hidden_layers=3,
    rotary_pct=0.3, initializer_range=0.2,  # H = 14, R = int(4.2) = 4
)


@pytest.fixture(scope="module")
def model():
    return PythiaModel(CFG, rngs=nnx.Rngs(5))


def test_causal(model):
    assert_causal(model, np.random.default_rng(0).integers(0, 41, (2, 11)), cut=4)


def test_scan_and_remat_preserve_gradients(model):
    assert_remat_and_scan_preserve_gradients(
        model, pythia, np.random.default_rng(1).integers(0, 41, (2, 9)), forms=[(False, True)]
    )
