"""Qwen2/2.5 and Qwen3 port: config, NNX model and strict HF conversion."""

from cfka_jax.models.qwen.config import QwenConfig
from cfka_jax.models.qwen.convert import export, load
from cfka_jax.models.qwen.model import QwenModel

__all__ = ["QwenConfig", "QwenModel", "export", "load"]
