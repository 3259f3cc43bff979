"""Shared fixtures of the geometry tests: tiny random-init ports (prime sizes) and token batches.

The model builders are ``cfka_jax.geometry.tiny``'s, which the proof checks also use, so the tests and the checks run
on the same tiny Pythia (untied head, parallel residual) and Qwen2 (tied head) ports.
"""

import jax
import numpy as np
import pytest

from cfka_jax.geometry.net import Net
from cfka_jax.geometry.tiny import build, pythia_cfg, qwen_cfg


@pytest.fixture(scope="session")
def pythia():
    """(model, net, params) of the tiny untied Pythia port."""
    model = build(pythia_cfg())
    return (model, *Net.split(model))


@pytest.fixture(scope="session")
def qwen():
    """(model, net, params) of the tiny tied Qwen2 port."""
    model = build(qwen_cfg())
    return (model, *Net.split(model))


@pytest.fixture(scope="session")
def tokens():
    """Three rows of nine token ids below 37 (valid for both ports)."""
    return jax.numpy.asarray(np.random.default_rng(0).integers(0, 37, size=(3, 9)), jax.numpy.int32)
