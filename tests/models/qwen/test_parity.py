"""Qwen2 / Qwen3 ports against tiny random-init HF torch models: parity, cache, round trip, strictness."""

import pytest

pytest.importorskip("torch")

from tests.models.parity import Case, ParitySuite  # noqa: E402

pytestmark = pytest.mark.torch

# GQA with 6 query heads over 2 KV heads (3 queries per KV head). Qwen2 needs D = N * H with H even, so D = 60;
# Qwen3's explicit head_dim lets D be prime (37) with N * H = 84 != D.
CASES = {
    "qwen2_tied": (
        "qwen2",
        dict(
            vocab_size=101, hidden_size=60, num_attention_heads=6, num_key_value_heads=2, intermediate_size=71,
            num_hidden_layers=3, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        ),
    ),
    "qwen3_untied": (
        "qwen3",
        dict(
            vocab_size=89, hidden_size=37, head_dim=14, num_attention_heads=6, num_key_value_heads=2,
            intermediate_size=61, num_hidden_layers=2, tie_word_embeddings=False,
        ),
    ),
    "qwen3_bias": (
        "qwen3",
        dict(
            vocab_size=53, hidden_size=31, head_dim=8, num_attention_heads=4, num_key_value_heads=4,
            intermediate_size=43, num_hidden_layers=2, tie_word_embeddings=True, attention_bias=True,
        ),
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    import transformers

    model_type, kwargs = CASES[request.param]
    prefix = {"qwen2": "Qwen2", "qwen3": "Qwen3"}[model_type]
    config_cls = getattr(transformers, prefix + "Config")
    model_cls = getattr(transformers, prefix + "ForCausalLM")
    path = tmp_path_factory.mktemp(request.param)
    return Case(request.param, config_cls, model_cls, dict(kwargs, max_position_embeddings=64), path, 11)


class TestQwenParity(ParitySuite):
    SCAN_CASES = frozenset({"qwen3_untied"})
    CHUNK_CASES = frozenset({"qwen2_tied"})

    def test_projection_biases_follow_model_type(self, case):
        attn = case.model.layers[0].self_attn
        hf_attn = case.hf.model.layers[0].self_attn
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            assert (getattr(attn, name).bias is not None) == (getattr(hf_attn, name).bias is not None), name
        assert hasattr(attn, "q_norm") == hasattr(hf_attn, "q_norm")
