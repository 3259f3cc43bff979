"""QwenConfig: strict parsing of Qwen2/Qwen3 config.json, inverse, model_type-driven quirks, checks."""

import dataclasses

import pytest

from cfka_jax.models import QwenConfig

# Qwen2.5-0.5B and Qwen3-0.6B config.json fields (spec §10.2/§10.3; recalled from the Hub, sizes checked there).
QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
QWEN3_06B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def test_qwen2_quirks():
    cfg = QwenConfig.from_hf_config(QWEN25_05B)
    assert (cfg.head_size, cfg.qkv_bias, cfg.o_bias, cfg.qk_norm) == (64, True, False, False)
    assert cfg.rope_theta == 1e6 and cfg.tie_word_embeddings


def test_qwen3_quirks():
    cfg = QwenConfig.from_hf_config(QWEN3_06B)
    assert (cfg.head_size, cfg.qkv_bias, cfg.o_bias, cfg.qk_norm) == (128, False, False, True)
    assert cfg.num_attention_heads * cfg.head_size != cfg.hidden_size
    assert dataclasses.replace(cfg, attention_bias=True).o_bias


@pytest.mark.parametrize("d", [QWEN25_05B, QWEN3_06B], ids=["qwen2", "qwen3"])
def test_to_hf_config_is_inverse(d):
    cfg = QwenConfig.from_hf_config(d)
    out = cfg.to_hf_config()
    assert out["rope_parameters"] == {"rope_type": "default", "rope_theta": 1e6} and "rope_theta" not in out
    assert QwenConfig.from_hf_config(out) == cfg


def test_every_unsupported_field_is_named():
    bad = dict(QWEN25_05B, mystery_field=1, use_mrope=True, attention_dropout=0.1)
    bad["rope_scaling"] = {"type": "yarn", "factor": 4.0}
    with pytest.raises(ValueError) as err:
        QwenConfig.from_hf_config(bad)
    for name in ("mystery_field", "use_mrope", "attention_dropout", "rope_scaling"):
        assert name in str(err.value)


def test_sliding_layers_rejected():
    d = dict(QWEN3_06B, layer_types=["full_attention"] * 27 + ["sliding_attention"])
    with pytest.raises(ValueError, match="layer_types"):
        QwenConfig.from_hf_config(d)
    with pytest.raises(ValueError, match="sliding"):
        QwenConfig.from_hf_config(dict(QWEN3_06B, use_sliding_window=True))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(num_key_value_heads=3), "multiple"),
        (dict(model_type="llama"), "model_type"),
        (dict(attention_bias=True), "qwen3 field"),
        (dict(hidden_size=900), "not divisible"),
        (dict(head_dim=65), "even"),
        (dict(hidden_act="gelu"), "silu"),
    ],
)
def test_post_init_rejects_inconsistent_sizes(change, message):
    cfg = QwenConfig.from_hf_config(QWEN25_05B)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(cfg, **change)


@pytest.mark.parametrize("d", [QWEN25_05B, QWEN3_06B], ids=["qwen2", "qwen3"])
def test_transformers_reads_our_config(d):
    transformers = pytest.importorskip("transformers")
    ours = QwenConfig.from_hf_config(d)
    hf = transformers.AutoConfig.for_model(**ours.to_hf_config())
    assert hf.model_type == d["model_type"] and hf.rope_parameters["rope_theta"] == 1e6
    assert QwenConfig.from_hf_config(hf.to_diff_dict()) == ours
