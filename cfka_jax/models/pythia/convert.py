"""Strict HF <-> NNX conversion for GPT-NeoX (Pythia): a declarative key table run both ways.

HF keys live under ``gpt_neox.`` except the untied head ``embed_out.weight``. The fused QKV is stored per head
interleaved (``[q_0, k_0, v_0, q_1, ...]``, each block H rows); the ``qkv_*`` transforms de-interleave it into
the blocked ``[Q | K | V]`` kernel used by :class:`~cfka_jax.models.pythia.model.PythiaAttention` and back.

Tied embeddings: no head key is expected; an ``embed_out.weight`` present in a tied checkpoint is accepted only
if it equals ``gpt_neox.embed_in.weight`` exactly (it then fills nothing), otherwise loading fails.

Constant buffers of older GPT-NeoX checkpoints (HF drops them silently through
``_keys_to_ignore_on_load_unexpected`` or non-persistent buffers) are accepted only after a check, since they
fill no parameter: ``attention.bias`` must be the lower-triangular causal mask, ``attention.masked_bias`` a
scalar, and ``attention.rotary_emb.inv_freq`` must equal the inverse frequencies recomputed from
``rotary_pct``/``rotary_emb_base`` (which cross-checks the config). Anything else is an unused key.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

import numpy as np

from cfka_jax.models import hub
from cfka_jax.models.pythia.config import PythiaConfig
from cfka_jax.models.pythia.model import PythiaModel

_L = "gpt_neox.layers.{i}."


def rules(cfg: PythiaConfig) -> list[hub.Rule]:
    """The key table for ``cfg`` (attention biases and the head only when the config has them)."""
    table = [
        hub.Rule("gpt_neox.embed_in.weight", "embed_in.embedding"),
        hub.Rule("gpt_neox.final_layer_norm.weight", "final_layer_norm.scale"),
        hub.Rule("gpt_neox.final_layer_norm.bias", "final_layer_norm.bias"),
    ]
    for norm in ("input_layernorm", "post_attention_layernorm"):
        table += [
            hub.Rule(_L + f"{norm}.weight", f"layers.{{i}}.{norm}.scale"),
            hub.Rule(_L + f"{norm}.bias", f"layers.{{i}}.{norm}.bias"),
        ]
    table += [
        hub.Rule(_L + "attention.query_key_value.weight", "layers.{i}.attention.query_key_value.kernel", "qkv_weight"),
        hub.Rule(_L + "attention.dense.weight", "layers.{i}.attention.dense.kernel", "transpose"),
    ]
    if cfg.attention_bias:
        table += [
            hub.Rule(_L + "attention.query_key_value.bias", "layers.{i}.attention.query_key_value.bias", "qkv_bias"),
            hub.Rule(_L + "attention.dense.bias", "layers.{i}.attention.dense.bias"),
        ]
    for lin in ("dense_h_to_4h", "dense_4h_to_h"):
        table += [
            hub.Rule(_L + f"mlp.{lin}.weight", f"layers.{{i}}.mlp.{lin}.kernel", "transpose"),
            hub.Rule(_L + f"mlp.{lin}.bias", f"layers.{{i}}.mlp.{lin}.bias"),
        ]
    if not cfg.tie_word_embeddings:
        table.append(hub.Rule("embed_out.weight", "embed_out.kernel", "transpose"))
    return table


def _qkv_bias_to_nnx(b: np.ndarray, n: int, h: int) -> np.ndarray:
    """``[N*3*H]`` per-head interleaved -> ``[3*N*H]`` blocked."""
    return b.reshape(n, 3, h).transpose(1, 0, 2).reshape(3 * n * h)


def _qkv_bias_to_hf(b: np.ndarray, n: int, h: int) -> np.ndarray:
    return b.reshape(3, n, h).transpose(1, 0, 2).reshape(3 * n * h)


def _qkv_weight_to_nnx(w: np.ndarray, n: int, h: int) -> np.ndarray:
    """HF ``[N*3*H, D]`` (rows per-head interleaved) -> kernel ``[D, 3*N*H]`` (columns blocked)."""
    d = w.shape[1]
    return w.reshape(n, 3, h, d).transpose(3, 1, 0, 2).reshape(d, 3 * n * h)


def _qkv_weight_to_hf(k: np.ndarray, n: int, h: int) -> np.ndarray:
    d = k.shape[0]
    return k.reshape(d, 3, n, h).transpose(2, 1, 3, 0).reshape(3 * n * h, d)


def transforms(cfg: PythiaConfig) -> dict[str, hub.Transform]:
    """Named transforms used by :func:`rules`, each a (HF -> NNX, NNX -> HF) pair."""
    n, h = cfg.num_attention_heads, cfg.head_dim
    return {
        "identity": hub.IDENTITY,
        "transpose": hub.TRANSPOSE,
        "qkv_weight": (
            functools.partial(_qkv_weight_to_nnx, n=n, h=h),
            functools.partial(_qkv_weight_to_hf, n=n, h=h),
        ),
        "qkv_bias": (functools.partial(_qkv_bias_to_nnx, n=n, h=h), functools.partial(_qkv_bias_to_hf, n=n, h=h)),
    }


def _causal_mask_buffer(arr: np.ndarray, tensors: Mapping[str, np.ndarray]) -> str | None:
    m = arr.shape[-1]
    ok = arr.size == m * m and np.array_equal(arr.reshape(m, m).astype(bool), np.tril(np.ones((m, m), bool)))
    return None if ok else "not a lower-triangular causal mask"


def _scalar_buffer(arr: np.ndarray, tensors: Mapping[str, np.ndarray]) -> str | None:
    return None if arr.size == 1 else f"expected a scalar, got shape {arr.shape}"


def extras(cfg: PythiaConfig) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter, each with its check (see the module docstring)."""
    r = cfg.rotary_dim
    inv_freq = 1.0 / np.float64(cfg.rotary_emb_base) ** (np.arange(0, r, 2, dtype=np.float64) / r)
    found = [
        (r"gpt_neox\.layers\.\d+\.attention\.bias", _causal_mask_buffer),
        (r"gpt_neox\.layers\.\d+\.attention\.masked_bias", _scalar_buffer),
        (r"gpt_neox\.(layers\.\d+\.attention\.)?rotary_emb\.inv_freq", hub.equals(inv_freq)),
    ]
    if cfg.tie_word_embeddings:
        found.append((re.escape("embed_out.weight"), hub.tied_to("gpt_neox.embed_in.weight")))
    return found


def load(cfg: PythiaConfig, tensors: Mapping[str, np.ndarray]) -> PythiaModel:
    """A :class:`PythiaModel` filled from HF tensors (``hub.load_model``: one error listing every problem)."""
    return hub.load_model(PythiaModel, cfg, tensors, rules(cfg), transforms(cfg), extras(cfg))


def export(model: PythiaModel) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` (inverse of :func:`load`)."""
    return hub.export_model(model, rules(model.cfg), transforms(model.cfg))
