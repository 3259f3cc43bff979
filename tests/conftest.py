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


@pytest.fixture(autouse=True)
def _no_global_x64_leak():
    """Float64 is switched on only inside a check (the ``x64`` fixture); a test that leaves it on globally fails."""
    yield
    assert not jax.config.read("jax_enable_x64"), "this test left jax_enable_x64 on for the rest of the run"
