"""Replay corpora (STOC, Random, LAMOL): prompts, sampling, MinHash, budget, saving and reuse."""

import dataclasses
import json

import numpy as np
import pytest
from flax import nnx

from cfka_jax.continual import replay
from cfka_jax.continual.dedup import MinHashConfig
from cfka_jax.data.tokenize import train_word_tokenizer
from cfka_jax.models.qwen import QwenConfig, QwenModel

TEXTS = ["anna smith was born in boston .", "she studied physics at mit .", "bob lee works for acme in denver .",
         "he was born on may 2 , 1980 ."]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return train_word_tokenizer(TEXTS, tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def model(tok):
    cfg = QwenConfig(model_type="qwen2", vocab_size=len(tok), hidden_size=16, intermediate_size=24,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                     initializer_range=0.3)
    return QwenModel(cfg, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def docs(tok):
    return [np.asarray(tok(t)["input_ids"] + [tok.eos_token_id], np.int32) for t in TEXTS]


def small(kind, **kw):
    base = dict(max_new_tokens=6, max_len=8, batch_size=5, seed=3)
    return replay.ReplayConfig.synthetic(kind, **(base | kw))


def test_stoc_prompts_are_complete_spans_of_the_sources(model, docs, tok):
    cfg = small("stoc")
    prompts = replay.make_prompts(model, docs, cfg, tok.eos_token_id)
    assert 1 <= len(prompts) <= 3 * len(docs)
    for p in prompts:
        assert p.end - p.start == 3 and tuple(docs[p.source][p.start:p.end]) == p.ids


def test_lamol_and_random_prompt_counts(model, docs, tok):
    lamol = replay.make_prompts(model, docs, small("lamol"), tok.eos_token_id)
    assert len(lamol) == 3 * len(docs) and all(p.ids == (tok.eos_token_id,) for p in lamol)
    rand = replay.make_prompts(model, docs, small("random"), tok.eos_token_id)
    assert len(rand) == 3 * len(docs)  # every source is longer than 3 + 2 tokens
    assert all(tuple(docs[p.source][p.start:p.end]) == p.ids and p.end - p.start == 3 for p in rand)


def test_candidates_start_with_their_prompt_and_do_not_depend_on_the_batch_size(model, docs, tok):
    cfg = small("stoc", minhash=None)
    a = replay.build_replay(model, docs, tok, cfg, budget_tokens=10**6)
    b = replay.build_replay(model, docs, tok, dataclasses.replace(cfg, batch_size=7), budget_tokens=10**6)
    assert len(a.candidates) == 3 * len(a.prompts)
    for c, (x, y) in enumerate(zip(a.candidates, b.candidates)):
        np.testing.assert_array_equal(x, y)
        p = a.prompts[a.candidate_prompt[c]]
        assert tuple(x[:len(p.ids)]) == p.ids
        assert len(x) == min(cfg.max_len, len(p.ids) + cfg.max_new_tokens)  # ignore_eos: always full length
    assert a.stats["generated_tokens"] == 3 * len(a.prompts) * cfg.max_new_tokens


def test_real_sampler_stops_at_eos(model, docs, tok):
    cfg = replay.ReplayConfig.real("stoc", span_len=4, max_new_tokens=30, max_len=64, minhash=None, batch_size=8)
    corpus = replay.build_replay(model, docs, tok, cfg)
    assert len(corpus.sequences) == len(corpus.candidates)  # budget 'all'
    for c, p in zip(corpus.candidates, corpus.candidate_prompt):
        gen = c[len(corpus.prompts[p].ids):]
        stopped = np.flatnonzero(gen == tok.eos_token_id)
        assert len(gen) == 30 or (len(stopped) == 1 and stopped[0] == len(gen) - 1)


def test_minhash_drops_identical_greedy_samples(model, docs, tok):
    cfg = small("lamol", temperature=0.0)  # greedy from the same EOS prompt: every candidate is identical
    corpus = replay.build_replay(model, docs, tok, cfg, budget_tokens=10 * 8)
    assert corpus.kept.sum() == 1 and corpus.stats["minhash_dropped"] == len(corpus.candidates) - 1
    assert len(corpus.chosen) == 1  # k = min(80 // 8, 1 kept)


def test_budget_draws_with_replacement_from_kept(model, docs, tok):
    cfg = small("random", minhash=MinHashConfig(threshold=0.5))
    corpus = replay.build_replay(model, docs, tok, cfg, budget_tokens=5 * 8 + 7)
    assert len(corpus.chosen) == min(5, int(corpus.kept.sum()))
    assert corpus.kept[corpus.chosen].all()
    assert corpus.stats["replay_tokens"] == sum(len(s) for s in corpus.sequences)
    with pytest.raises(ValueError, match="budget_tokens"):
        replay.build_replay(model, docs, tok, cfg)


def test_save_load_and_reuse(model, docs, tok, tmp_path):
    cfg = small("stoc")
    built = replay.build_replay(model, docs, tok, cfg, budget_tokens=200, out_dir=tmp_path / "r")
    loaded = replay.load_replay(tmp_path / "r")
    assert loaded.config == cfg and loaded.prompts == built.prompts and loaded.stats == built.stats
    np.testing.assert_array_equal(loaded.chosen, built.chosen)
    for x, y in zip(loaded.sequences, built.sequences):
        np.testing.assert_array_equal(x, y)
    lines = (tmp_path / "r" / "prompts.jsonl").read_text().splitlines()
    assert len(lines) == len(built.prompts) and '"text"' in lines[0]
    again = replay.build_replay(model, docs, tok, cfg, budget_tokens=200, out_dir=tmp_path / "r")
    assert again.stats == built.stats  # reused, not rebuilt
    with pytest.raises(ValueError, match="another config"):
        replay.build_replay(model, docs, tok, dataclasses.replace(cfg, seed=4), budget_tokens=200,
                            out_dir=tmp_path / "r")
    with pytest.raises(ValueError, match="replay missing"):
        (tmp_path / "r" / "replay").rename(tmp_path / "r" / "moved")
        replay.load_replay(tmp_path / "r")


def test_config_validation():
    with pytest.raises(ValueError, match="kind"):
        replay.ReplayConfig(kind="gen")
    with pytest.raises(ValueError, match="span_len"):
        replay.ReplayConfig(span_len=0)
    assert replay.ReplayConfig.real("lamol").snippet_rule == "window_sum"


def test_reused_corpus_must_be_made_from_the_same_things(model, docs, tok, tmp_path):
    cfg, folder = small("random"), tmp_path / "r"
    mine = {"tokenizer": "sha256:aaaa", "parent_run": "sha256:bbbb", "parent_step": 10}
    built = replay.build_replay(model, docs, tok, cfg, budget_tokens=200, out_dir=folder, made_from=mine)
    assert replay.load_replay(folder).made_from == mine == built.made_from
    replay.build_replay(model, docs, tok, cfg, budget_tokens=200, out_dir=folder, made_from=mine)  # same: reused
    before = sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())
    other = {**mine, "parent_step": 20}
    with pytest.raises(ValueError) as exc:
        replay.build_replay(model, docs, tok, cfg, budget_tokens=200, out_dir=folder, made_from=other)
    msg = str(exc.value)
    assert msg.startswith(f"--replay-dir {folder} was made from something else: parent_step 10") and "\n" not in msg
    cfg_json = json.loads((folder / "config.json").read_text())
    del cfg_json["made_from"]
    (folder / "config.json").write_text(json.dumps(cfg_json))
    with pytest.raises(ValueError, match="records no provenance"):
        replay.check_replay_dir(folder, mine, flag="--replay-dir")
    assert [n for n, _ in sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())] == [n for n, _ in before]
