"""Tiny Pythia and Qwen ports for the geometry checks, in float32 or re-run in float64.

The ports compute norm statistics, RoPE, attention and logits in float32 by design (conventions §15) through the
one constant ``cfka_jax.models.layers.F32``, and their configs accept float32/bfloat16 only. The float64 rows of
the geometry identities (spec §2 Precision: "the identity tests of §3.2, §4.1 and §5.2 also run under x64") re-run
the *same port code* with that constant widened to float64 inside :func:`float64_ports` and the parameter dtype
set on an already validated config. Nothing is changed outside the ``with`` block.

The configs are the tests' tiny prime-size ports (``cfka_jax.geometry.tiny``), here with a dtype argument.
"""

from __future__ import annotations

import contextlib
import copy

import jax
import jax.numpy as jnp
from flax import nnx

from cfka_jax.geometry import tiny
from cfka_jax.geometry.resets import build as build_from
from cfka_jax.geometry.resets import untie
from cfka_jax.geometry.tiny import build, random_tokens
from cfka_jax.models import layers

__all__ = ["build", "float64_ports", "pythia_cfg", "qwen_cfg", "random_tokens", "untied_copy"]


@contextlib.contextmanager
def float64_ports():
    """Widen the ports' float32 pin to float64 for the duration of the block (needs x64 enabled)."""
    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError("float64_ports needs jax_enable_x64")
    old = layers.F32
    layers.F32 = jnp.float64
    try:
        yield
    finally:
        layers.F32 = old


def _with_dtype(cfg, dtype):
    cfg = copy.copy(cfg)
    object.__setattr__(cfg, "dtype", dtype)  # float64 is outside the validated set on purpose (see module doc)
    return cfg


def untied_copy(model) -> nnx.Module:
    """The *functionally untied* copy of a tied port (same logits; the readout is a separate tensor), in the
    model's dtype (``resets.functionally_untied`` for float64 configs)."""
    dtype = model.cfg.dtype
    cfg, params = untie(nnx.to_pure_dict(nnx.state(model, nnx.Param)), _with_dtype(model.cfg, jnp.float32))
    cfg = cfg if dtype == jnp.float32 else _with_dtype(cfg, dtype)
    return build_from(type(model), cfg, params)


def pythia_cfg(dtype=jnp.float32):
    cfg = tiny.pythia_cfg()
    return cfg if dtype == jnp.float32 else _with_dtype(cfg, dtype)


def qwen_cfg(dtype=jnp.float32, *, tied: bool = True, model_type: str = "qwen2"):
    cfg = tiny.qwen_cfg(tied=tied, model_type=model_type)
    return cfg if dtype == jnp.float32 else _with_dtype(cfg, dtype)
