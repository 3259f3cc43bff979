"""Strict HF <-> NNX conversion for Qwen3.5: a per-layer key table (a layer's keys depend on its kind) run both ways.

``qwen3_5_text`` checkpoints (``Qwen3_5ForCausalLM``) keep the language model under ``model.`` and the head at
``lm_head.weight``. ``qwen3_5`` checkpoints (``Qwen3_5ForConditionalGeneration``) keep it under
``model.language_model.``, beside the vision tower ``model.visual.*``; released ones also hold a multi-token
prediction head ``mtp.*``. The port reads the language model and skips exactly these two prefixes, naming them and
their tensor counts in a :class:`SkippedWeightsWarning` (the conversion report); any other key that fills no
parameter is an error, as are missing keys and shape mismatches (``hub.load_into``). Export writes the
``qwen3_5_text`` layout.

Transforms: linear weights are transposed (HF ``[out, in]`` -> kernel ``[in, out]``); the depthwise convolution
``conv1d.weight`` ``[C, 1, Z]`` becomes the kernel ``[Z, C]``; norm scales (HF ``weight``), ``A_log``,
``dt_bias``, biases and the embedding copy as they are. Tied embeddings: an ``lm_head.weight`` is accepted only if
it equals the embedding.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping

import numpy as np

from cfka_jax.models import hub
from cfka_jax.models.qwen3_5.config import Qwen35Config
from cfka_jax.models.qwen3_5.model import Qwen35Model


def _conv_to_nnx(a: np.ndarray) -> np.ndarray:
    if a.ndim != 3 or a.shape[1] != 1:
        raise ValueError(f"a depthwise conv weight is [C, 1, Z], got {a.shape}")
    return a[:, 0, :].T


TRANSFORMS: dict[str, hub.Transform] = {"identity": hub.IDENTITY, "transpose": hub.TRANSPOSE,
                                        "conv": (_conv_to_nnx, lambda a: np.ascontiguousarray(a.T)[:, None, :])}
WRAPPED = "model.language_model."
SKIPPED = {"model.visual.": "vision tower", "mtp.": "multi-token-prediction head"}
"""Prefixes of tensors that are part of a released checkpoint but not of the causal language model."""


class SkippedWeightsWarning(UserWarning):
    """A checkpoint holds tensors the port does not read (vision tower, MTP head); the message names them."""


def rules(cfg: Qwen35Config) -> list[hub.Rule]:
    """The key table: embedding, per-layer norms, mixer and MLP weights, the final norm, the untied head."""
    table = [hub.Rule("model.embed_tokens.weight", "embed_tokens.embedding"), hub.Rule("model.norm.weight",
                                                                                     "norm.scale")]
    if not cfg.tie_word_embeddings:
        table.append(hub.Rule("lm_head.weight", "lm_head.kernel", "transpose"))
    for i, kind in enumerate(cfg.layer_types):
        hf, nx = f"model.layers.{i}.", f"layers.{i}."
        table += [hub.Rule(hf + f"{n}.weight", nx + f"{n}.scale") for n in ("input_layernorm",
                                                                           "post_attention_layernorm")]
        table += [hub.Rule(hf + f"mlp.{p}.weight", nx + f"mlp.{p}.kernel", "transpose")
                  for p in ("gate_proj", "up_proj", "down_proj")]
        table += _linear_attn(hf, nx) if kind == "linear_attention" else _self_attn(hf, nx, cfg.attention_bias)
    return table


def _self_attn(hf: str, nx: str, bias: bool) -> list[hub.Rule]:
    table = [hub.Rule(hf + f"self_attn.{n}.weight", nx + f"self_attn.{n}.scale") for n in ("q_norm", "k_norm")]
    for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
        table.append(hub.Rule(hf + f"self_attn.{p}.weight", nx + f"self_attn.{p}.kernel", "transpose"))
        if bias:
            table.append(hub.Rule(hf + f"self_attn.{p}.bias", nx + f"self_attn.{p}.bias"))
    return table


def _linear_attn(hf: str, nx: str) -> list[hub.Rule]:
    a, b = hf + "linear_attn.", nx + "linear_attn."
    table = [hub.Rule(a + f"{p}.weight", b + f"{p}.kernel", "transpose")
             for p in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")]
    return table + [hub.Rule(a + "conv1d.weight", b + "conv1d", "conv"), hub.Rule(a + "dt_bias", b + "dt_bias"),
                    hub.Rule(a + "A_log", b + "A_log"), hub.Rule(a + "norm.weight", b + "norm.scale")]


def extras(cfg: Qwen35Config) -> list[hub.Extra]:
    """HF keys accepted without filling a parameter: with tied embeddings an ``lm_head.weight`` equal to it."""
    if cfg.tie_word_embeddings:
        return [(re.escape("lm_head.weight"), hub.tied_to("model.embed_tokens.weight"))]
    return []


class _LanguageModel(Mapping):
    """The language-model tensors of a checkpoint under the ``qwen3_5_text`` names (``model.language_model.X`` read
    as ``model.X``), without the :data:`SKIPPED` prefixes."""

    def __init__(self, tensors: Mapping[str, np.ndarray], wrapped: bool):
        self.tensors, self.names = tensors, {}
        for key in tensors:
            if any(key.startswith(p) for p in SKIPPED):
                continue
            name = key
            if wrapped and key.startswith(WRAPPED):
                name = "model." + key[len(WRAPPED):]
            elif wrapped and key.startswith("model."):  # stray text-layout key: reported unused, never merged
                name = f"{key} (outside {WRAPPED})"
            self.names[name] = key

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensors[self.names[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def skipped(keys) -> dict[str, int]:
    """``{prefix: count}`` of the keys under each :data:`SKIPPED` prefix (the prefixes with none left out)."""
    counts = {p: sum(1 for k in keys if k.startswith(p)) for p in SKIPPED}
    return {p: n for p, n in counts.items() if n}


def load(cfg: Qwen35Config, tensors: Mapping[str, np.ndarray]) -> Qwen35Model:
    """A :class:`Qwen35Model` filled from HF tensors of either layout (module docstring); warns
    (:class:`SkippedWeightsWarning`) naming the skipped prefixes.

    Raises:
        hub.ConversionError: one error listing every unused key, unfilled parameter and mismatch.
    """
    wrapped = any(k.startswith(WRAPPED) for k in tensors)
    report = skipped(tensors)
    if report:
        shown = ", ".join(f"{n} {SKIPPED[p]} tensor(s) under {p}" for p, n in report.items())
        warnings.warn(f"Qwen3.5 checkpoint: not loaded (not part of the causal LM): {shown}", SkippedWeightsWarning,
                      stacklevel=2)
    return hub.load_model(Qwen35Model, cfg, _LanguageModel(tensors, wrapped), rules(cfg), TRANSFORMS, extras(cfg))


def export(model: Qwen35Model) -> dict[str, np.ndarray]:
    """HF-named numpy tensors for ``model`` in the ``qwen3_5_text`` layout (inverse of :func:`load`)."""
    return hub.export_model(model, rules(model.cfg), TRANSFORMS)
