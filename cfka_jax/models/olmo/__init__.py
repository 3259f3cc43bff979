"""OLMo port (HF ``model_type`` ``"olmo"``: OLMo-1B/7B, OLMo-7B-0424/0724): config, NNX model, strict HF
conversion and its registry entry (``models/family.py``)."""

from cfka_jax.models import gqa
from cfka_jax.models.family import ModelSize, Traits, register
from cfka_jax.models.olmo.config import LAYER_NORM_EPS, OlmoConfig
from cfka_jax.models.olmo.convert import export, load
from cfka_jax.models.olmo.model import OlmoModel

__all__ = ["FAMILY", "OlmoConfig", "OlmoModel", "export", "load"]


def from_size(size: ModelSize, *, vocab_size: int, **fields) -> OlmoConfig:
    """A from-scratch OLMo config of ``size`` (grouped-query attention with ``size.kv_heads``; untied head and no
    q/k/v clamp unless ``tie_word_embeddings`` / ``clip_qkv`` are passed)."""
    return OlmoConfig(vocab_size=vocab_size, **size.hf_sizes(), **fields)


def traits(cfg: OlmoConfig) -> Traits:
    """Parameter-free LayerNorms (eps 1e-5), pre-norm sequential residual, the q/k/v clamp of ``cfg``."""
    return gqa.traits("olmo", cfg, norm="nonparametric_layernorm", norm_eps=LAYER_NORM_EPS, clip_qkv=cfg.clip_qkv)


FAMILY = register(gqa.family("olmo", ("olmo",), OlmoConfig, OlmoModel, load=load, export=export,
                             from_size=from_size, traits_of=traits))
