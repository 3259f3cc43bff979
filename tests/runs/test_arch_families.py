"""Every registered model family is a Biography ``--arch``: the spec accepts it and build_model gives its model."""

import flax.nnx as nnx
import pytest

from cfka_jax.models import family
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import ARCHS, PTSpec


def test_every_family_is_an_arch_and_builds_at_the_preset_size():
    assert set(ARCHS) == set(family.names()) >= {"llama", "pythia", "qwen"}
    size = BIOGRAPHY["smoke"].model
    model = nnx.eval_shape(lambda: build_model(BIOGRAPHY["smoke"], "llama", 97, seed=0))  # structure only
    assert family.of(model).name == "llama" and model.cfg.kv_heads == size.kv_heads
    assert (model.cfg.hidden_size, model.cfg.num_hidden_layers, model.cfg.vocab_size) == (size.hidden, size.layers, 97)
    assert PTSpec(preset="smoke", arch="llama").arch == "llama"
    with pytest.raises(ValueError, match="arch must be one of"):
        PTSpec(preset="smoke", arch="gpt2")
