"""OLMo-2 configuration (``model_type`` ``"olmo2"``: OLMo-2-1124-7B/13B, OLMo-2-0325-32B, OLMo-2-0425-1B): a frozen
dataclass built from and written back to HF ``config.json``.

The fields OLMo has (``models/olmo/config.OlmoFields``: sizes, GQA, ``head_dim``, default RoPE only, no dropout)
plus ``rms_norm_eps``, the epsilon of every RMSNorm (block post-norms, the whole-projection q/k norms and the final
norm). HF's ``Olmo2Config`` has no ``clip_qkv``; a ``clip_qkv: null`` left in a file is accepted, a value refused
(HF's OLMo-2 model would silently ignore it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from cfka_jax.models.olmo.config import OlmoFields, pop_null


@dataclasses.dataclass(frozen=True)
class Olmo2Config(OlmoFields):
    """OLMo-2 hyperparameters: :class:`~cfka_jax.models.olmo.config.OlmoFields` plus ``rms_norm_eps``."""

    MODEL_TYPE: ClassVar[str] = "olmo2"
    ARCHITECTURE: ClassVar[str] = "Olmo2ForCausalLM"
    WHAT: ClassVar[str] = "OLMo-2"

    rms_norm_eps: float = 1e-5

    def __post_init__(self):
        super().__post_init__()
        if not self.rms_norm_eps > 0:
            raise ValueError(f"rms_norm_eps must be > 0, got {self.rms_norm_eps}")

    @classmethod
    def _pop_own(cls, d: dict[str, Any], problems: list[str]) -> None:
        pop_null(d, problems, "clip_qkv", "OLMo-2 has no q/k/v clamp; HF's Olmo2 model ignores the field")
