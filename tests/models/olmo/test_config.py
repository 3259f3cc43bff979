"""OlmoConfig: strict parsing of OLMo config.json, the inverse, checks."""

import pytest

from cfka_jax.models import family
from cfka_jax.models.olmo import OlmoConfig

# config.json fields of released checkpoints (recalled from the Hub; sizes as published).
OLMO_1B = {
    "architectures": ["OlmoForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "clip_qkv": None,
    "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 2048, "model_type": "olmo", "num_attention_heads": 16,
    "num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 1, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32",
    "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 50304,
}
OLMO_7B_0424 = dict(OLMO_1B, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=32, max_position_embeddings=4096, clip_qkv=8.0, tie_word_embeddings=False)


@pytest.mark.parametrize("d", [OLMO_1B, OLMO_7B_0424], ids=["olmo-1b", "olmo-7b-0424"])
def test_released_configs_parse_and_round_trip(d):
    cfg = family.config_from_hf(d)
    assert isinstance(cfg, OlmoConfig) and family.of(cfg).name == "olmo"
    assert (cfg.kv_heads, cfg.head_size) == (d["num_key_value_heads"], d["hidden_size"] // d["num_attention_heads"])
    assert cfg.clip_qkv == d["clip_qkv"] and cfg.tie_word_embeddings == d["tie_word_embeddings"]
    out = cfg.to_hf_config()
    assert out["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0} and "rope_theta" not in out
    assert OlmoConfig.from_hf_config(out) == cfg


def test_traits_name_the_quirks():
    t = family.get("olmo").traits(OlmoConfig.from_hf_config(OLMO_7B_0424))
    assert (t.norm, t.norm_eps, t.norm_position, t.clip_qkv, t.qk_norm) == (
        "nonparametric_layernorm", 1e-5, "pre", 8.0, False)


def test_optional_fields_default_as_hf():
    d = {k: v for k, v in OLMO_1B.items() if k not in ("num_key_value_heads", "clip_qkv")}
    cfg = OlmoConfig.from_hf_config(dict(d, head_dim=64))
    assert (cfg.kv_heads, cfg.head_size, cfg.clip_qkv) == (16, 64, None)
    out = cfg.to_hf_config()
    assert "num_key_value_heads" not in out and out["head_dim"] == 64 and out["clip_qkv"] is None


@pytest.mark.parametrize("change, names", [
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, ["rope_scaling (only default RoPE is supported)"]),
    ({"rope_theta": None, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}},
     ["rope_parameters.rope_type='yarn'", "rope_parameters.factor"]),
    ({"attention_dropout": 0.1, "rms_norm_eps": 1e-5, "surprise": 1},
     ["attention_dropout=0.1", "rms_norm_eps (unknown field)", "surprise (unknown field)"]),
    ({"clip_qkv": "8", "num_hidden_layers": 16.0}, ["clip_qkv", "num_hidden_layers"]),
    ({"model_type": "olmo2"}, ["model_type='olmo2'"]),
])
def test_unsupported_fields_are_named(change, names):
    d = {k: v for k, v in dict(OLMO_1B, **change).items() if k not in change or v is not None}  # None: dropped
    with pytest.raises(ValueError) as err:
        OlmoConfig.from_hf_config(d)
    for name in names:
        assert name in str(err.value)


def test_post_init_checks():
    sizes = dict(vocab_size=7, hidden_size=16, intermediate_size=5, num_hidden_layers=1, num_attention_heads=4)
    with pytest.raises(ValueError, match="clip_qkv must be None or > 0"):
        OlmoConfig(**sizes, clip_qkv=0.0)
    with pytest.raises(ValueError, match="multiple of 3 KV heads"):
        OlmoConfig(**sizes, num_key_value_heads=3)
    with pytest.raises(ValueError, match="head dim 3 must be even"):
        OlmoConfig(**sizes, head_dim=3)
    with pytest.raises(ValueError, match="hidden_act must be 'silu'"):
        OlmoConfig(**sizes, hidden_act="gelu")
