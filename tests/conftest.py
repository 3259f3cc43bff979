"""Strict JAX settings for the test suite: rank/dtype promotion raise; two fake CPU devices."""

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_num_cpu_devices", 2)


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture
def x64():
    """Float64 for the duration of one theory test (never on import, never globally)."""
    with jax.enable_x64(True):
        yield
