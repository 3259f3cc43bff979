"""build_data on the smoke preset: contents, FTA targets, on-disk cache, tokenizer folder option."""

import dataclasses
import os

import numpy as np
import pytest

from cfka_jax.data.pipeline import EVAL_SETS, PRESETS, DataConfig, build_data, preset, read_manifest
from cfka_jax.data.templates import ATTRIBUTES


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return build_data(preset("smoke"), tmp_path_factory.mktemp("cache"))


def test_presets():
    assert PRESETS["paper"].bio.num_pt_people == 100_000 and PRESETS["paper"].bio.num_cpt_people == 20_000
    assert PRESETS["paper"].seq_len == 512 and PRESETS["smoke"].bio.num_pt_people == 40
    assert preset("small", doc_mask=True).doc_mask
    with pytest.raises(ValueError, match="unknown data preset"):
        preset("huge")
    with pytest.raises(ValueError, match="seq_len"):
        DataConfig(PRESETS["smoke"].bio, seq_len=1)


def test_bundle_contents(bundle):
    cfg = bundle.config.bio
    assert len(bundle.splits["pt_train"]) == cfg.num_pt_people * cfg.train_bios_per_person
    assert len(bundle.splits["replay_all"]) == cfg.num_pt_people
    assert bundle.eos_id == 0 and bundle.train["pt_train"].tokens.dtype == np.int32
    for name in ("pt_train", "cpt_train"):  # training packs hold every token once, shuffled
        packed, split = bundle.train[name], bundle.splits[name]
        assert packed.loss_mask.sum() < len(split.tokens) <= packed.tokens.size
        assert not np.array_equal(packed.doc_starts, split.offsets[:-1])
    manifest = read_manifest(bundle)
    assert manifest["tokens"]["pt_train"] == len(bundle.splits["pt_train"].tokens)
    assert manifest["vocab_size"] == len(bundle.tokenizer)


def test_fta_targets_are_first_value_tokens(bundle):
    tok = bundle.tokenizer
    for name in EVAL_SETS:
        packed, fta = bundle.eval[name]
        split = bundle.splits[name]
        np.testing.assert_array_equal(packed.doc_starts, split.offsets[:-1])  # file order (§5.1)
        assert len(fta.chunk) + fta.num_dropped == len(split) * len(ATTRIBUTES)
        for k in range(0, len(fta.chunk), 37):
            doc, attr = fta.doc[k], fta.attr[k]
            value = bundle.world.people[split.pid[doc]].values[attr]
            assert fta.token[k] == tok(" " + value, add_special_tokens=False)["input_ids"][0]


def test_cache_reload_and_epochs(bundle):
    again = build_data(bundle.config, os.path.dirname(bundle.folder))
    assert again.folder == bundle.folder and again.world == bundle.world
    np.testing.assert_array_equal(again.train["pt_train"].tokens, bundle.train["pt_train"].tokens)
    np.testing.assert_array_equal(again.eval["cpt_test"][1].pos, bundle.eval["cpt_test"][1].pos)
    docs = bundle.splits["cpt_train"].docs()
    np.testing.assert_array_equal(bundle.pack_epoch(docs, 0).tokens, bundle.train["cpt_train"].tokens)
    assert not np.array_equal(bundle.pack_epoch(docs, 1).tokens, bundle.pack_epoch(docs, 0).tokens)


def test_local_tokenizer_folder(bundle, tmp_path):
    tok_dir = os.path.join(bundle.folder, "tokenizer")
    other = build_data(dataclasses.replace(bundle.config, tokenizer_path=tok_dir), tmp_path)
    assert other.folder != bundle.folder
    np.testing.assert_array_equal(other.splits["pt_test"].tokens, bundle.splits["pt_test"].tokens)
    new_world = dataclasses.replace(bundle.config, bio=dataclasses.replace(bundle.config.bio, seed=11),
                                    tokenizer_path=tok_dir)
    with pytest.raises(ValueError, match="missing from the tokenizer vocabulary|not found in the biography"):
        build_data(new_world, tmp_path)
