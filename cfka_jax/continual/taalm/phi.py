"""The Train-Attention model φ and the pure apply functions of θ and φ (spec taalm.md §3, §4.5).

φ is a causal decoder body (a Pythia or Qwen port, its own size, the *same token ids* as θ) whose LM head is
replaced by ``Linear(D → 1, bias)`` and a sigmoid: one weight in (0, 1) per token. The weight of token s (as a
training target) is σ(head(h^φ_s)), h^φ_s being φ's final normed hidden state at s itself, so φ has seen the
weighted token (§3; ``TAALM_trainer.py`` L71–73). Position 0's output is never used (column 0 of the token-space
weights is ignored by every loss).

Head init (quirk #4): ``torch_uniform`` (default; the net effect of the reference's ``reboot_phi_model``:
PyTorch's Linear default, weight ~ U(±1/√D)) or ``normal_0.001``; the bias starts at 4.0, σ(4) ≈ 0.982, so φ
starts near uniform weights, i.e. close to plain fine-tuning. What trains: with LoRA, φ's adapters plus the head
weight and bias (the base, embeddings and norms are frozen); without, every parameter.

Everything transformed twice works on split pytrees (convention 5): :func:`split_trainable` splits a model into
``(graphdef, train, frozen, rest)`` and :func:`make_logits_fn` / :func:`make_weights_fn` return pure
``fn(train, frozen, batch, key)``. LoRA dropout takes an explicit PRNG key (``key=None``: deterministic, the
adapters' dropout is the identity); NNX's own dropout stream cannot be advanced inside ``jax.grad``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import flax.nnx as nnx
import jax
import jax.numpy as jnp

from cfka_jax.continual.peft import LoRAConfig, LoRALinear, apply_lora
from cfka_jax.models import family, layers
from cfka_jax.shapes import Array, Float, Int

HEAD_INITS = ("torch_uniform", "normal_0.001")


@dataclasses.dataclass(frozen=True)
class PhiConfig:
    """How φ is built from a body.

    Attributes:
        head_init: ``torch_uniform`` (U(±1/√D), the reference's net init) or ``normal_0.001``.
        bias_init: the head bias (4.0 in the reference).
        lora: LoRA on the body (reference r 64, α 16, dropout 0.1 on every linear layer); None trains it fully.
        seed: seed of the head and adapter initialisation (the reference rebuilds the head under seed 42).
    """

    head_init: str = "torch_uniform"
    bias_init: float = 4.0
    lora: LoRAConfig | None = LoRAConfig(rank=64, alpha=16.0, dropout=0.1)
    seed: int = 42

    def __post_init__(self):
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"head_init must be one of {HEAD_INITS}, got {self.head_init!r}")
        if not math.isfinite(self.bias_init):
            raise ValueError(f"bias_init must be finite, got {self.bias_init}")


def _head_kernel_init(kind: str, d: int):
    if kind == "normal_0.001":
        return nnx.initializers.normal(0.001)
    bound = 1.0 / math.sqrt(d)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


class TrainAttention(nnx.Module):
    """φ: ``body`` (a ``DecoderLM`` without its LM head) + ``score`` (``Linear(D → 1)``) + sigmoid."""

    def __init__(self, body: layers.DecoderLM, *, head_init: str = "torch_uniform", bias_init: float = 4.0,
                 rngs: nnx.Rngs):
        if not body.cfg.tie_word_embeddings:  # the untied LM head is dropped (a tied one is the embedding φ keeps)
            delattr(body, family.of(body).head)
        self.body = body
        d = body.cfg.hidden_size
        self.score = nnx.Linear(d, 1, use_bias=True, kernel_init=_head_kernel_init(head_init, d),
                                bias_init=nnx.initializers.constant(bias_init), rngs=rngs)

    def __call__(self, tokens_BS: Int[Array, "B S"], *, positions_BS: Int[Array, "B S"] | None = None,
                 attention_mask_BT: Int[Array, "B S"] | None = None,
                 segment_ids_BS: Int[Array, "B S"] | None = None) -> Float[Array, "B S"]:
        """Token weights ``w[b, s] = σ(score(h^φ_{b,s}))`` in (0, 1), float32 (``segment_ids``: packed documents
        are read separately, as φ reads one document at a time)."""
        body = self.body
        rotary_dim, theta = body._rope()
        out = layers.forward_decoder(
            tokens_BS, embed=body._embed(), layers=body.layers, final_norm=body._final_norm(),
            head=lambda h: self.score(h.astype(self.score.kernel[...].dtype)), rotary_dim=rotary_dim,
            rope_theta=theta, scan=body.cfg.scan_layers, remat=body.cfg.remat, positions_BS=positions_BS,
            attention_mask_BT=attention_mask_BT, cache=None, return_hidden=False, return_attn=False,
            segment_ids_BS=segment_ids_BS, inv_freq=body.rope_frequencies())
        return jax.nn.sigmoid(out.logits[..., 0])


def build_phi(body: layers.DecoderLM, cfg: PhiConfig) -> TrainAttention:
    """φ from ``body`` (modified in place: adapters added when ``cfg.lora``, LM head removed)."""
    rngs = nnx.Rngs(cfg.seed)
    if cfg.lora is not None:
        apply_lora(body, cfg.lora, rngs=rngs)
    return TrainAttention(body, head_init=cfg.head_init, bias_init=cfg.bias_init, rngs=rngs)


def phi_trainable(phi: TrainAttention, *, lora: bool) -> nnx.filterlib.Filter:
    """φ's trainable variables: adapters + head (``lora``) or every parameter."""
    return nnx.Any(nnx.LoRAParam, nnx.PathContains("score")) if lora else nnx.Param


def split_trainable(model: nnx.Module, trainable: nnx.filterlib.Filter):
    """``(graphdef, train, frozen, rest)``: trainable parameters, the other parameters, everything else."""
    return nnx.split(model, trainable, nnx.Param, ...)


def _dropout(x, *, rate: float, key):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros_like(x))


def keyed_lora_dropout(model: nnx.Module, key: jax.Array | None) -> nnx.Module:
    """Give every LoRA adapter of a *merged, local* model an explicit dropout key (None: no dropout)."""
    i = 0
    for _, layer in nnx.iter_modules(model):
        if isinstance(layer, LoRALinear) and layer.dropout is not None:
            rate = layer.dropout.rate
            layer.dropout = (lambda x: x) if key is None else functools.partial(
                _dropout, rate=rate, key=jax.random.fold_in(key, i))
            i += 1
    return model


def _call_kwargs(batch: dict) -> dict:
    return {"positions_BS": batch.get("positions"), "attention_mask_BT": batch.get("attention_mask")}


def make_logits_fn(graphdef, rest):
    """Pure ``logits(train, frozen, batch, key=None) -> B S V`` of a merged LM (θ)."""

    def logits(train, frozen, batch: dict, key=None):
        model = keyed_lora_dropout(nnx.merge(graphdef, train, frozen, rest), key)
        return model(batch["tokens"], **_call_kwargs(batch)).logits

    return logits


def make_weights_fn(graphdef, rest):
    """Pure ``weights(train, frozen, batch, key=None) -> B S`` of a merged φ (token space)."""

    def weights(train, frozen, batch: dict, key=None):
        phi = keyed_lora_dropout(nnx.merge(graphdef, train, frozen, rest), key)
        return phi(batch["tokens"], segment_ids_BS=batch.get("segment_ids"), **_call_kwargs(batch))

    return weights
