"""LlamaConfig: strict parsing of Llama-2 / Llama-3 / 3.1 / 3.2 / TinyLlama config.json, the inverse, checks."""

import pytest

from cfka_jax.models import family
from cfka_jax.models.llama import Llama3Scaling, LlamaConfig

# config.json fields of released checkpoints (recalled from the Hub; sizes as published).
LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000,
}
TINYLLAMA = dict(LLAMA2_7B, hidden_size=2048, intermediate_size=5632, max_position_embeddings=2048,
                 num_hidden_layers=22, num_key_value_heads=4, torch_dtype="bfloat16")
LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
}
LLAMA31_8B = dict(LLAMA32_1B, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, head_dim=128,
                  eos_token_id=[128001, 128008, 128009], tie_word_embeddings=False,
                  rope_scaling=dict(LLAMA32_1B["rope_scaling"], factor=8.0))


@pytest.mark.parametrize("d", [LLAMA2_7B, TINYLLAMA, LLAMA32_1B, LLAMA31_8B],
                         ids=["llama2-7b", "tinyllama", "llama3.2-1b", "llama3.1-8b"])
def test_released_configs_parse_and_round_trip(d):
    cfg = family.config_from_hf(d)
    assert isinstance(cfg, LlamaConfig) and family.of(cfg).name == "llama"
    assert cfg.kv_heads == d["num_key_value_heads"]
    assert cfg.head_size == d.get("head_dim", d["hidden_size"] // d["num_attention_heads"])
    assert (cfg.rope_scaling is not None) == (d["rope_scaling"] is not None)
    assert LlamaConfig.from_hf_config(cfg.to_hf_config()) == cfg


def test_llama3_scaling_in_both_spellings():
    legacy = LlamaConfig.from_hf_config(LLAMA32_1B)
    assert legacy.rope_scaling == Llama3Scaling(32.0, 1.0, 4.0, 8192) and legacy.rope_theta == 500000.0
    d = {k: v for k, v in LLAMA32_1B.items() if k not in ("rope_scaling", "rope_theta")}
    d["rope_parameters"] = dict(LLAMA32_1B["rope_scaling"], rope_theta=500000.0)
    assert LlamaConfig.from_hf_config(d) == legacy
    old_key = dict(LLAMA32_1B, rope_scaling={**LLAMA32_1B["rope_scaling"], "type": "llama3"})
    del old_key["rope_scaling"]["rope_type"]
    assert LlamaConfig.from_hf_config(old_key) == legacy


def test_missing_kv_heads_means_multi_head():
    d = {k: v for k, v in LLAMA2_7B.items() if k != "num_key_value_heads"}
    cfg = LlamaConfig.from_hf_config(d)
    assert cfg.kv_heads == 32 and "num_key_value_heads" not in cfg.to_hf_config()


@pytest.mark.parametrize("change, names", [
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, ["rope_type='linear'"]),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, ["lacks high_freq_factor"]),
    ({"pretraining_tp": 2, "attention_dropout": 0.1, "surprise": 1}, ["pretraining_tp=2", "attention_dropout=0.1",
                                                                       "surprise (unknown field)"]),
    ({"num_hidden_layers": "32", "mlp_bias": "false"}, ["num_hidden_layers", "mlp_bias"]),
    ({"model_type": "mistral"}, ["model_type='mistral'"]),
])
def test_unsupported_fields_are_named(change, names):
    with pytest.raises(ValueError) as err:
        LlamaConfig.from_hf_config(dict(LLAMA2_7B, **change))
    for name in names:
        assert name in str(err.value)


def test_post_init_checks():
    with pytest.raises(ValueError, match="multiple of 3 KV heads"):
        LlamaConfig(vocab_size=7, hidden_size=8, intermediate_size=5, num_hidden_layers=1, num_attention_heads=4,
                    num_key_value_heads=3)
    with pytest.raises(ValueError, match="low_freq_factor < high_freq_factor"):
        Llama3Scaling(8.0, 4.0, 1.0, 8192)
