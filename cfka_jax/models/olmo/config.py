"""OLMo configuration (``model_type`` ``"olmo"``: OLMo-1B/7B, OLMo-7B-0424/0724) and the fields OLMo-2 shares
with it: frozen dataclasses built from and written back to HF ``config.json``.

Read from ``config.json``: every field of :class:`OlmoConfig`; RoPE as the legacy top-level ``rope_theta`` (with
``rope_scaling: null``) or the transformers-5 ``rope_parameters`` dict. Only default RoPE is supported: a scaled
``rope_type`` (``linear``, ``dynamic``, ``yarn``, ``llama3``, ...) or a non-null ``rope_scaling`` is refused by
name. ``attention_dropout`` is accepted only at 0. ``head_dim`` is not written by released checkpoints; HF honours
it when present (q/k/v/o widths and RoPE), and so do we.

OLMo has no norm field: its LayerNorms have a fixed epsilon of 1e-5 (:data:`LAYER_NORM_EPS`) and no parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from cfka_jax.models import hf_fields

LAYER_NORM_EPS = 1e-5
"""The epsilon of OLMo's parameter-free LayerNorms (fixed in HF ``OlmoLayerNorm``, not a config field)."""
_FIXED = {"attention_dropout": (float, 0.0)}


@dataclasses.dataclass(frozen=True)
class OlmoFields(hf_fields.LlamaShape, hf_fields.PortFields):
    """The ``config.json`` fields OLMo and OLMo-2 share; field names and defaults follow HF ``OlmoConfig``.

    ``num_key_value_heads=None`` means K = N (HF fills it in the same way); ``head_dim=None`` means D / N.
    ``attention_bias`` switches the bias of q/k/v *and* o_proj (off in every released checkpoint). A subclass
    names its ``MODEL_TYPE`` and ``ARCHITECTURE`` and adds its own fields.
    """

    MODEL_TYPE: ClassVar[str]
    ARCHITECTURE: ClassVar[str]
    WHAT: ClassVar[str]

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = 50279
    pad_token_id: int | None = 1

    def __post_init__(self):
        super().__post_init__()
        hf_fields.check_gqa(self)

    @property
    def mlp_bias(self) -> bool:
        """Bias on the SwiGLU projections: never."""
        return False

    @property
    def qk_norm(self) -> bool:
        """No per-head q/k RMSNorm (the Qwen3 form of ``models/gqa.py``); OLMo-2's q/k norms span the whole
        projection and are built by its own attention module."""
        return False

    @classmethod
    def _pop_own(cls, d: dict[str, Any], problems: list[str]) -> None:
        """Pop or check the fields the subclass reads differently from a plain dataclass field (none here)."""

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], **overrides: Any):
        """Build from a ``config.json`` dict; ``overrides`` set the non-HF fields (dtype, scan_layers, remat, ...).

        Every field is type-checked against its annotation without conversion (``models/hf_fields``).

        Raises:
            ValueError: naming every field that is unknown, ill-typed or has an unsupported value.
        """
        d, problems = dict(d), []
        model_type = d.pop("model_type", cls.MODEL_TYPE)
        if model_type != cls.MODEL_TYPE:
            problems.append(f"model_type={model_type!r} (expected {cls.MODEL_TYPE!r})")
        hf_fields.read_default_rope(d, problems, {"rope_theta": "rope_theta"})
        hf_fields.pop_fixed(d, problems, _FIXED)
        cls._pop_own(d, problems)
        return hf_fields.build(cls, d, problems, what=cls.WHAT, overrides=overrides)

    def to_hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers 5 writes for this model (RoPE under ``rope_parameters``)."""
        d = hf_fields.to_hf(self, drop=("rope_theta",))
        for name in ("num_key_value_heads", "head_dim"):
            if d[name] is None:
                del d[name]
        d.update(model_type=self.MODEL_TYPE, architectures=[self.ARCHITECTURE], attention_dropout=0.0,
                 rope_parameters={"rope_type": "default", "rope_theta": float(self.rope_theta)})
        return d


@dataclasses.dataclass(frozen=True)
class OlmoConfig(OlmoFields):
    """OLMo hyperparameters (:class:`OlmoFields` plus ``clip_qkv``).

    ``clip_qkv``: None, or a bound c > 0 to which every entry of the q, k and v projections is clamped,
    ``clamp(x, -c, c)``, before the heads split and RoPE (OLMo-7B-0424 / 0724 use 8.0). The non-HF fields are
    :class:`~cfka_jax.models.hf_fields.PortFields`.
    """

    MODEL_TYPE: ClassVar[str] = "olmo"
    ARCHITECTURE: ClassVar[str] = "OlmoForCausalLM"
    WHAT: ClassVar[str] = "OLMo"

    clip_qkv: float | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.clip_qkv is not None and not self.clip_qkv > 0:
            raise ValueError(f"clip_qkv must be None or > 0, got {self.clip_qkv}")

    def to_hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict (``clip_qkv`` written even when null, as HF does)."""
        d = super().to_hf_config()
        if d["clip_qkv"] is not None:
            d["clip_qkv"] = float(d["clip_qkv"])
        return d


def pop_null(d: dict[str, Any], problems: list[str], name: str, why: str) -> None:
    """Pop ``d[name]``, accepted only when absent or null (a field HF's model does not read); a problem otherwise."""
    value = d.pop(name, None)
    if value is not None:
        problems.append(f"{name}={value!r} ({why})")

