"""cfka_jax: continual factual-knowledge acquisition in JAX/Flax.

Layers: ``theory`` (the single-layer linear-attention model, exact dynamics), ``models`` (the Flax NNX ports and
their registry ``models/family.py``), and the rest as docs/architecture.md lists them. This module defines names
only; it never changes ``jax.config``. The names a user starts from (load and save a model, build a world, a PT and
a CPT run, a method, a claim check, the verdict table, a mesh) are :mod:`cfka_jax.api`'s, reachable as
``cfka_jax.<name>``.
"""

__version__ = "0.1.0"


API = (
    "BIOGRAPHY", "CPTSpec", "Claim", "GridSpec", "MeshConfig", "PTSpec", "WorldConfig", "build_data", "check",
    "continual_pretrain", "grid_axes", "holds", "load_model", "load_records", "load_tokenizer", "make_mesh",
    "make_world", "method", "parse_mesh", "pretrain", "reference_optimum", "refuted", "run_grid", "save_model",
    "verdicts", "write_record",
)
"""The names of :mod:`cfka_jax.api` (its ``__all__``; a test keeps the two equal)."""


def __getattr__(name: str):
    """The public names of :mod:`cfka_jax.api`, loaded on first use (``cfka_jax.pretrain``, ``cfka_jax.load_model``
    ...), so ``import cfka_jax`` itself loads no layer and no JAX. Any other name (a submodule being imported) is
    left to the import system."""
    if name not in API:
        raise AttributeError(f"module 'cfka_jax' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module("cfka_jax.api"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
