"""Tokenizer training/save/load and first-match value location (§3.5)."""

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from cfka_jax.data.biography import Biography, Person
from cfka_jax.data.tokenize import (EOS_TOKEN, find_first, load_tokenizer, locate_values, tokenize_split,
                                    train_word_tokenizer)


def test_save_load_round_trip(world, tokenizer, tmp_path):
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert tokenizer.eos_token == EOS_TOKEN and tokenizer.eos_token_id == 0 and tokenizer.pad_token_id == 0
    again = load_tokenizer(tokenizer.name_or_path)
    text = world.pt_train[0].text
    ids = tokenizer(text)["input_ids"]
    assert again(text)["input_ids"] == ids and tokenizer.decode(ids) == text  # lossless, no added specials
    pieces = tokenizer.tokenize(text)
    assert "".join(pieces) == text and all(len(p.strip().split()) == 1 for p in pieces)  # leading-space words
    city, state = world.people[0].values[0].split(", ")
    assert tokenizer.tokenize(f" {city}, {state}.")[-3:] == [",", " " + state, "."]
    texts = [b.text for bios in world.splits.values() for b in bios]
    retrained = train_word_tokenizer(texts, tmp_path / "tok2")
    assert retrained.get_vocab() == tokenizer.get_vocab()  # training is deterministic


def test_find_first_semantics():
    ids = [5, 7, 8, 3, 7, 8, 0]
    assert find_first(ids, [7, 8]) == 1 and find_first(ids, [8, 3]) == 2
    assert find_first(ids, [7, 9]) == -1 and find_first(ids, [0]) == 6 and find_first(ids, [0, 1]) == -1
    idx, idx2 = locate_values(ids, [[7, 8], [3], [0], [5], [8, 3, 7]], who="x")
    assert idx == [1, 3, 6, 0, 2] and idx2 == [3, 4, 7, 1, 5]


def test_split_locates_every_value(world, tokenizer):
    split = tokenize_split(world.cpt_train, world.people, tokenizer)
    assert len(split) == len(world.cpt_train) and split.offsets[0] == 0
    for r, b in enumerate(world.cpt_train):
        ids = split.doc(r)
        assert ids[-1] == tokenizer.eos_token_id and tokenizer.unk_token_id not in ids
        for a, value in enumerate(world.people[b.pid].values):
            i, j = split.idx[r, a], split.idx2[r, a]
            assert tokenizer.decode(ids[i:j]) == " " + value
            assert list(ids[i:j]) == tokenizer(" " + value, add_special_tokens=False)["input_ids"]


def _crafted():
    values = ("Reno, NV", "May 3, 1950", "Law School", "Law", "Law Partners")
    person = Person(0, "Ann B. Lee", values, True)
    text = ("Ann B. Lee was born in Reno, NV. Ann B. Lee was born on May 3, 1950. Ann B. Lee works for Law Partners. "
            "Ann B. Lee studied at Law School. Ann B. Lee majored in Law.")
    return person, Biography(0, 1, text, (0, 1, 4, 2, 3), (0, 0, 0, 0, 0))


def test_first_match_lands_on_earlier_occurrence(tmp_path):
    person, bio = _crafted()
    tok = train_word_tokenizer([bio.text], tmp_path / "tok")
    split = tokenize_split((bio,), (person,), tok)
    ids = split.doc(0)
    pieces = tok.convert_ids_to_tokens(list(ids))
    first_law = pieces.index(" Law")
    # major " Law" first occurs inside " Law Partners" (company sentence), not in "majored in Law"
    assert split.idx[0, 3] == first_law and split.idx[0, 4] == first_law
    assert pieces[split.idx[0, 2]:split.idx2[0, 2]] == [" Law", " School"]
    assert split.idx[0, 3] < split.idx[0, 2] and split.idx[0, 3] < len(pieces) - 3


def test_missing_value_names_person_and_attribute(tmp_path, world, tokenizer):
    person, bio = _crafted()
    bad = Person(0, person.fullname, person.values[:2] + ("Yale University",) + person.values[3:], True)
    tok = train_word_tokenizer([bio.text, "Yale University"], tmp_path / "tok")
    with pytest.raises(ValueError, match=r"'university'.*'Ann B. Lee' \(pid 0, Number 1\)"):
        tokenize_split((bio,), (bad,), tok)
    with pytest.raises(ValueError, match="not found in the biography of"):  # truncation cuts values off
        tokenize_split(world.pt_train[:1], world.people, tokenizer, max_length=10)


def test_blocks_do_not_change_the_result(world, tokenizer):
    whole = tokenize_split(world.pt_test, world.people, tokenizer)
    blocked = tokenize_split(world.pt_test, world.people, tokenizer, block=7)
    for name in ("tokens", "offsets", "pid", "number", "idx", "idx2"):
        np.testing.assert_array_equal(getattr(blocked, name), getattr(whole, name))


def test_select_rows(world, tokenizer):
    split = tokenize_split(world.pt_test[:6], world.people, tokenizer)
    sub = split.select([4, 1])
    assert np.array_equal(sub.doc(0), split.doc(4)) and np.array_equal(sub.idx[1], split.idx[1])
    assert list(sub.pid) == [split.pid[4], split.pid[1]]


def test_byte_level_bpe_folder(world, tmp_path):
    """A GPT-2/NeoX-style byte-level BPE folder (as Pythia ships) locates every value the same way."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    texts = [b.text for bios in world.splits.values() for b in bios]
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=[EOS_TOKEN],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS_TOKEN).save_pretrained(tmp_path / "bpe")
    tok = load_tokenizer(tmp_path / "bpe")
    split = tokenize_split(world.pt_test, world.people, tok)
    for r, b in enumerate(world.pt_test):
        ids = split.doc(r)
        assert ids[-1] == tok.eos_token_id == 0
        for a, value in enumerate(world.people[b.pid].values):
            assert tok.decode(ids[split.idx[r, a]:split.idx2[r, a]]) == " " + value


@pytest.mark.parametrize("model_type", ["qwen2", "gpt_neox"])
def test_word_tokenizer_next_to_a_model_config_keeps_its_class(world, tokenizer, tmp_path, model_type):
    """transformers 5 rebuilds a Qwen2Tokenizer for a qwen2 folder unless the saved class is honoured."""
    import json

    import cfka_jax.models as models

    folder = tmp_path / model_type
    tokenizer.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    text = world.pt_train[0].text
    for loader in (load_tokenizer, models.load_tokenizer):
        again = loader(folder)
        assert isinstance(again, PreTrainedTokenizerFast) and again(text)["input_ids"] == tokenizer(text)["input_ids"]


@pytest.fixture(scope="module")
def bpe(world, tmp_path_factory):
    return train_word_tokenizer((b.text for bios in world.splits.values() for b in bios),
                                tmp_path_factory.mktemp("bpe"), bpe_vocab=300)


def test_bpe_tokenizer_is_lossless_locates_values_and_shares_name_pieces(world, tokenizer, bpe):
    assert len(bpe) <= 300 < len(tokenizer)
    split = tokenize_split(world.cpt_train, world.people, bpe)  # raises if any value has no exact token match
    for r, b in enumerate(world.cpt_train[:20]):
        ids = split.doc(r)
        assert bpe.decode(ids[:-1]) == b.text and bpe.unk_token_id not in ids
        for a, value in enumerate(world.people[b.pid].values):
            assert bpe.decode(ids[split.idx[r, a]:split.idx2[r, a]]) == " " + value
    names = [p.fullname for p in world.people]
    pieces = [bpe(" " + n, add_special_tokens=False)["input_ids"] for n in names]
    words = [tokenizer(" " + n, add_special_tokens=False)["input_ids"] for n in names]
    assert sum(map(len, pieces)) > sum(map(len, words))  # names are split into more, shared pieces
    assert len({t for p in pieces for t in p}) < len({t for w in words for t in w})


def test_bpe_vocabulary_is_checked(world, tmp_path):
    from cfka_jax.data.pipeline import preset

    with pytest.raises(ValueError, match="bpe_vocab"):
        train_word_tokenizer(["a b c"], tmp_path, bpe_vocab=10)
    with pytest.raises(ValueError, match="bpe_vocab"):
        preset("smoke", bpe_vocab=100)


def test_unset_bpe_vocab_keeps_the_cache_key():
    import dataclasses

    from cfka_jax.data import io
    from cfka_jax.data.pipeline import preset

    cfg = preset("smoke")
    stripped = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "bpe_vocab"}
    stripped["bio"] = {k: v for k, v in stripped["bio"].items() if k != "name_pool"}  # also unset (issue #23)
    assert "bpe_vocab" in dataclasses.asdict(cfg) and io.config_hash(cfg) != io.config_hash(
        dataclasses.replace(cfg, bpe_vocab=512))
    import hashlib
    import json

    h = hashlib.sha256(f"v{io.FORMAT_VERSION}".encode())
    h.update(json.dumps(stripped, sort_keys=True).encode())
    assert io.config_hash(cfg) == h.hexdigest()[:16]  # the key a cache built before the field existed has
