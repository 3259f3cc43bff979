"""Tiny random-init Pythia and Qwen ports with prime sizes: the shared models of the geometry tests and checks.

Sizes are small primes (V = 41/37, F = 37/29) so that transposition bugs cannot hide; ``initializer_range`` 0.2
makes the logits O(1), so forces and energies are far from their trivial values. The proof checks re-run these
same configs in float64 (``proofs_check/geometry_models.py``); here they are float32, as the ports validate.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from cfka_jax.models import family
from cfka_jax.models.pythia import PythiaConfig
from cfka_jax.models.qwen import QwenConfig


def pythia_cfg() -> PythiaConfig:
    """Untied ``embed_out``, parallel residual, partial RoPE (0.4), V = 41."""
    return PythiaConfig(vocab_size=41, hidden_size=30, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=37, rotary_pct=0.4, initializer_range=0.2, max_position_embeddings=64)


def qwen_cfg(*, tied: bool = True, model_type: str = "qwen2") -> QwenConfig:
    """Qwen2 (or Qwen3) with a tied head by default, grouped-query attention (6 heads, 2 KV), V = 37."""
    return QwenConfig(model_type=model_type, vocab_size=37, hidden_size=24, intermediate_size=29,
                      num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2, head_dim=4,
                      tie_word_embeddings=tied, initializer_range=0.2, max_position_embeddings=64)


def build(cfg, seed: int = 0) -> nnx.Module:
    """A random-init port of ``cfg`` (PRNG seed ``seed``)."""
    return family.of(cfg).build(cfg, seed)


def random_tokens(key, vocab: int, rows: int, seq: int) -> jax.Array:
    """``[rows, seq]`` int32 token ids uniform below ``vocab``."""
    return jax.random.randint(key, (rows, seq), 0, vocab, dtype=jnp.int32)
