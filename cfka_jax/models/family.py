"""The registry of model families, keyed by the HF ``model_type``: everything a layer outside ``models/`` may know
about an architecture.

A :class:`Family` bundles a port's config class, model class, strict converters (HF tensors ⇄ NNX), the attribute
names of its input embedding, untied head and final norm, its default LoRA targets, the logical axes of its
parameters (``parallel/rules``), ``from_size`` (a from-scratch config of a :class:`ModelSize`) and ``traits(cfg)``
(the per-config architecture facts of :class:`Traits`). Other layers ask the registry instead of testing classes::

    fam = family.of(model.cfg)                    # or family.for_model_type("llama"), family.get("qwen")
    fam.lora_targets, fam.embed, fam.traits(model.cfg).norm
    model = fam.build(fam.from_size(ModelSize(32, 2, 4, 2, 64), vocab_size=97), seed=0)

Adding a family is one folder ``models/<name>/`` (config.py, model.py, convert.py and a ``FAMILY`` entry in its
``__init__.py``) plus its module name in :data:`BUILTIN` (the idea of levanter's ``LmConfig.register_subclass``).
The builtin families are imported on the first lookup, so importing this module imports no port.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import flax.nnx as nnx
import numpy as np

from cfka_jax import values

BUILTIN = ("cfka_jax.models.pythia", "cfka_jax.models.qwen", "cfka_jax.models.llama", "cfka_jax.models.olmo",
           "cfka_jax.models.olmo2", "cfka_jax.models.qwen3_5")
"""Modules whose ``FAMILY`` is registered on the first lookup."""

NORMS = ("layernorm", "rmsnorm", "nonparametric_layernorm")
NORM_POSITIONS = ("pre", "post")
QK_NORM_SCOPES = ("head", "projection")
QKV_LAYOUTS = ("fused", "separate")
MLP_KINDS = ("two_layer", "swiglu")


@dataclasses.dataclass(frozen=True)
class ModelSize:
    """A from-scratch decoder's sizes: width D, blocks L, query heads N, KV heads K, MLP width F.

    The one size type of the package (Biography presets, the synthetic CKL world, benchmarks). A family without
    grouped-query attention (GPT-NeoX) ignores ``kv_heads``.
    """

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 384

    def __post_init__(self):
        values.check_sizes(self, ("hidden", "layers", "heads", "kv_heads", "intermediate"))

    def hf_sizes(self, *, gqa: bool = True) -> dict[str, int]:
        """The sizes under their HF ``config.json`` names (``num_key_value_heads`` only with ``gqa``)."""
        out = {"hidden_size": self.hidden, "intermediate_size": self.intermediate, "num_hidden_layers": self.layers,
               "num_attention_heads": self.heads}
        return {**out, "num_key_value_heads": self.kv_heads} if gqa else out


@dataclasses.dataclass(frozen=True)
class Traits:
    """Architecture facts of one config that other layers read (geometry streams, conservation invariants).

    Attributes:
        family: the family's name (``Family.name``).
        tied: the LM head is the input embedding transposed.
        norm: ``"layernorm"`` (scale and bias), ``"rmsnorm"`` (scale only) or ``"nonparametric_layernorm"``
            (neither: OLMo), for every norm of the blocks and the final norm.
        norm_eps: the norms' epsilon.
        parallel_residual: ``x + attn(n1(x)) + mlp(n2(x))`` instead of the sequential ``y = x + attn(n1(x));
            y + mlp(n2(y))``.
        head_dim: H.
        kv_heads: K, the key/value heads (K = N without grouped-query attention).
        rotary_dim: R, the rotated width of each head (R < H: partial RoPE; the rest pass through).
        qk_norm: RMSNorm ``q_norm`` / ``k_norm`` on q and k before RoPE, over ``qk_norm_scope``.
        qkv: ``"fused"`` (one ``attention.query_key_value`` kernel, blocked ``[Q | K | V]``, output ``dense``) or
            ``"separate"`` (``self_attn.{q,k,v,o}_proj``).
        mlp: ``"two_layer"`` (``mlp.dense_h_to_4h`` → ``hidden_act`` → ``mlp.dense_4h_to_h``, biased) or
            ``"swiglu"`` (``mlp.down_proj(silu(gate_proj(x)) * up_proj(x))``).
        hidden_act: the MLP activation.
        attn: the attribute name of a block's attention module.
        mlp_bias: the SwiGLU projections carry biases.
        norm_position: ``"pre"``: a block's norms normalise the sublayer inputs (``input_layernorm``,
            ``post_attention_layernorm`` before the MLP); ``"post"`` (OLMo-2): they normalise the sublayer outputs
            inside the residual branch, ``y = x + post_attention_layernorm(attn(x)); y +
            post_feedforward_layernorm(mlp(y))``, and the sublayers read the raw residual.
        qk_norm_scope: ``"head"`` (Qwen3: one scale of width H shared by every head, statistics per head) or
            ``"projection"`` (OLMo-2: scales of width N*H and K*H, statistics over the whole projection, before
            the heads split).
        clip_qkv: q, k and v are clamped to ``[-clip_qkv, clip_qkv]`` after their projections (OLMo), or None.
    """

    family: str
    tied: bool
    norm: str
    norm_eps: float
    parallel_residual: bool
    head_dim: int
    kv_heads: int
    rotary_dim: int
    qk_norm: bool
    qkv: str
    mlp: str
    hidden_act: str
    attn: str
    mlp_bias: bool = False
    norm_position: str = "pre"
    qk_norm_scope: str = "head"
    clip_qkv: float | None = None

    def __post_init__(self):
        for name, allowed in (("norm", NORMS), ("qkv", QKV_LAYOUTS), ("mlp", MLP_KINDS),
                              ("norm_position", NORM_POSITIONS), ("qk_norm_scope", QK_NORM_SCOPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family (module docstring).

    Attributes:
        name: the short name used by ``--arch`` and run specs (``"qwen"``).
        model_types: the HF ``model_type`` values this family reads (``("qwen2", "qwen3")``).
        config_cls: frozen config with ``from_hf_config(d, **overrides)`` / ``to_hf_config()``.
        model_cls: the NNX model, ``model_cls(cfg, *, rngs)`` (a ``layers.DecoderLM``).
        load: ``load(cfg, tensors) -> model`` from HF-named numpy tensors (strict).
        export: ``export(model) -> tensors``, the inverse of ``load``.
        from_size: ``from_size(size, *, vocab_size, **fields) -> cfg``, a from-scratch config; ``fields`` set any
            other config field (dtype, max_position_embeddings, ...).
        traits: ``traits(cfg) -> Traits``.
        embed / head / final_norm: attribute names of the input embedding (``nnx.Embed``), the untied head
            (``nnx.Linear``, absent when tied) and the final norm on the model.
        lora_targets: attribute names of the block linears LoRA adapts by default.
        param_axes: ``(key-path regex, logical axes)`` rows for ``parallel/rules`` (first match wins).
    """

    name: str
    model_types: tuple[str, ...]
    config_cls: type
    model_cls: type
    load: Callable[[Any, Mapping[str, np.ndarray]], nnx.Module]
    export: Callable[[nnx.Module], dict[str, np.ndarray]]
    from_size: Callable[..., Any]
    traits: Callable[[Any], Traits]
    embed: str
    head: str
    final_norm: str
    lora_targets: tuple[str, ...]
    param_axes: tuple[tuple[str, tuple[str | None, ...]], ...]

    def config_from_hf(self, d: dict[str, Any], **overrides: Any):
        """``config_cls.from_hf_config(d, **overrides)``."""
        return self.config_cls.from_hf_config(d, **overrides)

    def build(self, cfg, seed: int = 0) -> nnx.Module:
        """A random-init model of ``cfg`` (``model_cls(cfg, rngs=nnx.Rngs(seed))``)."""
        return self.model_cls(cfg, rngs=nnx.Rngs(seed))


_BY_NAME: dict[str, Family] = {}
_BY_MODEL_TYPE: dict[str, Family] = {}
_BY_CONFIG: dict[type, Family] = {}
_loaded = False


def register(fam: Family) -> Family:
    """Add ``fam`` to the registry (and to ``parallel/rules``' parameter axes); returns it.

    Raises:
        ValueError: its name, a model_type or its config class is already registered to another family.
    """
    from cfka_jax.parallel import rules

    clashes = [f"name {fam.name!r}"] if _BY_NAME.get(fam.name, fam) is not fam else []
    clashes += [f"model_type {t!r}" for t in fam.model_types if _BY_MODEL_TYPE.get(t, fam) is not fam]
    if _BY_CONFIG.get(fam.config_cls, fam) is not fam:
        clashes.append(f"config class {fam.config_cls.__name__}")
    if clashes:
        raise ValueError(f"family {fam.name!r} clashes with a registered family: {', '.join(clashes)}")
    _BY_NAME[fam.name] = fam
    _BY_MODEL_TYPE.update({t: fam for t in fam.model_types})
    _BY_CONFIG[fam.config_cls] = fam
    rules.register_param_axes(fam.name, fam.param_axes)
    return fam


def _ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN:
            importlib.import_module(module)  # each module calls register(FAMILY) on import


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order."""
    _ensure_loaded()
    return tuple(_BY_NAME.values())


def names() -> tuple[str, ...]:
    """The registered family names (the ``--arch`` choices)."""
    return tuple(f.name for f in families())


def model_types() -> tuple[str, ...]:
    """Every HF ``model_type`` the registry reads."""
    _ensure_loaded()
    return tuple(_BY_MODEL_TYPE)


def get(name: str) -> Family:
    """The family called ``name`` (``"pythia"``, ``"qwen"``, ``"llama"``, ``"olmo"``, ``"olmo2"``).

    Raises:
        ValueError: an unknown name, listing the registered ones.
    """
    _ensure_loaded()
    if name not in _BY_NAME:
        raise ValueError(f"unknown model family {name!r}; expected one of {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def for_model_type(model_type: Any) -> Family:
    """The family reading HF ``model_type``.

    Raises:
        ValueError: an unsupported ``model_type``, listing the supported ones.
    """
    _ensure_loaded()
    if not isinstance(model_type, str) or model_type not in _BY_MODEL_TYPE:
        raise ValueError(f"unsupported model_type {model_type!r}; expected one of {', '.join(_BY_MODEL_TYPE)}")
    return _BY_MODEL_TYPE[model_type]


def of(obj: Any) -> Family:
    """The family of a config, or of a model holding one as ``.cfg``.

    Raises:
        ValueError: ``obj`` is neither a registered config nor a model of one.
    """
    _ensure_loaded()
    cfg = getattr(obj, "cfg", obj)
    fam = _BY_CONFIG.get(type(cfg))
    if fam is None:
        raise ValueError(f"no registered model family has config class {type(cfg).__name__} "
                         f"(registered: {', '.join(_BY_NAME)})")
    return fam


def config_from_hf(d: Any, **overrides: Any):
    """The config of a ``config.json`` dict, dispatched on its ``model_type``.

    Raises:
        ValueError: ``d`` is not a dict, an unknown ``model_type``, or unsupported or ill-typed fields.
    """
    if not isinstance(d, dict):
        raise ValueError(f"a model config must be a JSON object, got {type(d).__name__}")
    return for_model_type(d.get("model_type")).config_from_hf(d, **overrides)
