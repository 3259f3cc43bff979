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
from typing import Any

from cfka_jax import jsonio
from cfka_jax.models import hf_fields

_FIXED = {"pretraining_tp": (int, 1), "attention_dropout": (float, 0.0)}
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
class LlamaConfig(hf_fields.LlamaShape, hf_fields.PortFields):
    """Llama hyperparameters; field names follow HF ``config.json``.

    ``num_key_value_heads=None`` means K = N (multi-head attention, as HF reads an older Llama-2 config without
    the field); ``head_dim=None`` means D / N. ``attention_bias`` switches the bias of q/k/v *and* o_proj,
    ``mlp_bias`` that of gate/up/down. ``rope_scaling``: None (default RoPE) or :class:`Llama3Scaling`. The non-HF
    fields are :class:`~cfka_jax.models.hf_fields.PortFields`.
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

    def __post_init__(self):
        super().__post_init__()
        hf_fields.check_gqa(self)
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, Llama3Scaling):
            raise ValueError(f"rope_scaling must be None or a Llama3Scaling, got {self.rope_scaling!r}")

    @property
    def qk_norm(self) -> bool:
        """Llama has no per-head q/k norms."""
        return False

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], **overrides: Any) -> LlamaConfig:
        """Build from a ``config.json`` dict; ``overrides`` set the non-HF fields (dtype, scan_layers, remat, ...).

        Every field is type-checked against its annotation without conversion (``models/hf_fields``).

        Raises:
            ValueError: naming every field that is unknown, ill-typed or has an unsupported value.
        """
        d, problems = dict(d), []
        model_type = d.pop("model_type", "llama")
        if model_type != "llama":
            problems.append(f"model_type={model_type!r} (expected 'llama')")
        rope, rope_problems = _read_rope(d)  # checked there: passed on with the overrides
        problems += rope_problems
        hf_fields.pop_fixed(d, problems, _FIXED)
        return hf_fields.build(cls, d, problems, what="Llama", overrides={**rope, **overrides})

    def to_hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers 5 writes for this model (RoPE under ``rope_parameters``)."""
        d = hf_fields.to_hf(self, drop=("rope_theta", "rope_scaling"))
        for name in ("num_key_value_heads", "head_dim"):
            if d[name] is None:
                del d[name]
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(self.rope_theta)}
        if self.rope_scaling is not None:
            rope.update(rope_type="llama3", **dataclasses.asdict(self.rope_scaling))
        d.update(model_type="llama", architectures=["LlamaForCausalLM"], rope_parameters=rope, pretraining_tp=1,
                 attention_dropout=0.0)
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
