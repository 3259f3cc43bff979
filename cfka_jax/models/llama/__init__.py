"""Llama port (Llama-2, Llama-3/3.1/3.2, TinyLlama): config, NNX model, strict HF conversion and its registry entry
(``models/family.py``)."""

from cfka_jax.models import gqa
from cfka_jax.models.family import ModelSize, register
from cfka_jax.models.llama.config import Llama3Scaling, LlamaConfig
from cfka_jax.models.llama.convert import export, load
from cfka_jax.models.llama.model import LlamaModel

__all__ = ["FAMILY", "Llama3Scaling", "LlamaConfig", "LlamaModel", "export", "load"]


def from_size(size: ModelSize, *, vocab_size: int, **fields) -> LlamaConfig:
    """A from-scratch Llama config of ``size`` (grouped-query attention with ``size.kv_heads``; untied head unless
    ``tie_word_embeddings=True`` is passed)."""
    return LlamaConfig(vocab_size=vocab_size, **size.hf_sizes(), **fields)


FAMILY = register(gqa.family("llama", ("llama",), LlamaConfig, LlamaModel, load=load, export=export,
                             from_size=from_size))
