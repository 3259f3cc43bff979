"""Qwen2/2.5 and Qwen3 port: config, NNX model, strict HF conversion and its registry entry (``models/family.py``)."""

from cfka_jax.models import gqa
from cfka_jax.models.family import ModelSize, register
from cfka_jax.models.qwen.config import QwenConfig
from cfka_jax.models.qwen.convert import export, load
from cfka_jax.models.qwen.model import QwenModel

__all__ = ["FAMILY", "QwenConfig", "QwenModel", "export", "load"]


def from_size(size: ModelSize, *, vocab_size: int, **fields) -> QwenConfig:
    """A from-scratch config of ``size``: Qwen2 with tied embeddings, as the small Qwen models (``fields`` may
    override ``model_type`` and ``tie_word_embeddings`` too)."""
    return QwenConfig(vocab_size=vocab_size, **size.hf_sizes(),
                      **{"model_type": "qwen2", "tie_word_embeddings": True, **fields})


FAMILY = register(gqa.family("qwen", ("qwen2", "qwen3"), QwenConfig, QwenModel, load=load, export=export,
                             from_size=from_size))
