"""Qwen35Config: strict parsing of ``qwen3_5_text`` and ``qwen3_5`` config.json, the inverse, checks, from_size."""

import pytest

from cfka_jax.models import family
from cfka_jax.models.family import ModelSize
from cfka_jax.models.qwen3_5 import Qwen35Config

# A qwen3_5_text config with the fields of a transformers-5 Qwen3.5 save (Qwen3_5TextConfig's own names; sizes of
# the 9B-style defaults documented in configuration_qwen3_5.py, shrunk in depth).
TEXT = {
    "architectures": ["Qwen3_5ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "dtype": "bfloat16",
    "eos_token_id": 248044, "head_dim": 256, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 12288, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144,
    "model_type": "qwen3_5_text", "num_attention_heads": 16, "num_hidden_layers": 4, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10],
                                               "rope_type": "default", "rope_theta": 10000000,
                                               "partial_rotary_factor": 0.25},
    "tie_word_embeddings": False, "transformers_version": "5.25.0", "use_cache": True, "vocab_size": 248320,
    "attn_output_gate": True, "full_attention_interval": 4, "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False,
}
WRAPPED = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "image_token_id": 248056,
           "video_token_id": 248057, "vision_start_token_id": 248053, "vision_end_token_id": 248054,
           "tie_word_embeddings": False, "vision_config": {"depth": 27, "model_type": "qwen3_5_vision"},
           "text_config": TEXT}


def test_text_config_parses_and_round_trips():
    cfg = family.config_from_hf(TEXT)
    assert isinstance(cfg, Qwen35Config) and family.of(cfg).name == "qwen3_5"
    assert (cfg.rotary_dim, cfg.full_layers, cfg.linear_layers) == (64, (3,), (0, 1, 2))
    assert (cfg.conv_channels, cfg.mrope_section, cfg.rope_theta) == (2 * 16 * 128 + 32 * 128, (11, 11, 10), 1e7)
    out = cfg.to_hf_config()
    assert out["model_type"] == "qwen3_5_text" and out["rope_parameters"]["mrope_section"] == [11, 11, 10]
    assert Qwen35Config.from_hf_config(out) == cfg


def test_qwen3_5_wrapper_reads_its_text_config():
    cfg = family.config_from_hf(WRAPPED)
    assert cfg == family.config_from_hf(TEXT)
    assert cfg.to_hf_config()["model_type"] == "qwen3_5_text"


def test_absent_layer_types_follow_hf_interval():
    d = {k: v for k, v in TEXT.items() if k != "layer_types"}
    assert family.config_from_hf(dict(d, num_hidden_layers=8)).full_layers == (3, 7)
    assert family.config_from_hf(dict(d, num_hidden_layers=6, full_attention_interval=2)).full_layers == (1, 3, 5)


@pytest.mark.parametrize("change, named", [
    ({"sliding_window": 4}, "sliding_window (unknown field)"),
    ({"attention_dropout": 0.1}, "attention_dropout=0.1"),
    ({"attn_output_gate": False}, "attn_output_gate=False"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_parameters.rope_type='yarn'"),
    ({"rope_parameters": {"rope_theta": 1e4, "mrope_section": "11"}}, "rope_parameters.mrope_section must be"),
    ({"layer_types": ["linear_attention"] * 3 + ["sliding_attention"]}, "unsupported kinds ['sliding_attention']"),
    ({"layer_types": ["full_attention"]}, "layer_types has 1 entries for 4 layers"),
    ({"linear_num_value_heads": 24, "linear_num_key_heads": 16}, "not a multiple of linear_num_key_heads"),
    ({"head_dim": 12}, "rotary width int(12 * factor) = 3, which must be even"),
    ({"chunk_size": 8}, "chunk_size (not a config.json field"),
    ({"num_hidden_layers": "4"}, "num_hidden_layers must be an integer"),
])
def test_bad_fields_are_named(change, named):
    with pytest.raises(ValueError) as err:
        family.config_from_hf(dict(TEXT, **change))
    assert named in str(err.value)


@pytest.mark.parametrize("change, named", [
    ({"text_config": None}, "text_config"),
    ({"audio_config": {}}, "audio_config (unknown outer qwen3_5 field)"),
    ({"image_token_id": "x"}, "image_token_id must be an integer"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings: outer True != text_config False"),
])
def test_bad_wrapper_fields_are_named(change, named):
    with pytest.raises(ValueError) as err:
        family.config_from_hf(dict(WRAPPED, **change))
    assert named in str(err.value)


def test_scan_layers_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="two kinds"):
        family.config_from_hf(TEXT, scan_layers=True)


@pytest.mark.parametrize("layers, kinds", [(2, ("linear_attention", "full_attention")),
                                           (3, ("linear_attention", "linear_attention", "full_attention")),
                                           (5, ("linear_attention",) * 3 + ("full_attention", "linear_attention"))])
def test_from_size_has_both_kinds(layers, kinds):
    fam = family.get("qwen3_5")
    cfg = fam.from_size(ModelSize(32, layers, 4, 2, 64), vocab_size=53)
    assert cfg.layer_types == kinds and cfg.tie_word_embeddings
    assert (cfg.head_dim, cfg.linear_num_value_heads, cfg.linear_num_key_heads) == (8, 4, 2)
    fam.build(cfg, seed=0)  # builds


def test_every_matrix_has_logical_axes_and_the_readout_is_found():
    """``parallel/rules``: every kernel of both layer kinds (and the conv kernel) gets logical axes from the
    family's rows; ``geometry/readout`` finds the tied readout through the registry."""
    import flax.nnx as nnx
    import jax

    from cfka_jax.geometry.readout import readout_matrix
    from cfka_jax.parallel import rules

    fam = family.get("qwen3_5")
    cfg = fam.from_size(ModelSize(32, 2, 4, 2, 64), vocab_size=53)
    state = nnx.state(fam.build(cfg, seed=0), nnx.Param)
    flat = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(state))[0]
    unsharded = [jax.tree_util.keystr(p) for p, x in flat
                 if x.ndim == 2 and all(a is None for a in rules.logical_axes(jax.tree_util.keystr(p), x.ndim))]
    assert unsharded == []
    conv = next(p for p, _ in flat if "conv1d" in jax.tree_util.keystr(p))
    assert rules.logical_axes(jax.tree_util.keystr(conv), 2) == (None, "heads")
    assert readout_matrix(nnx.to_pure_dict(state), cfg).shape == (53, 32)
