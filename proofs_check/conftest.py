"""proof checks run in their own pytest call under JAX_ENABLE_X64=1; refuse to run otherwise."""

import os

import jax
import pytest

if os.environ.get("JAX_ENABLE_X64", "").lower() not in ("1", "true"):
    raise pytest.UsageError("proofs_check/ must run with JAX_ENABLE_X64=1 (float64 separates maths from rounding)")
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
