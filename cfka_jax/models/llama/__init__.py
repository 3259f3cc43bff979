"""Llama port (Llama-2, Llama-3/3.1/3.2, TinyLlama): config, NNX model, strict HF conversion and its registry entry
(``models/family.py``)."""

from cfka_jax.models.family import Family, ModelSize, Traits, register
from cfka_jax.models.llama.config import Llama3Scaling, LlamaConfig
from cfka_jax.models.llama.convert import export, load
from cfka_jax.models.llama.model import LlamaModel

__all__ = ["FAMILY", "Llama3Scaling", "LlamaConfig", "LlamaModel", "export", "load"]


def from_size(size: ModelSize, *, vocab_size: int, **fields) -> LlamaConfig:
    """A from-scratch Llama config of ``size`` (grouped-query attention with ``size.kv_heads``; untied head unless
    ``tie_word_embeddings=True`` is passed)."""
    return LlamaConfig(vocab_size=vocab_size, hidden_size=size.hidden, intermediate_size=size.intermediate,
                       num_hidden_layers=size.layers, num_attention_heads=size.heads,
                       num_key_value_heads=size.kv_heads, **fields)


def traits(cfg: LlamaConfig) -> Traits:
    """RMSNorm, sequential residual, full-width RoPE, separate q/k/v/o, SwiGLU (biases as the config says)."""
    return Traits(family="llama", tied=cfg.tie_word_embeddings, norm="rmsnorm", norm_eps=cfg.rms_norm_eps,
                  parallel_residual=False, head_dim=cfg.head_size, kv_heads=cfg.kv_heads,
                  rotary_dim=cfg.head_size, qk_norm=False,
                  qkv="separate", mlp="swiglu", hidden_act=cfg.hidden_act, attn="self_attn", mlp_bias=cfg.mlp_bias)


FAMILY = register(Family(
    name="llama",
    model_types=("llama",),
    config_cls=LlamaConfig,
    model_cls=LlamaModel,
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
        (r"\['(gate_proj|up_proj)'\]\['bias'\]", ("mlp",)),
        (r"\['down_proj'\]\['kernel'\]", ("mlp", "embed")),
    ),
))
