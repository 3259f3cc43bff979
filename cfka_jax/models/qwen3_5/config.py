"""Qwen3.5 configuration (``model_type`` ``"qwen3_5_text"``, and the language model of a ``"qwen3_5"`` folder): a
frozen dataclass built from and written back to HF ``config.json``.

Field names and defaults follow HF ``Qwen3_5TextConfig`` (transformers 5). Read from ``config.json``:

* the sizes, ``head_dim`` (H of the full-attention layers, default 256), ``num_key_value_heads`` (K), the linear
  (Gated DeltaNet) sizes ``linear_num_key_heads`` (G), ``linear_num_value_heads`` (U), ``linear_key_head_dim``
  (Y), ``linear_value_head_dim`` (W), ``linear_conv_kernel_dim`` (Z);
* ``layer_types``: one of ``"linear_attention"`` / ``"full_attention"`` per layer; when absent, HF's pattern
  (every ``full_attention_interval``-th layer full, default 4) is filled in, as HF does;
* RoPE from ``rope_parameters``: ``rope_theta``, ``partial_rotary_factor`` (default 0.25: the rotated width is
  ``int(H * factor)``), ``mrope_section`` / ``mrope_interleaved`` (the multimodal 3-D RoPE: for text, whose three
  position rows are equal, it is plain RoPE; kept to be written back); only ``rope_type`` ``"default"``;
* ``attention_dropout`` only at 0; ``attn_output_gate`` only true (the gate is part of the architecture);
  ``mtp_num_hidden_layers`` / ``mtp_use_dedicated_embeddings`` describe the multi-token-prediction head, which HF's
  causal LM does not load and neither does the port (its weights are skipped by name, ``convert.py``).

A ``"qwen3_5"`` folder (``Qwen3_5ForConditionalGeneration``) nests these fields under ``text_config`` beside a
``vision_config`` and the image/video token ids; :meth:`Qwen35Config.from_hf_config` reads the text part (the
vision tower is not ported) and ``tie_word_embeddings`` from the outer level, where HF reads it. A config always
writes back the ``qwen3_5_text`` form (the port is a text-only causal LM).

Non-HF fields: those of :class:`~cfka_jax.models.hf_fields.PortFields` (``scan_layers`` is refused: the layers
are of two kinds) and ``chunk_size``, the chunk length Q of the chunked delta rule (``delta.chunked``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cfka_jax import jsonio
from cfka_jax.models import hf_fields

MODEL_TYPE = "qwen3_5_text"
WRAPPER_TYPE = "qwen3_5"
LAYER_KINDS = ("linear_attention", "full_attention")
_FIXED = {"attention_dropout": (float, 0.0), "attn_output_gate": (bool, True)}
_IGNORED = ("mtp_num_hidden_layers", "mtp_use_dedicated_embeddings")
_WRAPPER_FIELDS = {"vision_config": dict, "image_token_id": int, "video_token_id": int,
                   "vision_start_token_id": int, "vision_end_token_id": int, "tie_word_embeddings": bool}


@dataclasses.dataclass(frozen=True)
class Qwen35Config(hf_fields.PortFields):
    """Qwen3.5 hyperparameters (module docstring); ``layer_types`` is always filled (a tuple)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int = 4
    head_dim: int = 256
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    mrope_section: tuple[int, ...] | None = None
    mrope_interleaved: bool | None = None
    attention_bias: bool = False
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    layer_types: tuple[str, ...] | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    chunk_size: int = 64

    def __post_init__(self):
        super().__post_init__()
        for name in ("layer_types", "mrope_section", "eos_token_id"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.layer_types is None:
            object.__setattr__(self, "layer_types", default_layer_types(self.num_hidden_layers))
        self._check()

    def _check(self) -> None:
        n, k, h = self.num_attention_heads, self.num_key_value_heads, self.head_dim
        if k <= 0 or n % k:
            raise ValueError(f"{n} heads not a multiple of {k} KV heads")
        if h <= 0 or h % 2:
            raise ValueError(f"head_dim {h} must be even and positive")
        if self.rotary_dim <= 0 or self.rotary_dim % 2:
            raise ValueError(f"partial_rotary_factor {self.partial_rotary_factor} gives a rotary width "
                             f"int({h} * factor) = {self.rotary_dim}, which must be even and positive")
        if not 0 < self.partial_rotary_factor <= 1:
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {self.partial_rotary_factor}")
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act must be 'silu', got {self.hidden_act!r}")
        for name in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
                     "linear_num_key_heads", "linear_num_value_heads", "chunk_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(f"linear_num_value_heads {self.linear_num_value_heads} not a multiple of "
                             f"linear_num_key_heads {self.linear_num_key_heads}")
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers")
        bad = sorted({t for t in self.layer_types if t not in LAYER_KINDS})
        if bad:
            raise ValueError(f"layer_types: unsupported kinds {bad} (expected {LAYER_KINDS})")
        if not self.rms_norm_eps > 0:
            raise ValueError(f"rms_norm_eps must be > 0, got {self.rms_norm_eps}")
        if self.scan_layers:
            raise ValueError("scan_layers=True is not supported for Qwen3.5: its layers are of two kinds "
                             "(linear_attention and full_attention) and cannot be stacked into one scan")

    # ------------------------------------------------------------------------------------------ derived sizes

    @property
    def kv_heads(self) -> int:
        """K = ``num_key_value_heads``."""
        return self.num_key_value_heads

    @property
    def head_size(self) -> int:
        """H = ``head_dim``."""
        return self.head_dim

    @property
    def mlp_bias(self) -> bool:
        """Bias on the SwiGLU projections: never."""
        return False

    @property
    def qk_norm(self) -> bool:
        """Per-head (zero-centred) RMSNorm on q and k of the full-attention layers: always."""
        return True

    @property
    def rotary_dim(self) -> int:
        """The rotated width of a full-attention head, ``int(H * partial_rotary_factor)`` (as HF)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def full_layers(self) -> tuple[int, ...]:
        """Indices of the full-attention layers."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == "full_attention")

    @property
    def linear_layers(self) -> tuple[int, ...]:
        """Indices of the linear-attention (Gated DeltaNet) layers."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == "linear_attention")

    @property
    def conv_channels(self) -> int:
        """C = 2 G Y + U W, the channels of the short convolution (q, k and v together)."""
        return 2 * self.linear_num_key_heads * self.linear_key_head_dim + self.value_width

    @property
    def value_width(self) -> int:
        """U W, the width of the linear layers' values, gate z and output."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    # ------------------------------------------------------------------------------------------ config.json

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], **overrides: Any) -> Qwen35Config:
        """Build from a ``qwen3_5_text`` or ``qwen3_5`` ``config.json`` dict; ``overrides`` set the non-HF fields.

        Raises:
            ValueError: naming every field that is unknown, ill-typed or has an unsupported value.
        """
        d, problems = dict(d), []
        if d.get("model_type") == WRAPPER_TYPE:
            d = _unwrap(d, problems)
        model_type = d.pop("model_type", MODEL_TYPE)
        if model_type != MODEL_TYPE:
            problems.append(f"model_type={model_type!r} (expected {MODEL_TYPE!r} or {WRAPPER_TYPE!r})")
        _read_rope(d, problems)
        interval = d.pop("full_attention_interval", 4)
        if jsonio.type_problem(interval, int) or interval < 1:
            problems.append(f"full_attention_interval must be a positive integer, got {interval!r}")
        elif d.get("layer_types") is None and isinstance(d.get("num_hidden_layers"), int):
            d["layer_types"] = list(default_layer_types(d["num_hidden_layers"], interval))
        hf_fields.pop_fixed(d, problems, _FIXED)
        if "chunk_size" in d:
            problems.append("chunk_size (not a config.json field: pass it as an override)")
            d.pop("chunk_size")
        return hf_fields.build(cls, d, problems, what="Qwen3.5", ignored=_IGNORED, overrides=overrides)

    def to_hf_config(self) -> dict[str, Any]:
        """The ``qwen3_5_text`` ``config.json`` dict transformers 5 writes (RoPE under ``rope_parameters``)."""
        rope_keys = ("rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved")
        d = hf_fields.to_hf(self, drop=(*rope_keys, "chunk_size"))
        rope = {"rope_type": "default", "rope_theta": float(self.rope_theta),
                "partial_rotary_factor": float(self.partial_rotary_factor)}
        if self.mrope_section is not None:
            rope["mrope_section"] = list(self.mrope_section)
        if self.mrope_interleaved is not None:
            rope["mrope_interleaved"] = self.mrope_interleaved
        d.update(model_type=MODEL_TYPE, architectures=["Qwen3_5ForCausalLM"], attention_dropout=0.0,
                 rope_parameters=rope, layer_types=list(self.layer_types))
        if isinstance(d["eos_token_id"], tuple):
            d["eos_token_id"] = list(d["eos_token_id"])
        return d


def default_layer_types(num_layers: int, interval: int = 4) -> tuple[str, ...]:
    """HF's default pattern: layer i is full attention iff ``(i + 1) % interval == 0``."""
    return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers))


def _unwrap(d: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The ``text_config`` of a ``qwen3_5`` dict, with the outer ``tie_word_embeddings``; the outer vision and
    token-id fields are checked for type and dropped, any other outer field is a problem."""
    text = d.pop("text_config", None)
    d.pop("model_type")
    if not isinstance(text, dict):
        problems.append(f"text_config {jsonio.type_problem(text, dict) or 'missing'}")
        text = {}
    text = dict(text)
    for name in hf_fields.IGNORED:
        d.pop(name, None)
    problems += [f"{p} (outer qwen3_5 field)" for p in jsonio.field_problems(d, _WRAPPER_FIELDS)]
    problems += [f"{k} (unknown outer qwen3_5 field)" for k in sorted(set(d) - set(_WRAPPER_FIELDS))]
    if "tie_word_embeddings" in d:
        inner = text.get("tie_word_embeddings", d["tie_word_embeddings"])
        if inner != d["tie_word_embeddings"]:
            problems.append(f"tie_word_embeddings: outer {d['tie_word_embeddings']!r} != text_config {inner!r}")
        text["tie_word_embeddings"] = d["tie_word_embeddings"]
    return text


def _read_rope(d: dict[str, Any], problems: list[str]) -> None:
    """Move the RoPE settings of ``rope_parameters`` to their fields (the 3-D RoPE's two keys checked here, the
    rest by ``hf_fields.read_default_rope``)."""
    rope = d.get("rope_parameters")
    if isinstance(rope, dict):
        rope = dict(rope)
        for key, hint in (("mrope_section", list[int]), ("mrope_interleaved", bool)):
            if key in rope:
                value = rope.pop(key)
                problem = jsonio.type_problem(value, hint)
                if problem:
                    problems.append(f"rope_parameters.{key} {problem}")
                else:
                    d.setdefault(key, value)
        d["rope_parameters"] = rope
    hf_fields.read_default_rope(d, problems, {"rope_theta": "rope_theta",
                                              "partial_rotary_factor": "partial_rotary_factor"})
