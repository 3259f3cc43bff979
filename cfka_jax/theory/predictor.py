"""The type of a closed form: a factory does the expensive work once and returns ``predict(t)``.

``t`` may be a scalar or an array of times; the result gains the leading axes of ``t``
(``predict(ts)[i] == predict(ts[i])``), so a sweep over times needs no Python loop.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from cfka_jax.shapes import Array, Float


@runtime_checkable
class Predictor(Protocol):
    """``predict(t) -> value at t``, shape ``t.shape + value_shape``."""

    def __call__(self, t: Float[Array, "*times"] | float) -> Float[Array, "*times ..."]: ...
