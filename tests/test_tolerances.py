"""The tolerance table: every entry has a value and a reason, the dtype lookup, the sampling rule."""

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
import pytest

from tests import tolerances as tol


def test_every_entry_is_a_positive_value_with_a_reason():
    for table in (tol.F64, tol.F32, tol.BF16):
        for f in dataclasses.fields(table):
            assert getattr(table, f.name) > 0 and len(f.metadata.get("why", "")) > 20, f.name
    assert len(tol.reasons()) == sum(len(dataclasses.fields(t)) for t in (tol.F64, tol.F32, tol.BF16))


def test_lookup_by_dtype():
    assert tol.for_dtype(np.float64) is tol.F64 and tol.for_dtype(jnp.float32) is tol.F32
    assert tol.for_dtype(jnp.bfloat16) is tol.BF16
    with pytest.raises(KeyError, match="float16"):
        tol.for_dtype(np.float16)


def test_sampling_atol_is_k_standard_errors():
    assert tol.sampling_atol(0.5, 40_000) == 4 * 0.5 / 200
    assert tol.sampling_atol(0.3, 100, k=2.0) == 2.0 * 0.3 / math.sqrt(100)
