"""OLMo port against tiny random-init HF torch models: parity, KV-cached greedy decoding, round trip, strictness.

The default-suite case holds every optional feature at once: grouped-query attention (6 query heads over 2), an
explicit ``head_dim`` with N * H = 60 != D = 42, a q/k/v clamp that is active on part of the entries, tied
embeddings (OLMo-1B) and the q/k/v/o biases of ``attention_bias``. The slow case is OLMo-7B's shape: multi-head,
no clamp, untied (the scanned form and the chunked cache run on it). OLMo's norms have no parameters, so
``randomize_hf`` perturbs only the linears and embeddings here; a norm tensor would be an unused key.
"""

import numpy as np
import pytest

pytest.importorskip("torch")

from tests.models.parity import Case, ParitySuite, forward  # noqa: E402

pytestmark = pytest.mark.torch

CASES = {
    "olmo_clip_gqa_tied": dict(
        vocab_size=89, hidden_size=42, head_dim=10, num_attention_heads=6, num_key_value_heads=2,
        intermediate_size=61, num_hidden_layers=2, tie_word_embeddings=True, attention_bias=True, clip_qkv=1.5,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0},
    ),
    "olmo_mha_untied": dict(
        vocab_size=101, hidden_size=60, num_attention_heads=6, num_key_value_heads=6, intermediate_size=71,
        num_hidden_layers=3, tie_word_embeddings=False,
    ),
}
SLOW = {"olmo_mha_untied"}


@pytest.fixture(scope="module",
                params=[pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in sorted(CASES)])
def case(request, tmp_path_factory):
    from transformers import OlmoConfig, OlmoForCausalLM

    path = tmp_path_factory.mktemp(request.param)
    return Case(request.param, OlmoConfig, OlmoForCausalLM, dict(CASES[request.param], max_position_embeddings=64),
                path, 17)


class TestOlmoParity(ParitySuite):
    SCAN_CASES = frozenset({"olmo_mha_untied"})
    CHUNK_CASES = frozenset({"olmo_mha_untied"})

    def test_config_reads_the_case(self, case):
        cfg = case.model.cfg
        hf_attn = case.hf.model.layers[0].self_attn
        assert (cfg.kv_heads, cfg.head_size) == (case.hf_config.num_key_value_heads, hf_attn.head_dim)
        assert cfg.clip_qkv == case.hf_config.clip_qkv
        assert hasattr(case.model, "lm_head") != cfg.tie_word_embeddings
        assert (case.model.layers[0].self_attn.o_proj.bias is not None) == case.hf_config.attention_bias

    def test_the_clamp_is_active_and_changes_the_logits(self, case):
        """Some but not all entries of q, k or v reach the bound, so the parity above exercises the clamp."""
        import dataclasses

        from cfka_jax.models import family

        cfg = case.model.cfg
        if cfg.clip_qkv is None:
            pytest.skip("no clamp in this case")
        block = case.model.layers[0]
        x_BSD = block.input_layernorm(case.model.embed_tokens(np.asarray(case.tokens, np.int32)))
        x_TD = x_BSD.reshape(-1, cfg.hidden_size)
        raw = np.concatenate([np.abs(np.asarray(p(x_TD))).ravel() for p in
                              (block.self_attn.q_proj, block.self_attn.k_proj, block.self_attn.v_proj)])
        assert 0.02 < np.mean(raw > cfg.clip_qkv) < 0.5
        fam = family.of(cfg)
        unclamped = fam.load(dataclasses.replace(cfg, clip_qkv=None), fam.export(case.model))
        diff = np.asarray(forward(unclamped, case.tokens).logits) - np.asarray(forward(case.model, case.tokens).logits)
        assert np.abs(diff).max() > 1e-2
