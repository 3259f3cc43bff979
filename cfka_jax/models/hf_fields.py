"""What every family's config shares: checks of the common fields, the strict reading of ``config.json`` and the
writing back.

A family config is a frozen dataclass whose field names follow HF ``config.json``, deriving the non-HF fields
from :class:`PortFields`: :data:`NON_HF` (``dtype``, ``scan_layers``, ``remat``: never read from or written to
``config.json``), ``attention_kind`` (written only when ``"linear"``, and read back) and ``attention_impl`` (read if
present, never written). Its ``from_hf_config`` collects every problem of a dict before it raises, in this order::

    d, problems = dict(d), []
    rope = hf_fields.read_default_rope(d, problems, {...})     # or the family's own RoPE reader
    hf_fields.pop_fixed(d, problems, {"attention_dropout": (float, 0.0)})
    return hf_fields.build(cls, d, problems, what="Qwen", ignored=(...), overrides=overrides)

Every value is type-checked against its annotation without conversion (``jsonio.field_problems``: an ``int``
field rejects ``"32"``, ``32.0`` and ``true``; a ``bool`` field rejects ``"false"``; a ``float`` field accepts
integers).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import jax.numpy as jnp

from cfka_jax import jsonio
from cfka_jax.models.layers import ATTENTION_IMPLS, ATTENTION_KINDS

NON_HF = ("dtype", "scan_layers", "remat")
"""Config fields that ``config.json`` never holds."""
IGNORED = ("architectures", "torch_dtype", "dtype", "transformers_version", "use_cache", "_name_or_path")
"""``config.json`` fields accepted but not used (bookkeeping of transformers; ``dtype`` is the caller's choice)."""
DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))


SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
"""The required sizes of every family config (each must be positive)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PortFields:
    """The non-HF fields every family config has (keyword-only; a config class derives from this one) and the
    checks every config runs first (:func:`check_common`; a subclass's ``__post_init__`` calls this one).

    Attributes:
        dtype: parameter and activation dtype, float32 or bfloat16 (attention softmax and logits stay float32).
        scan_layers: stack the blocks and apply them with ``nnx.scan``.
        remat: rematerialise each block in the backward pass.
        attention_kind: ``"softmax"`` (the port) or ``"linear"`` (the theory's causal linear attention,
            ``models/layers.attention``); written to ``config.json`` only when linear and read back from it (HF
            torch does not know the field and would run softmax).
        attention_impl: ``"auto"`` (fused on GPU/TPU, explicit on CPU), ``"explicit"`` or ``"fused"``
            (``models/layers.resolve_attention_impl``); never written to ``config.json``.
    """

    dtype: Any = jnp.float32
    scan_layers: bool = False
    remat: bool = False
    attention_kind: str = "softmax"
    attention_impl: str = "auto"

    def __post_init__(self):
        check_common(self, SIZES)


def check_common(cfg: Any, sizes: Iterable[str]) -> None:
    """``__post_init__`` checks every family shares: ``attention_kind``, ``attention_impl``, the named sizes > 0,
    ``dtype`` float32 or bfloat16.

    Raises:
        ValueError: naming the first field that fails.
    """
    if cfg.attention_kind not in ATTENTION_KINDS:
        raise ValueError(f"attention_kind must be one of {ATTENTION_KINDS}, got {cfg.attention_kind!r}")
    if cfg.attention_impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {cfg.attention_impl!r}")
    for name in sizes:
        if getattr(cfg, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(cfg, name)}")
    if jnp.dtype(cfg.dtype) not in DTYPES:
        raise ValueError(f"dtype must be float32 or bfloat16, got {cfg.dtype}")


class LlamaShape:
    """The derived sizes of a config with Llama's fields (``num_key_value_heads`` optional, ``head_dim`` optional,
    one ``attention_bias`` for q/k/v and o): Llama and OLMo / OLMo-2 share them (properties, not fields)."""

    @property
    def kv_heads(self) -> int:
        """K: ``num_key_value_heads``, or N when absent."""
        return self.num_attention_heads if self.num_key_value_heads is None else self.num_key_value_heads

    @property
    def head_size(self) -> int:
        """H: explicit ``head_dim`` or D / N."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def qkv_bias(self) -> bool:
        """Bias on q/k/v: ``attention_bias``."""
        return self.attention_bias

    @property
    def o_bias(self) -> bool:
        """Bias on o_proj: ``attention_bias``."""
        return self.attention_bias


def check_gqa(cfg: Any) -> None:
    """The checks of the rotary GQA / SwiGLU decoder (``models/gqa.py``): N a multiple of K = ``cfg.kv_heads``,
    D divisible by N unless ``head_dim`` is explicit, H = ``cfg.head_size`` even and positive (rotate-half RoPE),
    ``hidden_act`` silu.

    Raises:
        ValueError: naming the first check that fails.
    """
    n, k, h = cfg.num_attention_heads, cfg.kv_heads, cfg.head_size
    if k <= 0 or n % k:
        raise ValueError(f"{n} heads not a multiple of {k} KV heads")
    if cfg.head_dim is None and cfg.hidden_size % n:
        raise ValueError(f"hidden_size {cfg.hidden_size} not divisible by {n} heads")
    if h <= 0 or h % 2:
        raise ValueError(f"head dim {h} must be even and positive for RoPE")
    if cfg.hidden_act != "silu":
        raise ValueError(f"hidden_act must be 'silu', got {cfg.hidden_act!r}")


def read_default_rope(d: dict[str, Any], problems: list[str], fields: Mapping[str, str]) -> None:
    """Pop the RoPE settings of ``d`` for a family with default (unscaled) RoPE only.

    The transformers-5 ``rope_parameters`` dict may hold ``rope_type`` (only ``"default"``) and the keys of
    ``fields``, each moved to its config field unless ``d`` sets that field at the top level (the legacy
    spelling); a legacy ``rope_scaling`` must be null. Appends every problem to ``problems``.
    """
    rope = d.pop("rope_parameters", None) or {}
    if not isinstance(rope, dict):
        problems.append(f"rope_parameters {jsonio.type_problem(rope, dict)}")
        rope = {}
    hints = {"rope_type": str, **{k: float for k in fields}}
    problems += [f"rope_parameters.{p}" for p in jsonio.field_problems(rope, hints)]
    if d.pop("rope_scaling", None) is not None:
        problems.append("rope_scaling (only default RoPE is supported)")
    if rope.get("rope_type", "default") != "default":
        problems.append(f"rope_parameters.rope_type={rope['rope_type']!r}")
    problems += [f"rope_parameters.{k}" for k in sorted(set(rope) - set(hints))]
    for key, field in fields.items():
        if key in rope:
            d.setdefault(field, rope[key])


def pop_fixed(d: dict[str, Any], problems: list[str], fixed: Mapping[str, tuple[type, Any]]) -> None:
    """Pop the fields ``name -> (type, the one supported value)`` of ``d`` (absent means supported: dropouts at 0,
    ``pretraining_tp`` at 1); appends a problem for each ill-typed or other value."""
    for name, (hint, ok) in fixed.items():
        value = d.pop(name, ok)
        problem = jsonio.type_problem(value, hint)
        if problem:
            problems.append(f"{name} {problem}")
        elif value != ok:
            problems.append(f"{name}={value!r} (only {ok!r} is supported)")


def build(cls: type, d: dict[str, Any], problems: list[str], *, what: str, ignored: Iterable[str] = (),
          overrides: Mapping[str, Any]):
    """``cls(**d, **overrides)`` after dropping :data:`IGNORED` and ``ignored`` and checking that every other key
    of ``d`` is a config field (not :data:`NON_HF`) of the annotated type.

    Raises:
        ValueError: ``"unsupported <what> config fields: ..."`` naming every problem (``problems`` included), or
            ``"incomplete <what> config: ..."`` when a required size is missing.
    """
    for name in (*IGNORED, *ignored):
        d.pop(name, None)
    fields = {f.name for f in dataclasses.fields(cls)} - set(NON_HF)
    problems = problems + [f"{k} (unknown field)" for k in sorted(set(d) - fields)]
    problems += jsonio.field_problems({k: v for k, v in d.items() if k in fields}, typing.get_type_hints(cls))
    if problems:
        raise ValueError(f"unsupported {what} config fields: " + "; ".join(problems))
    try:
        return cls(**{**d, **overrides})
    except TypeError as e:  # a required size is missing
        raise ValueError(f"incomplete {what} config: {e}") from None


def to_hf(cfg: Any, drop: Iterable[str] = ()) -> dict[str, Any]:
    """The config's fields as a ``config.json`` dict: without :data:`NON_HF`, ``attention_impl`` and ``drop``,
    ``attention_kind`` only when ``"linear"`` (HF torch does not know it), and ``dtype`` by name."""
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    for name in (*NON_HF, "attention_impl", *drop):
        del d[name]
    if cfg.attention_kind == "softmax":
        del d["attention_kind"]
    d["dtype"] = jnp.dtype(cfg.dtype).name
    return d
