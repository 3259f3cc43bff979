"""PythiaConfig: strict parsing of config.json (legacy and transformers-5 spellings), inverse, checks."""

import dataclasses

import jax.numpy as jnp
import pytest

from cfka_jax.models import PythiaConfig

# Pythia-160M config.json fields as published on the Hub (spec §10.1; recalled, sizes cross-checked there).
PYTHIA_160M = {
    "architectures": ["GPTNeoXForCausalLM"],
    "bos_token_id": 0,
    "eos_token_id": 0,
    "hidden_act": "gelu",
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048,
    "model_type": "gpt_neox",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "rotary_emb_base": 10000,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.24.0",
    "use_cache": True,
    "use_parallel_residual": True,
    "vocab_size": 50304,
}


def test_legacy_config_sizes():
    cfg = PythiaConfig.from_hf_config(PYTHIA_160M)
    assert (cfg.head_dim, cfg.rotary_dim, cfg.num_key_value_heads) == (64, 16, 12)
    assert cfg.rotary_emb_base == 10000 and not cfg.tie_word_embeddings and cfg.dtype == jnp.float32


def test_transformers5_spelling_is_equivalent_and_inverse():
    cfg = PythiaConfig.from_hf_config(PYTHIA_160M)
    d = cfg.to_hf_config()
    assert "rotary_pct" not in d and d["rope_parameters"]["partial_rotary_factor"] == 0.25
    assert PythiaConfig.from_hf_config(d) == cfg


def test_overrides_set_non_hf_fields():
    cfg = PythiaConfig.from_hf_config(PYTHIA_160M, dtype=jnp.bfloat16, scan_layers=True, remat=True)
    assert (cfg.dtype, cfg.scan_layers, cfg.remat) == (jnp.bfloat16, True, True)
    assert "scan_layers" not in cfg.to_hf_config() and cfg.to_hf_config()["dtype"] == "bfloat16"


def test_every_unsupported_field_is_named():
    bad = dict(PYTHIA_160M, mystery_field=1, hidden_dropout=0.1, rope_scaling={"type": "linear", "factor": 2.0})
    with pytest.raises(ValueError) as err:
        PythiaConfig.from_hf_config(bad)
    for name in ("mystery_field", "hidden_dropout", "rope_scaling"):
        assert name in str(err.value)


def test_non_default_rope_type_rejected():
    d = PythiaConfig.from_hf_config(PYTHIA_160M).to_hf_config()
    d["rope_parameters"] = dict(d["rope_parameters"], rope_type="linear", factor=2.0)
    with pytest.raises(ValueError, match=r"rope_type='linear'.*rope_parameters.factor"):
        PythiaConfig.from_hf_config(d)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(hidden_size=770), "not divisible"),
        (dict(rotary_pct=0.3), "must be even"),  # int(64 * 0.3) = 19
        (dict(hidden_act="swish"), "hidden_act"),
        (dict(num_hidden_layers=0), "num_hidden_layers"),
        (dict(dtype=jnp.float16), "dtype"),
    ],
)
def test_post_init_rejects_inconsistent_sizes(change, message):
    cfg = PythiaConfig.from_hf_config(PYTHIA_160M)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(cfg, **change)


def test_frozen():
    cfg = PythiaConfig.from_hf_config(PYTHIA_160M)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.hidden_size = 1  # type: ignore[misc]


def test_transformers_reads_our_config():
    transformers = pytest.importorskip("transformers")
    ours = PythiaConfig.from_hf_config(PYTHIA_160M)
    hf = transformers.GPTNeoXConfig.from_dict(ours.to_hf_config())
    assert hf.rope_parameters["partial_rotary_factor"] == 0.25 and hf.hidden_size == 768
    assert PythiaConfig.from_hf_config(hf.to_diff_dict()) == ours
