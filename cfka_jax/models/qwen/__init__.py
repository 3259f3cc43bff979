"""Qwen2/2.5 and Qwen3 port: config, NNX model, strict HF conversion and its registry entry (``models/family.py``)."""

from cfka_jax.models.family import Family, ModelSize, Traits, register
from cfka_jax.models.qwen.config import QwenConfig
from cfka_jax.models.qwen.convert import export, load
from cfka_jax.models.qwen.model import QwenModel

__all__ = ["FAMILY", "QwenConfig", "QwenModel", "export", "load"]


def from_size(size: ModelSize, *, vocab_size: int, **fields) -> QwenConfig:
    """A from-scratch config of ``size``: Qwen2 with tied embeddings, as the small Qwen models (``fields`` may
    override ``model_type`` and ``tie_word_embeddings`` too)."""
    fields = {"model_type": "qwen2", "tie_word_embeddings": True, **fields}
    return QwenConfig(vocab_size=vocab_size, hidden_size=size.hidden, intermediate_size=size.intermediate,
                      num_hidden_layers=size.layers, num_attention_heads=size.heads,
                      num_key_value_heads=size.kv_heads, **fields)


def traits(cfg: QwenConfig) -> Traits:
    """RMSNorm, sequential residual, full-width RoPE, separate q/k/v/o, SwiGLU; Qwen3's per-head q/k norms."""
    return Traits(family="qwen", tied=cfg.tie_word_embeddings, norm="rmsnorm", norm_eps=cfg.rms_norm_eps,
                  parallel_residual=False, head_dim=cfg.head_size, kv_heads=cfg.num_key_value_heads,
                  rotary_dim=cfg.head_size, qk_norm=cfg.qk_norm,
                  qkv="separate", mlp="swiglu", hidden_act=cfg.hidden_act, attn="self_attn")


FAMILY = register(Family(
    name="qwen",
    model_types=("qwen2", "qwen3"),
    config_cls=QwenConfig,
    model_cls=QwenModel,
    load=load,
    export=export,
    from_size=from_size,
    traits=traits,
    embed="embed_tokens",
    head="lm_head",
    final_norm="norm",
    lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    param_axes=(
        (r"\['embed_tokens'\]\['embedding'\]", ("vocab", "embed")),
        (r"\['(q_proj|k_proj|v_proj)'\]\['kernel'\]", ("embed", "heads")),
        (r"\['(q_proj|k_proj|v_proj)'\]\['bias'\]", ("heads",)),
        (r"\['o_proj'\]\['kernel'\]", ("heads", "embed")),
        (r"\['(gate_proj|up_proj)'\]\['kernel'\]", ("embed", "mlp")),
        (r"\['down_proj'\]\['kernel'\]", ("mlp", "embed")),
    ),
))
