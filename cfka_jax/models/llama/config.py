"""Llama configuration (Llama-2, Llama-3/3.1/3.2, TinyLlama): a frozen dataclass built from and written back to HF
``config.json``.

Read from ``config.json``: every field of :class:`LlamaConfig`; RoPE either as the legacy top-level ``rope_theta``
plus ``rope_scaling`` (``null`` or a ``"llama3"`` dict, keyed ``rope_type`` or the older ``type``) or as the
transformers-5 ``rope_parameters`` dict. Only the ``default`` and ``llama3`` RoPE types are supported; ``linear``,
``dynamic``, ``yarn`` and the rest are refused by name. ``pretraining_tp`` is accepted only at 1 (it changes how
the original weights were split, not the maths) and dropouts only at 0.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import jax.numpy as jnp

from cfka_jax import jsonio
from cfka_jax.models.layers import ATTENTION_IMPLS, ATTENTION_KINDS

_IGNORED = ("architectures", "torch_dtype", "dtype", "transformers_version", "use_cache", "_name_or_path",
            "model_type")
_NON_HF = ("dtype", "scan_layers", "remat", "attention_kind", "attention_impl")
_LLAMA3_KEYS = {"factor": float, "low_freq_factor": float, "high_freq_factor": float,
                "original_max_position_embeddings": int}
_ROPE_HINTS = {"rope_type": str, "type": str, "rope_theta": float, **_LLAMA3_KEYS}


@dataclasses.dataclass(frozen=True)
class Llama3Scaling:
    """The ``"llama3"`` RoPE frequency scaling (Llama 3.1 / 3.2): with wavelength λ = 2π / f of each inverse
    frequency f and ``L0 = original_max_position_embeddings``, frequencies with λ < L0 / high_freq_factor are kept,
    those with λ > L0 / low_freq_factor are divided by ``factor``, and the ones between are interpolated with
    s = (L0 / λ − low) / (high − low): f' = (1 − s) f / factor + s f."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self):
        if not self.factor > 0:
            raise ValueError(f"rope scaling factor must be > 0, got {self.factor}")
        if not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ValueError(f"need 0 < low_freq_factor < high_freq_factor, got {self.low_freq_factor}, "
                             f"{self.high_freq_factor}")
        if self.original_max_position_embeddings < 1:
            raise ValueError(f"original_max_position_embeddings must be >= 1, got "
                             f"{self.original_max_position_embeddings}")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Llama hyperparameters; field names follow HF ``config.json``.

    ``num_key_value_heads=None`` means K = N (multi-head attention, as HF reads an older Llama-2 config without
    the field); ``head_dim=None`` means D / N. ``attention_bias`` switches the bias of q/k/v *and* o_proj,
    ``mlp_bias`` that of gate/up/down. ``rope_scaling``: None (default RoPE) or :class:`Llama3Scaling`. Non-HF
    fields as :class:`~cfka_jax.models.pythia.config.PythiaConfig`: ``dtype``, ``scan_layers``, ``remat``,
    ``attention_kind``, ``attention_impl``.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Llama3Scaling | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
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
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.kv_heads <= 0 or self.num_attention_heads % self.kv_heads:
            raise ValueError(f"{self.num_attention_heads} heads not a multiple of {self.kv_heads} KV heads")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by {self.num_attention_heads} heads")
        if self.head_size <= 0 or self.head_size % 2:
            raise ValueError(f"head dim {self.head_size} must be even and positive for RoPE")
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act must be 'silu', got {self.hidden_act!r}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, Llama3Scaling):
            raise ValueError(f"rope_scaling must be None or a Llama3Scaling, got {self.rope_scaling!r}")
        if jnp.dtype(self.dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
            raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype}")

    @property
    def kv_heads(self) -> int:
        """K: ``num_key_value_heads``, or N when absent."""
        return self.num_attention_heads if self.num_key_value_heads is None else self.num_key_value_heads

    @property
    def head_size(self) -> int:
        """H: explicit ``head_dim`` or D / N."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], **overrides: Any) -> LlamaConfig:
        """Build from a ``config.json`` dict; ``overrides`` set the non-HF fields (dtype, scan_layers, remat, ...).

        Every field is type-checked against its annotation without conversion (see
        :meth:`~cfka_jax.models.pythia.config.PythiaConfig.from_hf_config`).

        Raises:
            ValueError: naming every field that is unknown, ill-typed or has an unsupported value.
        """
        d, problems = dict(d), []
        if d.get("model_type", "llama") != "llama":
            problems.append(f"model_type={d['model_type']!r} (expected 'llama')")
        rope, rope_problems = _read_rope(d)
        problems += rope_problems
        for name, hint, ok in (("pretraining_tp", int, 1), ("attention_dropout", float, 0.0)):
            value = d.pop(name, ok)
            problem = jsonio.type_problem(value, hint)
            if problem:
                problems.append(f"{name} {problem}")
            elif value != ok:
                problems.append(f"{name}={value!r} (only {ok!r} is supported)")
        for name in _IGNORED:
            d.pop(name, None)
        fields = {f.name for f in dataclasses.fields(cls)} - set(_NON_HF) - {"rope_scaling"}
        problems += [f"{k} (unknown field)" for k in sorted(set(d) - fields)]
        problems += jsonio.field_problems({k: v for k, v in d.items() if k in fields}, typing.get_type_hints(cls))
        if problems:
            raise ValueError("unsupported Llama config fields: " + "; ".join(problems))
        try:
            return cls(**d, **rope, **overrides)
        except TypeError as e:  # a required size is missing
            raise ValueError(f"incomplete Llama config: {e}") from None

    def to_hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers 5 writes for this model (RoPE under ``rope_parameters``)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in (*_NON_HF, "rope_theta", "rope_scaling"):
            del d[name]
        if self.attention_kind == "linear":  # the HF field set; a linear port records its kind
            d["attention_kind"] = "linear"
        for name in ("num_key_value_heads", "head_dim"):
            if d[name] is None:
                del d[name]
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(self.rope_theta)}
        if self.rope_scaling is not None:
            rope.update(rope_type="llama3", **dataclasses.asdict(self.rope_scaling))
        d.update(model_type="llama", architectures=["LlamaForCausalLM"], dtype=jnp.dtype(self.dtype).name,
                 rope_parameters=rope, pretraining_tp=1, attention_dropout=0.0)
        return d


def _read_rope(d: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Pop the RoPE fields of ``d`` (legacy or transformers-5 spelling) -> (rope_theta / rope_scaling, problems)."""
    problems: list[str] = []
    params = d.pop("rope_parameters", None)
    scaling = d.pop("rope_scaling", None)
    theta = d.pop("rope_theta", None)
    where = "rope_parameters" if params is not None else "rope_scaling"
    spec = params if params is not None else scaling
    if params is not None and scaling is not None:
        problems.append("rope_scaling (given together with rope_parameters)")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return {}, problems + [f"{where} {jsonio.type_problem(spec, dict)}"]
    problems += [f"{where}.{p}" for p in jsonio.field_problems(spec, _ROPE_HINTS)]
    problems += [f"{where}.{k} (unknown field)" for k in sorted(set(spec) - set(_ROPE_HINTS))]
    kind = spec.get("rope_type", spec.get("type", "default"))
    out: dict[str, Any] = {}
    if theta is not None or "rope_theta" in spec:
        out["rope_theta"] = spec.get("rope_theta", theta)
        problem = jsonio.type_problem(out["rope_theta"], float)
        if problem:
            problems.append(f"rope_theta {problem}")
    if kind == "llama3":
        missing = sorted(set(_LLAMA3_KEYS) - set(spec))
        if missing:
            problems.append(f"{where} of type llama3 lacks {', '.join(missing)}")
        elif not problems:
            try:
                out["rope_scaling"] = Llama3Scaling(**{k: spec[k] for k in _LLAMA3_KEYS})
            except ValueError as e:
                problems.append(f"{where}: {e}")
    elif kind != "default":
        problems.append(f"{where}.rope_type={kind!r} (only 'default' and 'llama3' are supported)")
    elif set(spec) & set(_LLAMA3_KEYS):
        problems.append(f"{where}: scaling keys {sorted(set(spec) & set(_LLAMA3_KEYS))} with rope_type 'default'")
    return out, problems
