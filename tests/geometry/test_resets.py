"""Resets as parameter-tree surgery: base weights restored, tie semantics, literal block counts (§7.4)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.geometry.readout import readout_matrix
from cfka_jax.geometry.resets import ResetConfig, build, reset, reset_model, untie
from cfka_jax.geometry.tiny import build as build_port
from cfka_jax.geometry.tiny import pythia_cfg, qwen_cfg
from cfka_jax.models.qwen import QwenModel
from tests.tolerances import F32


def _pure(model):
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def _four_layer(cfg):
    return dataclasses.replace(cfg, num_hidden_layers=4)


@pytest.fixture(scope="module")
def qwen_pair():
    cfg = _four_layer(qwen_cfg())
    return cfg, _pure(build_port(cfg, seed=1)), _pure(build_port(cfg, seed=2))  # base, "CPT"


@pytest.fixture(scope="module")
def pythia_pair():
    cfg = _four_layer(pythia_cfg())
    return cfg, _pure(build_port(cfg, seed=1)), _pure(build_port(cfg, seed=2))


def _same(a, b) -> bool:
    return all(jax.tree.leaves(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a, b)))


def test_readout_only_unties_a_tied_head_with_the_base_readout(qwen_pair):
    cfg, base, cpt = qwen_pair
    new_cfg, out = reset(cpt, base, cfg, cfg, ResetConfig("readout_only"))
    assert not new_cfg.tie_word_embeddings and cfg.tie_word_embeddings
    np.testing.assert_array_equal(out["lm_head"]["kernel"], base["embed_tokens"]["embedding"].T)
    np.testing.assert_array_equal(out["embed_tokens"]["embedding"], cpt["embed_tokens"]["embedding"])  # CPT input kept
    assert _same(out["layers"], cpt["layers"]) and _same(out["norm"], cpt["norm"])
    np.testing.assert_array_equal(readout_matrix(out, new_cfg), readout_matrix(base, cfg))


def test_readout_only_on_an_untied_head_copies_the_base_head(pythia_pair):
    cfg, base, cpt = pythia_pair
    new_cfg, out = reset(cpt, base, cfg, cfg, ResetConfig("readout_only"))
    assert new_cfg == cfg
    np.testing.assert_array_equal(out["embed_out"]["kernel"], base["embed_out"]["kernel"])
    np.testing.assert_array_equal(out["embed_in"]["embedding"], cpt["embed_in"]["embedding"])


def test_reset_readout_restores_the_embedding_and_reties(qwen_pair, pythia_pair):
    cfg, base, cpt = qwen_pair
    _, untied = reset(cpt, base, cfg, cfg, ResetConfig("readout_only"))
    untied_cfg = dataclasses.replace(cfg, tie_word_embeddings=False)
    new_cfg, out = reset(untied, base, untied_cfg, cfg, ResetConfig("readout"))  # re-tied to the base embedding
    assert new_cfg.tie_word_embeddings and "lm_head" not in out
    np.testing.assert_array_equal(out["embed_tokens"]["embedding"], base["embed_tokens"]["embedding"])
    pcfg, pbase, pcpt = pythia_pair
    _, pout = reset(pcpt, pbase, pcfg, pcfg, ResetConfig("readout"))  # untied: embed_in and embed_out
    assert _same(pout["embed_in"], pbase["embed_in"]) and _same(pout["embed_out"], pbase["embed_out"])
    assert _same(pout["layers"], pcpt["layers"])


@pytest.mark.parametrize("rc, restored", [(ResetConfig("readout", top_blocks=1), [3]),
                                          (ResetConfig("readout", top_blocks=2), [2, 3]),
                                          (ResetConfig("readout", paper_last4=True), [1, 2, 3]),
                                          (ResetConfig("readout"), [])])
def test_top_blocks_are_literal_and_paper_last4_is_three(qwen_pair, rc, restored):
    cfg, base, cpt = qwen_pair
    _, out = reset(cpt, base, cfg, cfg, rc)
    for layer in range(4):
        assert _same(out["layers"][layer], (base if layer in restored else cpt)["layers"][layer])
    assert _same(out["norm"], cpt["norm"]) and rc.blocks == len(restored)
    _, with_norm = reset(cpt, base, cfg, cfg, dataclasses.replace(rc, final_norm=True))
    assert _same(with_norm["norm"], base["norm"])


def test_the_inputs_are_not_modified_and_none_is_a_copy(qwen_pair):
    cfg, base, cpt = qwen_pair
    before = jax.tree.map(jnp.copy, cpt)
    reset(cpt, base, cfg, cfg, ResetConfig("readout", top_blocks=2))
    assert _same(cpt, before)
    assert _same(reset(cpt, base, cfg, cfg, ResetConfig())[1], cpt)


def test_config_validation():
    with pytest.raises(ValueError):
        ResetConfig("readout_only", top_blocks=2)
    with pytest.raises(ValueError):
        ResetConfig("readout", top_blocks=2, paper_last4=True)
    with pytest.raises(ValueError):
        ResetConfig("reinit")
    with pytest.raises(ValueError):
        ResetConfig("readout", top_blocks=-1)
    assert ResetConfig("readout", paper_last4=True).name == "readout+3blocks"


@pytest.mark.slow  # the model shell of reset(); the tree surgery itself is tested above
def test_reset_model_builds_the_untied_model_with_the_expected_logits():
    cfg = qwen_cfg()
    base, cpt = build_port(cfg, seed=1), build_port(cfg, seed=2)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 37, (2, 7)), jnp.int32)
    model = reset_model(cpt, base, ResetConfig("readout_only"))
    assert isinstance(model, QwenModel) and not model.cfg.tie_word_embeddings
    expected = cpt(tokens).final_hidden @ base.embed_tokens.embedding[...].T  # CPT body, base readout
    np.testing.assert_allclose(model(tokens).logits, expected, rtol=F32.exact_rtol, atol=F32.op_atol)
    ucfg, uparams = untie(_pure(cpt), cfg)
    np.testing.assert_allclose(build(QwenModel, ucfg, uparams)(tokens).logits, cpt(tokens).logits,
                               rtol=F32.exact_rtol, atol=F32.op_atol)  # functionally untied: same logits
    with pytest.raises(ValueError, match="do not fit"):
        build(QwenModel, cfg, uparams)
