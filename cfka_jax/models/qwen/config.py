"""Qwen2/2.5 and Qwen3 configuration: one frozen dataclass; the two differ only in ``model_type``-driven fields.

* ``qwen2``: q/k/v projections carry a bias, ``o_proj`` does not; no q/k norms; ``head_dim = D / N``.
* ``qwen3``: ``attention_bias`` (default false) switches the bias of q/k/v *and* o_proj; per-head RMSNorm on q
  and k; explicit ``head_dim`` (N * head_dim may differ from D).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cfka_jax import jsonio
from cfka_jax.models import hf_fields

MODEL_TYPES = ("qwen2", "qwen3")
_IGNORED = ("max_window_layers",)  # only meaningful with use_sliding_window, which is rejected
_FIXED = {"use_mrope": (bool, False), "attention_dropout": (float, 0.0)}


@dataclasses.dataclass(frozen=True)
class QwenConfig(hf_fields.PortFields):
    """Qwen2/Qwen3 hyperparameters; field names follow HF ``config.json``.

    ``head_dim=None`` means ``hidden_size // num_attention_heads`` (Qwen2 configs omit it). ``attention_bias``
    is only meaningful for qwen3 (Qwen2 always has q/k/v bias and no o_proj bias). The non-HF fields are
    :class:`~cfka_jax.models.hf_fields.PortFields`.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    use_sliding_window: bool = False
    sliding_window: int | None = None
    initializer_range: float = 0.02
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {self.model_type!r}")
        super().__post_init__()
        hf_fields.check_gqa(self)
        if self.model_type == "qwen2" and self.attention_bias:
            raise ValueError("attention_bias is a qwen3 field; Qwen2 always has q/k/v bias and no o_proj bias")
        if self.use_sliding_window:
            raise ValueError("use_sliding_window=True is not supported")

    @property
    def kv_heads(self) -> int:
        """K = ``num_key_value_heads``."""
        return self.num_key_value_heads

    @property
    def head_size(self) -> int:
        """H: explicit ``head_dim`` or D / N."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def qkv_bias(self) -> bool:
        """Bias on q/k/v projections: always for qwen2, ``attention_bias`` for qwen3."""
        return self.model_type == "qwen2" or self.attention_bias

    @property
    def o_bias(self) -> bool:
        """Bias on o_proj: never for qwen2, ``attention_bias`` for qwen3."""
        return self.model_type == "qwen3" and self.attention_bias

    @property
    def qk_norm(self) -> bool:
        """Per-head RMSNorm on q and k before RoPE (qwen3)."""
        return self.model_type == "qwen3"

    @property
    def mlp_bias(self) -> bool:
        """Bias on the SwiGLU projections: never."""
        return False

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], **overrides: Any) -> QwenConfig:
        """Build from a ``config.json`` dict; ``overrides`` set the non-HF fields (dtype, scan_layers, remat).

        Accepts the legacy top-level ``rope_theta``/``rope_scaling: null`` and the transformers-5
        ``rope_parameters``; ``layer_types`` must be all ``full_attention``.

        Every field is type-checked against its annotation without conversion (``models/hf_fields``).

        Raises:
            ValueError: naming every field that is unknown, ill-typed or has an unsupported value.
        """
        d, problems = dict(d), []
        hf_fields.read_default_rope(d, problems, {"rope_theta": "rope_theta"})
        layer_types = d.pop("layer_types", None) or []
        if jsonio.type_problem(layer_types, list[str]):
            problems.append(f"layer_types {jsonio.type_problem(layer_types, list[str])}")
        elif any(t != "full_attention" for t in layer_types):
            problems.append(f"layer_types={layer_types} (only full_attention)")
        hf_fields.pop_fixed(d, problems, _FIXED)
        if d.get("use_sliding_window", False) is False:
            d["sliding_window"] = None  # as HF normalises it: the window is unused
        if "model_type" not in d:
            problems.append("model_type missing")
        return hf_fields.build(cls, d, problems, what="Qwen", ignored=_IGNORED, overrides=overrides)

    def to_hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers 5 writes (RoPE under ``rope_parameters``)."""
        d = hf_fields.to_hf(self, drop=("rope_theta",))
        if self.model_type == "qwen2":
            del d["attention_bias"]
            if self.head_dim is None:
                del d["head_dim"]
        else:
            d["head_dim"] = self.head_size
        d["rope_parameters"] = {"rope_type": "default", "rope_theta": float(self.rope_theta)}
        d["layer_types"] = ["full_attention"] * self.num_hidden_layers
        arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[self.model_type]
        d.update(architectures=[arch], attention_dropout=0.0)
        return d
