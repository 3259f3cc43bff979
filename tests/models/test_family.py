"""The model-family registry: lookups by name, HF model_type and config; from_size; traits; strict errors."""

import dataclasses

import flax.nnx as nnx
import pytest

from cfka_jax.models import LlamaModel, ModelSize, Olmo2Model, OlmoModel, PythiaModel, QwenModel, family
from cfka_jax.parallel import rules

SIZE = ModelSize(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=29)  # Pythia: R = int(8 * 0.25) = 2


def test_every_model_type_and_name_resolves():
    assert set(family.names()) == {"llama", "olmo", "olmo2", "pythia", "qwen", "qwen3_5"}
    assert {t: family.for_model_type(t).name for t in family.model_types()} == {
        "gpt_neox": "pythia", "qwen2": "qwen", "qwen3": "qwen", "llama": "llama", "olmo": "olmo", "olmo2": "olmo2",
        "qwen3_5_text": "qwen3_5", "qwen3_5": "qwen3_5"}
    with pytest.raises(ValueError, match="unsupported model_type 'mamba'; expected one of"):
        family.for_model_type("mamba")
    with pytest.raises(ValueError, match="unknown model family 'gpt2'"):
        family.get("gpt2")
    with pytest.raises(ValueError, match="no registered model family has config class dict"):
        family.of({})
    with pytest.raises(ValueError, match="must be a JSON object"):
        family.config_from_hf([])


@pytest.mark.parametrize("name, cls, tied", [("pythia", PythiaModel, False), ("qwen", QwenModel, True),
                                             ("llama", LlamaModel, False), ("olmo", OlmoModel, False),
                                             ("olmo2", Olmo2Model, False)])
def test_from_size_builds_each_family(name, cls, tied):
    fam = family.get(name)
    cfg = fam.from_size(SIZE, vocab_size=31, max_position_embeddings=64)
    model = nnx.eval_shape(lambda: fam.build(cfg, seed=0))  # abstract: the structure, no init compute
    assert isinstance(model, cls) and family.of(model) is fam and family.of(cfg) is fam
    t = fam.traits(cfg)
    assert (t.family, t.tied, cfg.vocab_size, cfg.num_hidden_layers) == (name, tied, 31, 2)
    assert t.kv_heads == (4 if name == "pythia" else 2)  # GPT-NeoX has no GQA
    assert hasattr(model, fam.embed) and hasattr(model, fam.final_norm) and hasattr(model, fam.head) != tied
    block = model.layers[0]
    assert hasattr(block, t.attn)
    assert all(any(name in str(p) for p in _paths(block)) for name in fam.lora_targets)


def _paths(module):
    return [path for path, _ in nnx.iter_graph(module)]


def test_registration_refuses_a_clash_and_axes_are_registered():
    qwen = family.get("qwen")
    with pytest.raises(ValueError, match="model_type 'qwen2'"):
        family.register(dataclasses.replace(qwen, name="qwen-copy", config_cls=dict))
    rows = rules.param_axes()
    for fam in family.families():
        assert set(fam.param_axes) <= set(rows)
    with pytest.raises(ValueError, match="kv_heads must be an integer >= 1"):
        ModelSize(8, 1, 2, 0, 8)
