"""Pythia (GPT-NeoX) port against tiny random-init HF torch models: parity, cache, round trip, strictness."""

import pytest

pytest.importorskip("torch")

from tests.models.parity import Case, ParitySuite  # noqa: E402

pytestmark = pytest.mark.torch

# Prime sizes where the architecture allows. H = 14 with rotary_pct 0.33 gives R = int(4.62) = 4 (HF truncation);
# H = 12 with 0.5 gives R = 6.
CASES = {
    "parallel_untied": dict(
        vocab_size=97, hidden_size=42, num_attention_heads=3, intermediate_size=67, num_hidden_layers=3,
        rotary_pct=0.33, rotary_emb_base=100.0, use_parallel_residual=True, tie_word_embeddings=False,
    ),
    "sequential_tied": dict(
        vocab_size=89, hidden_size=60, num_attention_heads=5, intermediate_size=53, num_hidden_layers=2,
        rotary_pct=0.5, rotary_emb_base=10000.0, use_parallel_residual=False, tie_word_embeddings=True,
        attention_bias=False,
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    path = tmp_path_factory.mktemp(request.param)
    kwargs = dict(CASES[request.param], max_position_embeddings=64)
    return Case(request.param, GPTNeoXConfig, GPTNeoXForCausalLM, kwargs, path, 7)


class TestPythiaParity(ParitySuite):
    SCAN_CASES = frozenset({"parallel_untied"})
    CHUNK_CASES = frozenset({"sequential_tied"})

    def test_rotary_dims_follow_hf(self, case):
        hf_attn = case.hf.gpt_neox.layers[0].attention
        assert case.model.cfg.rotary_dim == hf_attn.rotary_ndims
