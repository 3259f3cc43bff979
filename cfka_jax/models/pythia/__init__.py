"""GPT-NeoX (Pythia) port: config, NNX model, strict HF conversion and its registry entry (``models/family.py``)."""

from cfka_jax.models.family import Family, ModelSize, Traits, register
from cfka_jax.models.pythia.config import PythiaConfig
from cfka_jax.models.pythia.convert import export, load
from cfka_jax.models.pythia.model import PythiaModel

__all__ = ["FAMILY", "PythiaConfig", "PythiaModel", "export", "load"]


def from_size(size: ModelSize, *, vocab_size: int, **fields) -> PythiaConfig:
    """A from-scratch GPT-NeoX config of ``size`` (no grouped-query attention: ``size.kv_heads`` is not used)."""
    return PythiaConfig(vocab_size=vocab_size, **size.hf_sizes(gqa=False), **fields)


def traits(cfg: PythiaConfig) -> Traits:
    """LayerNorm everywhere, parallel residual (``use_parallel_residual``), partial RoPE, fused per-head QKV."""
    return Traits(family="pythia", tied=cfg.tie_word_embeddings, norm="layernorm", norm_eps=cfg.layer_norm_eps,
                  parallel_residual=cfg.use_parallel_residual, head_dim=cfg.head_dim, kv_heads=cfg.num_attention_heads,
                  rotary_dim=cfg.rotary_dim,
                  qk_norm=False, qkv="fused", mlp="two_layer", hidden_act=cfg.hidden_act, attn="attention")


FAMILY = register(Family(
    name="pythia",
    model_types=("gpt_neox",),
    config_cls=PythiaConfig,
    model_cls=PythiaModel,
    load=load,
    export=export,
    from_size=from_size,
    traits=traits,
    embed=PythiaModel.EMBED,
    head=PythiaModel.HEAD,
    final_norm=PythiaModel.FINAL_NORM,
    lora_targets=("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"),
    param_axes=(
        (r"\['embed_in'\]\['embedding'\]", ("vocab", "embed")),
        (r"\['embed_out'\]\['kernel'\]", ("embed", "vocab")),
        (r"\['query_key_value'\]\['kernel'\]", ("embed", "heads")),
        (r"\['query_key_value'\]\['bias'\]", ("heads",)),
        (r"\['dense'\]\['kernel'\]", ("heads", "embed")),
        (r"\['dense_h_to_4h'\]\['kernel'\]", ("embed", "mlp")),
        (r"\['dense_h_to_4h'\]\['bias'\]", ("mlp",)),
        (r"\['dense_4h_to_h'\]\['kernel'\]", ("mlp", "embed")),
    ),
))
