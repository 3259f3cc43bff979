"""cfka_jax: continual factual-knowledge acquisition in JAX/Flax.

Layers: ``theory`` (the single-layer linear-attention model, exact dynamics), ``models`` (Flax NNX ports of
Pythia, Qwen and Llama, and their registry ``models/family.py``). This module only imports; it never changes
``jax.config``.
"""

__version__ = "0.1.0"
