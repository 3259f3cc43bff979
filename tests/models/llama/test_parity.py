"""Llama port against tiny random-init HF torch models: parity, KV-cached greedy decoding, round trip, strictness.

The cases cover the released shapes: Llama-3.2 1B/3B (grouped-query, ``llama3`` RoPE scaling, tied embeddings;
here with an explicit ``head_dim`` and the optional biases too), Llama-2 (multi-head, default RoPE, untied) and
Llama-3.1 (grouped-query, ``llama3`` scaling, untied; the scanned form). TinyLlama is Llama-2 with GQA. The last two
run with the slow tests (default-suite budget); ``test_properties.py`` covers an untied default-RoPE GQA model
(TinyLlama's shape) in the default suite without a reference.
"""

import pytest

pytest.importorskip("torch")

from tests.models.parity import Case, ParitySuite  # noqa: E402

pytestmark = pytest.mark.torch

# rope_theta 100 with H = 10 and original_max_position_embeddings 32 puts the RoPE wavelengths (6 .. 250)
# in all three llama3 bands (kept below 32/4 = 8, interpolated between 8 and 32, divided by `factor` above 32).
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 100.0, "factor": 4.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
CASES = {
    # The default-suite case holds every optional feature at once: GQA (6 query heads over 2), llama3 scaling,
    # explicit head_dim with N * H = 60 != D = 42, tied embeddings (Llama-3.2), q/k/v/o and MLP biases.
    "llama32_tied_bias": dict(
        vocab_size=89, hidden_size=42, head_dim=10, num_attention_heads=6, num_key_value_heads=2,
        intermediate_size=61, num_hidden_layers=2, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
        rope_parameters=LLAMA3_ROPE,
    ),
    # Slow: Llama-2 (multi-head, default RoPE, untied) and Llama-3.1 without biases (GQA, llama3, untied).
    "llama2_mha": dict(
        vocab_size=101, hidden_size=60, num_attention_heads=6, num_key_value_heads=6, intermediate_size=71,
        num_hidden_layers=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
    ),
    "llama31_gqa": dict(
        vocab_size=53, hidden_size=40, num_attention_heads=4, num_key_value_heads=2, intermediate_size=43,
        num_hidden_layers=3, tie_word_embeddings=False, rope_parameters=LLAMA3_ROPE,
    ),
}
SLOW = {"llama2_mha", "llama31_gqa"}


@pytest.fixture(scope="module",
                params=[pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in sorted(CASES)])
def case(request, tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp(request.param)
    return Case(request.param, LlamaConfig, LlamaForCausalLM, dict(CASES[request.param], max_position_embeddings=64),
                path, 13)


class TestLlamaParity(ParitySuite):
    SCAN_CASES = frozenset({"llama31_gqa"})
    CHUNK_CASES = frozenset({"llama2_mha"})

    def test_config_reads_the_case(self, case):
        cfg = case.model.cfg
        assert cfg.kv_heads == case.hf_config.num_key_value_heads
        assert (cfg.rope_scaling is not None) == (case.hf_config.rope_parameters["rope_type"] == "llama3")
        assert hasattr(case.model, "lm_head") != cfg.tie_word_embeddings
        bias = case.hf.model.layers[0].mlp.up_proj.bias is not None
        assert (case.model.layers[0].mlp.up_proj.bias is not None) == bias
