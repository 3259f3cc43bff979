"""Checkpoint folders: config dispatch, sharded indices, tied-head aliases, bf16, tokenizers, save/load."""

import json

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from cfka_jax import models
from cfka_jax.models import hub, pythia, qwen
from tests.models.parity import forward, randomize_hf
from tests.tolerances import BF16

TINY_QWEN3 = dict(
    model_type="qwen3", vocab_size=53, hidden_size=31, head_dim=8, intermediate_size=43, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
)
TINY_PYTHIA = dict(
    model_type="gpt_neox", vocab_size=53, hidden_size=30, num_attention_heads=3, intermediate_size=41,
    num_hidden_layers=2, rotary_pct=0.4,
)

TINY_LLAMA = dict(
    model_type="llama", vocab_size=53, hidden_size=36, num_attention_heads=6, num_key_value_heads=2,
    intermediate_size=41, num_hidden_layers=2, rope_parameters={"rope_type": "llama3", "rope_theta": 5e5,
    "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
)


def _write_random(path, hf_config: dict, seed: int = 0):
    """A random NNX model saved as an HF folder; returns the model."""
    cfg = models.config_from_hf(hf_config)
    model = models.family.of(cfg).build(cfg, seed)
    models.save_pretrained(model, path)
    return model


@pytest.mark.parametrize("hf_config", [TINY_QWEN3, TINY_PYTHIA, pytest.param(TINY_LLAMA, marks=pytest.mark.slow)],
                         ids=["qwen3", "pythia", "llama"])  # llama: its parity suite's round trip runs by default
def test_save_then_load_is_bit_identical(tmp_path, hf_config):
    model = _write_random(tmp_path, hf_config)
    loaded = models.from_pretrained(tmp_path)
    assert loaded.cfg == model.cfg
    for a, b in zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(loaded)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_sharded_index_loads_like_single_file(tmp_path):
    model = _write_random(tmp_path / "single", TINY_QWEN3)
    tensors = qwen.export(model)
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    (tmp_path / "sharded").mkdir()
    for name, part in shards.items():
        save_file({k: tensors[k] for k in part}, tmp_path / "sharded" / name)
    index = {"metadata": {}, "weight_map": {k: name for name, part in shards.items() for k in part}}
    (tmp_path / "sharded" / hub.INDEX_FILE).write_text(json.dumps(index))
    (tmp_path / "sharded" / hub.CONFIG_FILE).write_text((tmp_path / "single" / hub.CONFIG_FILE).read_text())
    loaded = models.from_pretrained(tmp_path / "sharded")
    for a, b in zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(loaded)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # An index that assigns a key to the wrong shard names that key.
    index["weight_map"][keys[0]] = "model-00002-of-00002.safetensors"
    (tmp_path / "sharded" / hub.INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(hub.ConversionError, match=keys[0].replace(".", r"\.")):
        hub.read_tensors(tmp_path / "sharded")


@pytest.mark.torch
def test_hf_sharded_checkpoint_loads(tmp_path):
    pytest.importorskip("torch")
    from transformers import Qwen3Config, Qwen3ForCausalLM

    fields = {k: v for k, v in TINY_QWEN3.items() if k != "model_type"}
    hf = Qwen3ForCausalLM(Qwen3Config(**fields)).eval()
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="10KB")
    hf.save_pretrained(tmp_path / "single")
    assert (tmp_path / "sharded" / hub.INDEX_FILE).exists() and not (tmp_path / "sharded" / hub.WEIGHTS_FILE).exists()
    a, b = models.from_pretrained(tmp_path / "sharded"), models.from_pretrained(tmp_path / "single")
    for x, y in zip(jax.tree.leaves(nnx.state(a)), jax.tree.leaves(nnx.state(b)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_folder_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError):
        hub.read_tensors(tmp_path)
    _write_random(tmp_path, TINY_PYTHIA)
    config = json.loads((tmp_path / hub.CONFIG_FILE).read_text())
    (tmp_path / hub.CONFIG_FILE).write_text(json.dumps(dict(config, surprise_knob=3)))
    with pytest.raises(ValueError, match="surprise_knob"):
        models.from_pretrained(tmp_path)
    (tmp_path / hub.CONFIG_FILE).write_text(json.dumps(dict(config, model_type="mamba")))
    with pytest.raises(ValueError, match="mamba"):
        models.from_pretrained(tmp_path)


def test_tied_head_alias_accepted_only_when_equal(tmp_path):
    model = _write_random(tmp_path, TINY_QWEN3)
    tensors = qwen.export(model)
    assert "lm_head.weight" not in tensors
    same = dict(tensors, **{"lm_head.weight": tensors["model.embed_tokens.weight"].copy()})
    loaded = qwen.load(model.cfg, same)
    np.testing.assert_array_equal(np.asarray(loaded.embed_tokens.embedding[...]), tensors["model.embed_tokens.weight"])
    differs = dict(tensors, **{"lm_head.weight": tensors["model.embed_tokens.weight"] + 1.0})
    with pytest.raises(hub.ConversionError, match=r"lm_head\.weight \(tied to model\.embed_tokens\.weight"):
        qwen.load(model.cfg, differs)


def test_pythia_old_checkpoint_buffers_are_checked_not_skipped(tmp_path):
    model = _write_random(tmp_path, TINY_PYTHIA)
    cfg, r = model.cfg, model.cfg.rotary_dim  # H = 10, R = int(10 * 0.4) = 4
    inv_freq = (1.0 / 10000.0 ** (np.arange(0, r, 2, dtype=np.float32) / r)).astype(np.float16)  # an fp16 checkpoint
    good = {
        "gpt_neox.layers.0.attention.bias": np.tril(np.ones((7, 7), bool))[None, None],
        "gpt_neox.layers.0.attention.masked_bias": np.asarray(-1e9, np.float32),
        "gpt_neox.layers.1.attention.rotary_emb.inv_freq": inv_freq,
    }
    tensors = pythia.export(model)
    loaded = pythia.load(cfg, dict(tensors, **good))
    np.testing.assert_array_equal(np.asarray(loaded.embed_out.kernel[...]), np.asarray(model.embed_out.kernel[...]))
    bad = {
        "gpt_neox.layers.0.attention.bias": np.ones((1, 1, 7, 7), bool),
        "gpt_neox.layers.1.attention.rotary_emb.inv_freq": 1.0 / 100.0 ** (np.arange(0, r, 2, dtype=np.float32) / r),
    }
    with pytest.raises(hub.ConversionError) as err:
        pythia.load(cfg, dict(tensors, **bad))
    assert "attention.bias (not a lower-triangular causal mask)" in str(err.value)
    assert "rotary_emb.inv_freq (buffer differs" in str(err.value)


@pytest.mark.torch
def test_bf16_checkpoint(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

    fields = {k: v for k, v in TINY_QWEN3.items() if k != "model_type"}
    torch.manual_seed(0)
    hf = Qwen3ForCausalLM(Qwen3Config(**fields, initializer_range=0.1, attn_implementation="eager")).eval()
    randomize_hf(hf, 0)
    hf.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    model = models.from_pretrained(tmp_path / "bf16", dtype=jnp.bfloat16)
    assert {x.dtype for x in jax.tree.leaves(nnx.state(model))} == {jnp.dtype(jnp.bfloat16)}
    tokens = np.random.default_rng(0).integers(0, 53, (2, 11))
    out = forward(model, tokens, return_attn=True)
    assert out.logits.dtype == jnp.float32 and out.attentions[0].dtype == jnp.float32
    with torch.no_grad():
        ref = hf.float()(torch.tensor(tokens)).logits.numpy()
    assert np.abs(ref).max() > 1.0  # O(1) logits, so the bf16 tolerance is meaningful
    np.testing.assert_allclose(out.logits, ref, rtol=0, atol=BF16.model_atol)
    models.save_pretrained(model, tmp_path / "out")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert back.model.embed_tokens.weight.dtype == torch.bfloat16


def test_load_tokenizer(tmp_path):
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<|endoftext|>": 0, "the": 1, "cat": 2, "sat": 3, "[UNK]": 4}
    tok = Tokenizer(tok_models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(tmp_path)
    loaded = models.load_tokenizer(tmp_path)
    assert loaded("the cat sat dog")["input_ids"] == [1, 2, 3, 4]
    assert loaded.eos_token_id == 0
