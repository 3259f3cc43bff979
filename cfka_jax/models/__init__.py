"""Flax NNX ports of pretrained causal LMs (GPT-NeoX/Pythia, Qwen2/2.5, Qwen3, Llama, OLMo, OLMo-2) with strict HF
conversion.

Public API::

    model = from_pretrained("path/to/hf_folder", dtype=jnp.float32)   # config.json + safetensors
    out = model(tokens_BS, attention_mask_BT=mask, return_hidden=True)  # ModelOutput
    save_pretrained(model, "path/to/out")                               # loadable by transformers
    tok = load_tokenizer("path/to/hf_folder")

Everything is read from local folders; nothing is downloaded. Families are looked up in the registry
(``models/family.py``) by the ``model_type`` of ``config.json`` and by the config class of a model.
"""

from __future__ import annotations

import os
from typing import Any

import jax.numpy as jnp

from cfka_jax.models import family, hub, llama, olmo, olmo2, pythia, qwen
from cfka_jax.models.family import Family, ModelSize
from cfka_jax.models.llama import LlamaConfig, LlamaModel
from cfka_jax.models.olmo import OlmoConfig, OlmoModel
from cfka_jax.models.olmo2 import Olmo2Config, Olmo2Model
from cfka_jax.models.outputs import KVCache, ModelOutput
from cfka_jax.models.pythia import PythiaConfig, PythiaModel
from cfka_jax.models.qwen import QwenConfig, QwenModel

__all__ = [
    "Family",
    "KVCache",
    "LlamaConfig",
    "LlamaModel",
    "ModelOutput",
    "ModelSize",
    "Olmo2Config",
    "Olmo2Model",
    "OlmoConfig",
    "OlmoModel",
    "PythiaConfig",
    "PythiaModel",
    "QwenConfig",
    "QwenModel",
    "config_from_hf",
    "family",
    "from_pretrained",
    "load_tokenizer",
    "save_pretrained",
]

Model = PythiaModel | QwenModel | LlamaModel | OlmoModel | Olmo2Model
config_from_hf = family.config_from_hf


def from_pretrained(
    path: str | os.PathLike, *, dtype: Any = jnp.float32, scan_layers: bool = False, remat: bool = False,
    attention_impl: str = "auto",
) -> Model:
    """Load a local HF checkpoint folder into an NNX model.

    Args:
        path: folder with ``config.json`` and ``model.safetensors`` (or a sharded index).
        dtype: parameter/activation dtype (float32 or bfloat16; softmax and logits stay float32).
        scan_layers: stack the blocks and apply them with ``nnx.scan``.
        remat: rematerialise each block in the backward pass.
        attention_impl: ``"auto"`` (fused on GPU/TPU, explicit on CPU), ``"explicit"`` or ``"fused"``
            (``layers.resolve_attention_impl``).

    Raises:
        FileNotFoundError: no such folder (never a Hub lookup), no ``config.json``, no weights, or a missing shard.
        ValueError: an unreadable or unsupported ``config.json`` (the message names the file and the fields) or
            weights file; ``hub.ConversionError`` (a ValueError, naming the folder) when tensors do not match.

    Warns:
        hub.NonFiniteWeightsWarning: naming every tensor that holds NaN or Inf.
    """
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype}")
    raw = hub.read_config(path)
    try:
        cfg = config_from_hf(raw, dtype=dtype, scan_layers=scan_layers, remat=remat, attention_impl=attention_impl)
    except ValueError as e:
        raise ValueError(f"{os.path.join(os.fspath(path), hub.CONFIG_FILE)}: {e}") from None
    tensors = hub.open_tensors(path)  # streamed: one shard in host memory at a time
    try:
        return family.of(cfg).load(cfg, tensors)
    except hub.ConversionError as e:
        raise hub.ConversionError(f"{os.fspath(path)}: {e}") from None


def save_pretrained(model: Model, path: str | os.PathLike) -> None:
    """Write ``config.json`` and ``model.safetensors`` that ``transformers`` loads (``AutoModelForCausalLM``)."""
    hub.write_checkpoint(path, model.cfg.to_hf_config(), family.of(model).export(model))


def load_tokenizer(path: str | os.PathLike):
    """The HF fast tokenizer saved in ``path`` (local files only; see ``cfka_jax.data.tokenize.load_tokenizer``)."""
    from cfka_jax.data.tokenize import load_tokenizer as load

    return load(path)
