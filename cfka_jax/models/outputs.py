"""Pytree containers returned by the model ports: the KV cache and the model output."""

from __future__ import annotations

import flax.struct
import jax.numpy as jnp

from cfka_jax.shapes import Array, Bool, Float, Int


@flax.struct.dataclass
class KVCache:
    """Static-size KV cache for all layers (a frozen pytree).

    Attributes:
        k: keys after RoPE, per layer ``[B, K, T, H]``: a tuple of L such arrays (looped models: a decode step
            writes one layer's buffer in place and reads it without a copy) or one stacked ``[L, B, K, T, H]``
            array (scanned models); ``k[i]`` is layer i's cache either way. KV heads come before slots because
            the attention contractions batch over (b, k): a decode step reads the cache without transposing it.
        v: values, laid out as ``k``.
        valid: ``[B, T]`` bool, key slot written and not padding.
        end_index: ``[B]`` int32, number of slots written so far (the next write slot) per batch row.
    """

    k: tuple[Float[Array, "B K T H"], ...] | Float[Array, "L B K T H"]
    v: tuple[Float[Array, "B K T H"], ...] | Float[Array, "L B K T H"]
    valid: Bool[Array, "B T"]
    end_index: Int[Array, " B"]

    @classmethod
    def zeros(cls, num_layers: int, batch_size: int, max_len: int, num_kv_heads: int, head_dim: int,
              dtype=jnp.float32, *, stacked: bool = True):
        """An empty cache of ``max_len`` slots per row (``stacked=False``: a tuple of per-layer buffers)."""
        shape = (batch_size, num_kv_heads, max_len, head_dim)
        if stacked:
            k, v = jnp.zeros((num_layers, *shape), dtype), jnp.zeros((num_layers, *shape), dtype)
        else:
            k, v = (tuple(jnp.zeros(shape, dtype) for _ in range(num_layers)) for _ in range(2))
        return cls(k=k, v=v, valid=jnp.zeros((batch_size, max_len), bool),
                   end_index=jnp.zeros((batch_size,), jnp.int32))


@flax.struct.dataclass
class ModelOutput:
    """What a model call returns (a frozen pytree; fields not requested are None).

    Attributes:
        logits: ``[B, S, V]`` float32 next-token logits.
        final_hidden: ``[B, S, D]`` residual stream after the final norm (the LM head input).
        hidden_states: with ``return_hidden``, L + 1 arrays ``[B, S, D]`` exactly as HF returns them: the
            embeddings, the outputs of layers 0 .. L-2, and the final-normed output of layer L-1 (HF replaces
            the last entry by the post-norm state, so it equals ``final_hidden``).
        attentions: with ``return_attn``, L arrays ``[B, N, S, T]`` of post-softmax probabilities (or, with
            ``attn_reduce``, L per-layer reductions of them).
        cache: the updated cache when one was passed in.
    """

    logits: Float[Array, "B S V"]
    final_hidden: Float[Array, "B S D"]
    hidden_states: tuple[Float[Array, "B S D"], ...] | None = None
    attentions: tuple[Float[Array, "B N S T"], ...] | None = None
    cache: KVCache | None = None
