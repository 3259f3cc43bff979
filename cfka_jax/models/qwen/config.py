"""Qwen2/2.5 and Qwen3 configuration: one frozen dataclass; the two differ only in ``model_type``-driven fields.

* ``qwen2``: q/k/v projections carry a bias, ``o_proj`` does not; no q/k norms; ``head_dim = D / N``.
* ``qwen3``: ``attention_bias`` (default false) switches the bias of q/k/v *and* o_proj; per-head RMSNorm on q
  and k; explicit ``head_dim`` (N * head_dim may differ from D).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import jax.numpy as jnp

from cfka_jax import jsonio
from cfka_jax.models.layers import ATTENTION_IMPLS, ATTENTION_KINDS

MODEL_TYPES = ("qwen2", "qwen3")
_IGNORED = (
    "architectures",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "use_cache",
    "_name_or_path",
    "max_window_layers",  # only meaningful with use_sliding_window, which is rejected
    "use_mrope",  # must be false; checked below
)
_ROPE_HINTS = {"rope_type": str, "rope_theta": float}


@dataclasses.dataclass(frozen=True)
class QwenConfig:
    """Qwen2/Qwen3 hyperparameters; field names follow HF ``config.json``.

    ``head_dim=None`` means ``hidden_size // num_attention_heads`` (Qwen2 configs omit it). ``attention_bias``
    is only meaningful for qwen3 (Qwen2 always has q/k/v bias and no o_proj bias). Non-HF fields: ``dtype``,
    ``scan_layers``, ``remat``, ``attention_kind``, ``attention_impl`` (see :class:`~cfka_jax.models.pythia.config.PythiaConfig`).
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
    dtype: Any = jnp.float32
    scan_layers: bool = False
    remat: bool = False
    attention_kind: str = "softmax"
    attention_impl: str = "auto"

    def __post_init__(self):
        if self.attention_kind not in ATTENTION_KINDS:
            raise ValueError(f"attention_kind must be one of {ATTENTION_KINDS}, got {self.attention_kind!r}")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {self.attention_impl!r}")
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {self.model_type!r}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_key_value_heads <= 0 or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{self.num_attention_heads} heads not a multiple of {self.num_key_value_heads} KV heads")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by {self.num_attention_heads} heads")
        if self.head_size % 2:
            raise ValueError(f"head dim {self.head_size} must be even for RoPE")
        if self.model_type == "qwen2" and self.attention_bias:
            raise ValueError("attention_bias is a qwen3 field; Qwen2 always has q/k/v bias and no o_proj bias")
        if self.use_sliding_window:
            raise ValueError("use_sliding_window=True is not supported")
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act must be 'silu', got {self.hidden_act!r}")
        if jnp.dtype(self.dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
            raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype}")

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

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], **overrides: Any) -> QwenConfig:
        """Build from a ``config.json`` dict; ``overrides`` set the non-HF fields (dtype, scan_layers, remat).

        Accepts the legacy top-level ``rope_theta``/``rope_scaling: null`` and the transformers-5
        ``rope_parameters``; ``layer_types`` must be all ``full_attention``.

        Every field is type-checked against its annotation without conversion (see
        :meth:`~cfka_jax.models.pythia.config.PythiaConfig.from_hf_config`).

        Raises:
            ValueError: naming every field that is unknown, ill-typed or has an unsupported value.
        """
        d = dict(d)
        problems = []
        rope = d.pop("rope_parameters", None) or {}
        if not isinstance(rope, dict):
            problems.append(f"rope_parameters {jsonio.type_problem(rope, dict)}")
            rope = {}
        problems += [f"rope_parameters.{p}" for p in jsonio.field_problems(rope, _ROPE_HINTS)]
        if d.pop("rope_scaling", None) is not None:
            problems.append("rope_scaling (only default RoPE is supported)")
        if rope:
            if rope.get("rope_type", "default") != "default":
                problems.append(f"rope_parameters.rope_type={rope['rope_type']!r}")
            problems += [f"rope_parameters.{k}" for k in sorted(set(rope) - set(_ROPE_HINTS))]
            d.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
        layer_types = d.pop("layer_types", None) or []
        if jsonio.type_problem(layer_types, list[str]):
            problems.append(f"layer_types {jsonio.type_problem(layer_types, list[str])}")
        elif any(t != "full_attention" for t in layer_types):
            problems.append(f"layer_types={layer_types} (only full_attention)")
        checks = (("use_mrope", bool, "use_mrope=True"),
                  ("attention_dropout", float, "attention_dropout (nonzero dropout unsupported)"))
        for name, hint, unsupported in checks:
            value = d.pop(name, hint())  # absent = False / 0.0
            problem = jsonio.type_problem(value, hint)
            if problem:
                problems.append(f"{name} {problem}")
            elif value:
                problems.append(unsupported)
        for name in _IGNORED:
            d.pop(name, None)
        if d.get("use_sliding_window", False) is False:
            d["sliding_window"] = None  # as HF normalises it: the window is unused
        fields = {f.name for f in dataclasses.fields(cls)} - {"dtype", "scan_layers", "remat"}
        problems += [f"{k} (unknown field)" for k in sorted(set(d) - fields)]
        problems += jsonio.field_problems({k: v for k, v in d.items() if k in fields}, typing.get_type_hints(cls))
        if "model_type" not in d:
            problems.append("model_type missing")
        if problems:
            raise ValueError("unsupported Qwen config fields: " + "; ".join(problems))
        return cls(**d, **overrides)

    def to_hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers 5 writes (RoPE under ``rope_parameters``)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in ("dtype", "scan_layers", "remat", "attention_impl", "rope_theta"):
            del d[name]
        if self.attention_kind == "softmax":  # the HF field set; a linear port records its kind
            del d["attention_kind"]
        if self.model_type == "qwen2":
            del d["attention_bias"]
            if self.head_dim is None:
                del d["head_dim"]
        else:
            d["head_dim"] = self.head_size
        d["rope_parameters"] = {"rope_type": "default", "rope_theta": float(self.rope_theta)}
        d["layer_types"] = ["full_attention"] * self.num_hidden_layers
        arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[self.model_type]
        d.update(architectures=[arch], dtype=jnp.dtype(self.dtype).name, attention_dropout=0.0)
        return d
