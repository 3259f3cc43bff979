"""OLMo-2 port (HF ``model_type`` ``"olmo2"``): config, NNX model, strict HF conversion and its registry entry
(``models/family.py``)."""

from cfka_jax.models import gqa
from cfka_jax.models.family import ModelSize, Traits, register
from cfka_jax.models.olmo2.config import Olmo2Config
from cfka_jax.models.olmo2.convert import export, load
from cfka_jax.models.olmo2.model import Olmo2Model

__all__ = ["FAMILY", "Olmo2Config", "Olmo2Model", "export", "load"]


def from_size(size: ModelSize, *, vocab_size: int, **fields) -> Olmo2Config:
    """A from-scratch OLMo-2 config of ``size`` (grouped-query attention with ``size.kv_heads``; untied head
    unless ``tie_word_embeddings=True`` is passed)."""
    return Olmo2Config(vocab_size=vocab_size, **size.hf_sizes(), **fields)


def traits(cfg: Olmo2Config) -> Traits:
    """RMSNorm after the sublayers (post-norm inside the residual branch), q/k norms over the whole projection."""
    return gqa.traits("olmo2", cfg, norm_position="post", qk_norm=True, qk_norm_scope="projection")


FAMILY = register(gqa.family("olmo2", ("olmo2",), Olmo2Config, Olmo2Model, load=load, export=export,
                             from_size=from_size, traits_of=traits))
