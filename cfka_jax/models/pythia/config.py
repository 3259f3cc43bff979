"""GPT-NeoX (Pythia) configuration: a frozen dataclass built from and written back to HF ``config.json``."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import jax.numpy as jnp

from cfka_jax import jsonio
from cfka_jax.models.layers import ATTENTION_IMPLS, ATTENTION_KINDS

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu")

# config.json fields read into the dataclass (both the legacy and the transformers-5 RoPE spelling).
_ROPE_LEGACY = ("rotary_pct", "rotary_emb_base", "rope_scaling")
# Fields accepted but not used: training-time or tokenizer-side settings with no effect on the forward pass.
_IGNORED = (
    "architectures",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "use_cache",
    "classifier_dropout",
    "is_decoder",
    "_name_or_path",
    "model_type",
)
_ROPE_HINTS = {"rope_type": str, "rope_theta": float, "partial_rotary_factor": float}
# Dropouts are accepted only at 0 (the port has no dropout).
_ZERO_ONLY = ("attention_dropout", "hidden_dropout", "attention_probs_dropout_prob", "hidden_dropout_prob")


@dataclasses.dataclass(frozen=True)
class PythiaConfig:
    """GPT-NeoX hyperparameters; field names follow HF ``config.json``.

    Non-HF fields: ``dtype`` (parameter and activation dtype; attention softmax and logits stay float32),
    ``scan_layers`` (stack the blocks and apply them with ``nnx.scan``) and ``remat`` (rematerialise each block).
    ``attention_kind``: ``"softmax"`` (the port) or ``"linear"`` (the theory's causal linear attention,
    ``models/layers.attention``); written to ``config.json`` only when linear and read back from it (HF torch
    does not know the field and would run softmax). ``attention_impl``: ``"auto"`` (fused on GPU/TPU, explicit on
    CPU), ``"explicit"`` or ``"fused"`` (``models/layers.resolve_attention_impl``); never written to config.json.
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    max_position_embeddings: int = 2048
    layer_norm_eps: float = 1e-5
    rotary_pct: float = 0.25
    rotary_emb_base: float = 10000.0
    use_parallel_residual: bool = True
    tie_word_embeddings: bool = False
    attention_bias: bool = True
    initializer_range: float = 0.02
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 0
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
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by {self.num_attention_heads} heads")
        if not 0.0 < self.rotary_pct <= 1.0:
            raise ValueError(f"rotary_pct must be in (0, 1], got {self.rotary_pct}")
        if self.rotary_dim % 2 or self.rotary_dim == 0:
            raise ValueError(f"rotary dims int(head_dim * rotary_pct) = {self.rotary_dim} must be even and > 0")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} not in {ACTIVATIONS}")
        if jnp.dtype(self.dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
            raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype}")

    @property
    def head_dim(self) -> int:
        """H = D / N."""
        return self.hidden_size // self.num_attention_heads

    @property
    def num_key_value_heads(self) -> int:
        """K = N (GPT-NeoX has no GQA)."""
        return self.num_attention_heads

    @property
    def rotary_dim(self) -> int:
        """R = int(H * rotary_pct), truncated exactly as HF does."""
        return int(self.head_dim * self.rotary_pct)

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], **overrides: Any) -> PythiaConfig:
        """Build from a ``config.json`` dict; ``overrides`` set the non-HF fields (dtype, scan_layers, remat).

        Every field is type-checked against its annotation without conversion (an ``int`` field rejects ``"32"``,
        ``32.0`` and ``true``; a ``bool`` field rejects ``"false"``; a ``float`` field accepts integers).

        Raises:
            ValueError: naming every field that is unknown, ill-typed or has an unsupported value.
        """
        d = dict(d)
        problems = []
        if d.get("model_type", "gpt_neox") != "gpt_neox":
            problems.append(f"model_type={d['model_type']!r} (expected 'gpt_neox')")
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
            extra = set(rope) - set(_ROPE_HINTS)
            problems += [f"rope_parameters.{k}" for k in sorted(extra)]
            d.setdefault("rotary_emb_base", rope.get("rope_theta", 10000.0))
            d.setdefault("rotary_pct", rope.get("partial_rotary_factor", 0.25))
        for name in _ZERO_ONLY:
            value = d.pop(name, 0.0)
            problem = jsonio.type_problem(value, float)
            if problem:
                problems.append(f"{name} {problem}")
            elif value:
                problems.append(f"{name} (nonzero dropout unsupported)")
        for name in _IGNORED:
            d.pop(name, None)
        fields = {f.name for f in dataclasses.fields(cls)} - {"dtype", "scan_layers", "remat"}
        problems += [f"{k} (unknown field)" for k in sorted(set(d) - fields)]
        problems += jsonio.field_problems({k: v for k, v in d.items() if k in fields}, typing.get_type_hints(cls))
        if problems:
            raise ValueError("unsupported GPT-NeoX config fields: " + "; ".join(problems))
        return cls(**d, **overrides)

    def to_hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers 5 writes for this model (RoPE under ``rope_parameters``)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in ("dtype", "scan_layers", "remat", "attention_impl", "rotary_pct", "rotary_emb_base"):
            del d[name]
        if self.attention_kind == "softmax":  # the HF field set; a linear port records its kind
            del d["attention_kind"]
        d["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": float(self.rotary_emb_base),
            "partial_rotary_factor": float(self.rotary_pct),
        }
        d.update(
            model_type="gpt_neox",
            architectures=["GPTNeoXForCausalLM"],
            dtype=jnp.dtype(self.dtype).name,
            attention_dropout=0.0,
            hidden_dropout=0.0,
        )
        return d
