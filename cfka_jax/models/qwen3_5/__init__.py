"""Qwen3.5 port (HF ``model_type`` ``"qwen3_5_text"``, and the language model of ``"qwen3_5"`` folders): hybrid
Gated DeltaNet / gated full attention; config, NNX model, strict HF conversion and its registry entry
(``models/family.py``)."""

from cfka_jax.models import gqa
from cfka_jax.models.family import Family, ModelSize, Traits, register
from cfka_jax.models.qwen3_5.config import Qwen35Config, default_layer_types
from cfka_jax.models.qwen3_5.convert import SkippedWeightsWarning, export, load
from cfka_jax.models.qwen3_5.model import HybridCache, Qwen35Model

__all__ = ["FAMILY", "HybridCache", "Qwen35Config", "Qwen35Model", "SkippedWeightsWarning", "export", "load"]

LORA_TARGETS = gqa.LORA_TARGETS + ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")
"""The block linears LoRA adapts by default: the full-attention and MLP projections (as Qwen's) and the Gated
DeltaNet projections; a block holds the attention ones or the linear-attention ones, as its kind says."""
PARAM_AXES = gqa.PARAM_AXES + (
    (r"\['(in_proj_qkv|in_proj_z)'\]\['kernel'\]", ("embed", "heads")),
    (r"\['(in_proj_a|in_proj_b)'\]\['kernel'\]", ("embed", None)),
    (r"\['out_proj'\]\['kernel'\]", ("heads", "embed")),
    (r"\['linear_attn'\]\['conv1d'\]", (None, "heads")),
)
"""Logical axes (``parallel/rules``): the GQA / SwiGLU rows plus the linear layers' projections (the conv channels
and value heads over ``heads``)."""


def from_size(size: ModelSize, *, vocab_size: int, **fields) -> Qwen35Config:
    """A from-scratch Qwen3.5 config of ``size``: GQA with ``size.kv_heads`` and H = D / N in the full layers,
    linear layers with U = N value heads and G = K key heads of width D / N (so every width scales with the size),
    HF's layer pattern (every 4th layer full attention) with the last layer full when L < 4 (so every size has
    both kinds: 2 layers are [linear, full]), tied embeddings (as the small Qwen3.5 models). ``fields`` override
    any field (``layer_types`` included)."""
    h = size.hidden // size.heads
    kinds = default_layer_types(size.layers)
    if "full_attention" not in kinds:
        kinds = kinds[:-1] + ("full_attention",)
    shape = dict(head_dim=h, linear_num_value_heads=size.heads, linear_num_key_heads=size.kv_heads,
                 linear_key_head_dim=h, linear_value_head_dim=h, tie_word_embeddings=True, layer_types=kinds)
    return Qwen35Config(vocab_size=vocab_size, **size.hf_sizes(), **{**shape, **fields})


def traits(cfg: Qwen35Config) -> Traits:
    """Pre-norm RMSNorm, per-head q/k norms, partial RoPE, separate q/k/v/o (q_proj also carries the output
    gate), SwiGLU. Not expressed by :class:`Traits`: the norms are zero-centred (gain ``1 + w``, parameter
    ``scale`` = w) and only the full layers have ``attn`` (``self_attn``); the others mix with ``linear_attn``."""
    return gqa.traits("qwen3_5", cfg, rotary_dim=cfg.rotary_dim, qk_norm=True, mlp_bias=False)


FAMILY = register(Family(name="qwen3_5", model_types=("qwen3_5_text", "qwen3_5"), config_cls=Qwen35Config,
                         model_cls=Qwen35Model, load=load, export=export, from_size=from_size, traits=traits,
                         embed=Qwen35Model.EMBED, head=Qwen35Model.HEAD, final_norm=Qwen35Model.FINAL_NORM,
                         lora_targets=LORA_TARGETS, param_axes=PARAM_AXES))
