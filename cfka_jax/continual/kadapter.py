"""K-Adapter (Wang et al. 2021) on a frozen decoder, as the TAALM reference wires it (spec taalm.md §7.5).

The frozen base returns its HF-style hidden states (entry 0 = the embeddings, entry L = the final-normed output).
Adapter blocks read the states of the tap layers (default {1, ⌊L/2⌋, L}; the reference, on a 32-layer Llama:
1, 15, 32)::

    h_0 = 0;   h_i = Block_i(hidden[tap_i] + h_{i−1});   logits = head(final_hidden + 0.1·LayerNorm(h_last))

Block (GPT-2 style): ``x ← x + Drop(MHA(LN(x)))`` with causal multi-head attention (model width, the base's head
count, dropout on the attention probabilities), then ``x ← Drop(MLP(LN(x)))`` with MLP = Linear(D → 4D), GELU,
Linear(4D → D) and **no residual** (as released). Dropout defaults to the reference's 0.9 (quirk #14;
configurable). Only the blocks and the output LayerNorm train; the base (LoRA-free) stays frozen.
The released constructor is broken (``init_theta`` is missing, quirk #13); this one runs.
"""

from __future__ import annotations

import dataclasses

import flax.nnx as nnx
import jax
import jax.numpy as jnp

from cfka_jax.models import layers
from cfka_jax.shapes import Array, Bool, Float, Int


@dataclasses.dataclass(frozen=True)
class KAdapterConfig:
    """Tap layers (None: {1, ⌊L/2⌋, L}), dropout (attention probabilities and block outputs), output scale."""

    taps: tuple[int, ...] | None = None
    dropout: float = 0.9
    out_scale: float = 0.1
    seed: int = 0

    def __post_init__(self):
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.taps is not None and not self.taps:
            raise ValueError("taps must be None or non-empty")

    def tap_layers(self, num_layers: int) -> tuple[int, ...]:
        taps = self.taps if self.taps is not None else (1, max(num_layers // 2, 1), num_layers)
        if any(not 0 <= t <= num_layers for t in taps):
            raise ValueError(f"taps {taps} outside [0, {num_layers}]")
        return tuple(taps)


def _dropout(x, rate: float, key):
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros_like(x))


class AdapterBlock(nnx.Module):
    """GPT-2-style block: attention with residual, MLP without (module docstring)."""

    def __init__(self, d: int, heads: int, *, rngs: nnx.Rngs):
        self.heads = heads
        self.ln_1 = nnx.LayerNorm(d, rngs=rngs)
        self.c_attn = nnx.Linear(d, 3 * d, rngs=rngs)
        self.c_proj = nnx.Linear(d, d, rngs=rngs)
        self.ln_2 = nnx.LayerNorm(d, rngs=rngs)
        self.c_fc = nnx.Linear(d, 4 * d, rngs=rngs)
        self.c_out = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x_BSD: Float[Array, "B S D"], mask_BST: Bool[Array, "B S T"], rate: float, key=None):
        b, s, d = x_BSD.shape
        n = self.heads
        k1, k2, k3 = (None, None, None) if key is None else jax.random.split(key, 3)
        q, k, v = jnp.split(self.c_attn(self.ln_1(x_BSD)), 3, axis=-1)
        q_BSNH, k_BTNH, v_BTNH = (t.reshape(b, s, n, d // n) for t in (q, k, v))
        logits = jnp.einsum("bsnh,btnh->bnst", q_BSNH, k_BTNH) * jnp.asarray((d // n) ** -0.5, x_BSD.dtype)
        logits = jnp.where(mask_BST[:, None], logits.astype(jnp.float32), jnp.finfo(jnp.float32).min)
        probs = _dropout(jax.nn.softmax(logits, axis=-1).astype(x_BSD.dtype), rate, k1)
        attn = jnp.einsum("bnst,btnh->bsnh", probs, v_BTNH).reshape(b, s, d)
        x_BSD = x_BSD + _dropout(self.c_proj(attn), rate, k2)
        return _dropout(self.c_out(jax.nn.gelu(self.c_fc(self.ln_2(x_BSD)))), rate, k3)


class KAdapter(nnx.Module):
    """A frozen ``base`` (Pythia/Qwen port) plus K-Adapter blocks; ``__call__`` returns logits ``B S V``."""

    def __init__(self, base: layers.DecoderLM, cfg: KAdapterConfig = KAdapterConfig()):
        rngs = nnx.Rngs(cfg.seed)
        self.base = base
        self.cfg = cfg
        d, heads = base.cfg.hidden_size, base.cfg.num_attention_heads
        self.taps = cfg.tap_layers(base.cfg.num_hidden_layers)
        self.blocks = nnx.List([AdapterBlock(d, heads, rngs=rngs) for _ in self.taps])
        self.out_norm = nnx.LayerNorm(d, rngs=rngs)

    def __call__(self, tokens_BS: Int[Array, "B S"], *, positions_BS=None, attention_mask_BT=None, key=None
                 ) -> Float[Array, "B S V"]:
        out = self.base(tokens_BS, positions_BS=positions_BS, attention_mask_BT=attention_mask_BT,
                        return_hidden=True)
        b, s = tokens_BS.shape
        mask_BST, _, _ = layers.step_mask(b, s, attention_mask_BT, None)
        h = jnp.zeros_like(out.final_hidden)
        keys = [None] * len(self.blocks) if key is None else list(jax.random.split(key, len(self.blocks)))
        for tap, block, k in zip(self.taps, self.blocks, keys):
            h = block(jax.lax.stop_gradient(out.hidden_states[tap]) + h, mask_BST, self.cfg.dropout, k)
        final = jax.lax.stop_gradient(out.final_hidden) + jnp.asarray(self.cfg.out_scale, h.dtype) * self.out_norm(h)
        return self.base._head(final).astype(jnp.float32)


def adapter_filter() -> nnx.filterlib.Filter:
    """The trainable part of a :class:`KAdapter`: the blocks and the output LayerNorm."""
    return nnx.All(nnx.Param, nnx.Any(nnx.PathContains("blocks"), nnx.PathContains("out_norm")))


def make_kadapter_logits_fn(graphdef, rest):
    """Pure ``logits(train, frozen, batch, key=None)`` of a split :class:`KAdapter` (``key``: adapter dropout)."""

    def logits(train, frozen, batch: dict, key=None):
        model = nnx.merge(graphdef, train, frozen, rest)
        return model(batch["tokens"], positions_BS=batch.get("positions"),
                     attention_mask_BT=batch.get("attention_mask"), key=key)

    return logits
