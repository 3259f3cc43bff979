"""cfka_jax: continual factual-knowledge acquisition in JAX/Flax.

Layers: ``theory`` (the single-layer linear-attention model, exact dynamics), ``models`` (Flax NNX ports of
Pythia and Qwen). This module only imports; it never changes ``jax.config``.
"""

__version__ = "0.1.0"
