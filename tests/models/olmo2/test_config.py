"""Olmo2Config: strict parsing of OLMo-2 config.json, the inverse, checks."""

import pytest

from cfka_jax.models import family
from cfka_jax.models.olmo2 import Olmo2Config

# config.json fields of released checkpoints (recalled from the Hub; sizes as published).
OLMO2_7B = {
    "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "eos_token_id": 100257,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
    "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "pad_token_id": 100277, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 500000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.47.0.dev0", "use_cache": True, "vocab_size": 100352,
}
OLMO2_32B = dict(OLMO2_7B, hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
                 num_key_value_heads=8)


@pytest.mark.parametrize("d", [OLMO2_7B, OLMO2_32B], ids=["olmo2-7b", "olmo2-32b"])
def test_released_configs_parse_and_round_trip(d):
    cfg = family.config_from_hf(d)
    assert isinstance(cfg, Olmo2Config) and family.of(cfg).name == "olmo2"
    assert (cfg.kv_heads, cfg.head_size, cfg.rope_theta) == (d["num_key_value_heads"], 128, 500000)
    out = cfg.to_hf_config()
    assert out["rope_parameters"] == {"rope_type": "default", "rope_theta": 500000.0} and "clip_qkv" not in out
    assert Olmo2Config.from_hf_config(out) == cfg


def test_traits_name_the_quirks():
    t = family.get("olmo2").traits(Olmo2Config.from_hf_config(OLMO2_32B))
    assert (t.norm, t.norm_eps, t.norm_position, t.qk_norm, t.qk_norm_scope, t.kv_heads) == (
        "rmsnorm", 1e-6, "post", True, "projection", 8)


def test_a_null_clip_is_accepted_and_a_value_refused():
    assert Olmo2Config.from_hf_config(dict(OLMO2_7B, clip_qkv=None)) == Olmo2Config.from_hf_config(OLMO2_7B)
    with pytest.raises(ValueError, match=r"clip_qkv=8.0 \(OLMo-2 has no q/k/v clamp"):
        Olmo2Config.from_hf_config(dict(OLMO2_7B, clip_qkv=8.0))


@pytest.mark.parametrize("change, names", [
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, ["rope_scaling (only default RoPE is supported)"]),
    ({"rope_theta": None, "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}},
     ["rope_parameters.rope_type='llama3'"]),
    ({"attention_dropout": 0.1, "surprise": 1}, ["attention_dropout=0.1", "surprise (unknown field)"]),
    ({"rms_norm_eps": "1e-6", "attention_bias": 0}, ["rms_norm_eps", "attention_bias"]),
    ({"model_type": "olmo"}, ["model_type='olmo'"]),
])
def test_unsupported_fields_are_named(change, names):
    d = {k: v for k, v in dict(OLMO2_7B, **change).items() if k not in change or v is not None}  # None: dropped
    with pytest.raises(ValueError) as err:
        Olmo2Config.from_hf_config(d)
    for name in names:
        assert name in str(err.value)


def test_post_init_checks():
    sizes = dict(vocab_size=7, hidden_size=16, intermediate_size=5, num_hidden_layers=1, num_attention_heads=4)
    with pytest.raises(ValueError, match="rms_norm_eps must be > 0"):
        Olmo2Config(**sizes, rms_norm_eps=0.0)
    with pytest.raises(ValueError, match="multiple of 3 KV heads"):
        Olmo2Config(**sizes, num_key_value_heads=3)
