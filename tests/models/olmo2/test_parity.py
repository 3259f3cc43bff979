"""OLMo-2 port against tiny random-init HF torch models: parity, KV-cached greedy decoding, round trip, strictness.

The default-suite case holds every optional feature at once: grouped-query attention (6 query heads over 2, as
OLMo-2 32B), an explicit ``head_dim`` with N * H = 60 != D = 42 (so ``q_norm`` has width 60 and ``k_norm`` 20),
tied embeddings and the q/k/v/o biases of ``attention_bias``. The slow case is OLMo-2 7B's shape: multi-head,
untied (the scanned form and the chunked cache run on it). Every norm scale is perturbed from 1 (``randomize_hf``),
so a post-norm applied in the wrong place or a per-head instead of a whole-projection q/k norm shows.
"""

import numpy as np
import pytest

pytest.importorskip("torch")

from tests.models.parity import Case, ParitySuite  # noqa: E402

pytestmark = pytest.mark.torch

CASES = {
    "olmo2_gqa_tied_bias": dict(
        vocab_size=89, hidden_size=42, head_dim=10, num_attention_heads=6, num_key_value_heads=2,
        intermediate_size=61, num_hidden_layers=2, tie_word_embeddings=True, attention_bias=True, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0},
    ),
    "olmo2_mha_untied": dict(
        vocab_size=101, hidden_size=60, num_attention_heads=6, num_key_value_heads=6, intermediate_size=71,
        num_hidden_layers=3, tie_word_embeddings=False,
    ),
}
SLOW = {"olmo2_mha_untied"}


@pytest.fixture(scope="module",
                params=[pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in sorted(CASES)])
def case(request, tmp_path_factory):
    from transformers import Olmo2Config, Olmo2ForCausalLM

    path = tmp_path_factory.mktemp(request.param)
    return Case(request.param, Olmo2Config, Olmo2ForCausalLM,
                dict(CASES[request.param], max_position_embeddings=64), path, 19)


class TestOlmo2Parity(ParitySuite):
    SCAN_CASES = frozenset({"olmo2_mha_untied"})
    CHUNK_CASES = frozenset({"olmo2_mha_untied"})

    def test_config_reads_the_case(self, case):
        cfg, attn = case.model.cfg, case.model.layers[0].self_attn
        assert (cfg.kv_heads, cfg.rms_norm_eps) == (case.hf_config.num_key_value_heads, case.hf_config.rms_norm_eps)
        n, k, h = cfg.num_attention_heads, cfg.kv_heads, cfg.head_size
        assert (attn.q_norm.scale.shape, attn.k_norm.scale.shape) == ((n * h,), (k * h,))
        assert not hasattr(case.model.layers[0], "input_layernorm")
        assert hasattr(case.model, "lm_head") != cfg.tie_word_embeddings
        assert (attn.o_proj.bias is not None) == case.hf_config.attention_bias
        for name in ("q_norm", "k_norm"):  # the whole-projection scales are not one per-head vector repeated
            scale = np.asarray(getattr(attn, name).scale[...]).reshape(-1, h)
            assert np.abs(scale - scale[:1]).max() > 1e-2
