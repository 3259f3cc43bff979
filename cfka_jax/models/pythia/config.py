"""GPT-NeoX (Pythia) configuration: a frozen dataclass built from and written back to HF ``config.json``."""

from __future__ import annotations

import dataclasses
from typing import Any

from cfka_jax.models import hf_fields

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu")

_IGNORED = ("classifier_dropout", "is_decoder", "model_type")  # no effect on the forward pass
# Dropouts are accepted only at 0 (the port has no dropout).
_ZERO_ONLY = {name: (float, 0.0) for name in
              ("attention_dropout", "hidden_dropout", "attention_probs_dropout_prob", "hidden_dropout_prob")}


@dataclasses.dataclass(frozen=True)
class PythiaConfig(hf_fields.PortFields):
    """GPT-NeoX hyperparameters; field names follow HF ``config.json``; the non-HF fields (``dtype``,
    ``scan_layers``, ``remat``, ``attention_kind``, ``attention_impl``) are those of
    :class:`~cfka_jax.models.hf_fields.PortFields`."""

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

    def __post_init__(self):
        super().__post_init__()
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by {self.num_attention_heads} heads")
        if not 0.0 < self.rotary_pct <= 1.0:
            raise ValueError(f"rotary_pct must be in (0, 1], got {self.rotary_pct}")
        if self.rotary_dim % 2 or self.rotary_dim == 0:
            raise ValueError(f"rotary dims int(head_dim * rotary_pct) = {self.rotary_dim} must be even and > 0")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} not in {ACTIVATIONS}")

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

        RoPE as the legacy top-level ``rotary_pct`` / ``rotary_emb_base`` (``rope_scaling`` null) or the
        transformers-5 ``rope_parameters``; every field type-checked as ``models/hf_fields`` describes.

        Raises:
            ValueError: naming every field that is unknown, ill-typed or has an unsupported value.
        """
        d, problems = dict(d), []
        if d.get("model_type", "gpt_neox") != "gpt_neox":
            problems.append(f"model_type={d['model_type']!r} (expected 'gpt_neox')")
        hf_fields.read_default_rope(d, problems, {"rope_theta": "rotary_emb_base",
                                                  "partial_rotary_factor": "rotary_pct"})
        hf_fields.pop_fixed(d, problems, _ZERO_ONLY)
        return hf_fields.build(cls, d, problems, what="GPT-NeoX", ignored=_IGNORED, overrides=overrides)

    def to_hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers 5 writes for this model (RoPE under ``rope_parameters``)."""
        d = hf_fields.to_hf(self, drop=("rotary_pct", "rotary_emb_base"))
        d["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": float(self.rotary_emb_base),
            "partial_rotary_factor": float(self.rotary_pct),
        }
        d.update(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"], attention_dropout=0.0,
                 hidden_dropout=0.0)
        return d
