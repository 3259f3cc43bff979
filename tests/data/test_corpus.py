"""Local corpora (cfka_jax/data/corpus.py): txt/jsonl/parquet/folder reading, errors, tokenisation, held-out split."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cfka_jax.data.corpus import CorpusConfig, corpus_files, load_corpus, read_jsonl, read_parquet, read_texts
from cfka_jax.data.corpus import read_txt, split_heldout, tokenize_texts
from cfka_jax.data.tokenize import train_word_tokenizer

TEXTS = ["the court ruled on the contract .", "a judge may hear the appeal", "the statute was amended in 1999"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return train_word_tokenizer(TEXTS + ["one two three four five six seven eight nine ten"],
                                tmp_path_factory.mktemp("corpus-tok"))


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_txt_documents_are_blank_line_separated(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("\n\nfirst doc\nstill first\n\n  \t\nsecond doc\r\n\r\n\r\nthird\n\n")
    assert read_txt(path) == ["first doc\nstill first", "second doc", "third"]


def test_jsonl_reads_the_configured_field_and_skips_blank_lines(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", [{"body": "x y", "id": 1}, {"body": "  "}, {"body": " z "}])
    path.write_text(path.read_text() + "\n   \n")
    assert read_jsonl(path, "body") == ["x y", "z"]


@pytest.mark.parametrize("line, message", [
    ('{"text": "ok"}\n{"text": broken}\n', r"a\.jsonl, line 2: invalid JSON"),
    ('{"text": "ok"}\n\n{"body": "no text"}\n', r"line 3: missing field 'text'"),
    ('{"text": 5}\n', r"line 1: field 'text' must be a string, got int"),
    ('["text"]\n', r"line 1: expected a JSON object, got list"),
])
def test_jsonl_errors_name_file_line_and_key(tmp_path, line, message):
    path = tmp_path / "a.jsonl"
    path.write_text(line)
    with pytest.raises(ValueError, match=message):
        read_jsonl(path)


def test_parquet_column_and_errors(tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"content": ["p one", "", "p two"], "n": [1, 2, 3]}), good)
    assert read_parquet(good, "content") == ["p one", "p two"]
    with pytest.raises(ValueError, match=r"good\.parquet: missing column 'text'"):
        read_parquet(good)
    with pytest.raises(ValueError, match=r"column 'n' must hold strings"):
        read_parquet(good, "n")
    nulls = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": ["fine", None]}), nulls)
    with pytest.raises(ValueError, match=r"nulls\.parquet, row 1: column 'text' is null"):
        read_parquet(nulls)
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(ValueError, match=r"bad\.parquet: not a readable Parquet file"):
        read_parquet(bad)


def test_folder_and_list_order(tmp_path):
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "b.txt").write_text("b1\n\nb2")
    _jsonl(root / "sub" / "a.jsonl", [{"text": "a1"}])
    pq.write_table(pa.table({"text": ["c1"]}), root / "c.parquet")
    (root / "README.md").write_text("ignored")
    (root / ".hidden" / "x.txt").write_text("ignored")
    assert [p.name for p in corpus_files(root)] == ["b.txt", "c.parquet", "a.jsonl"]
    assert read_texts(root) == ["b1", "b2", "c1", "a1"]
    assert read_texts([root / "c.parquet", root / "b.txt"]) == ["c1", "b1", "b2"]


def test_path_errors(tmp_path):
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(ValueError, match=r"notes\.md: unknown corpus file extension '\.md'"):
        read_texts(tmp_path / "notes.md")
    with pytest.raises(ValueError, match=r"folder holds no \.txt/\.jsonl/\.parquet file \(found: \['\.md'\]\)"):
        read_texts(tmp_path)
    with pytest.raises(ValueError, match="no such file or folder"):
        read_texts(tmp_path / "missing.txt")
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    with pytest.raises(ValueError, match="empty corpus"):
        read_texts(tmp_path / "blank.txt")
    with pytest.raises(ValueError, match="no corpus paths"):
        read_texts([])


def test_tokenize_appends_one_eos(tok):
    docs = tokenize_texts(TEXTS, tok, CorpusConfig(max_length=None))
    eos = tok.eos_token_id
    for text, ids in zip(TEXTS, docs):
        assert ids.dtype == np.int32
        np.testing.assert_array_equal(ids, tok(text)["input_ids"] + [eos])
    assert tok.unk_token_id not in np.concatenate(docs)
    # a text that already ends with EOS does not get a second one
    again = tokenize_texts([TEXTS[0] + tok.eos_token], tok, CorpusConfig(max_length=None))
    np.testing.assert_array_equal(again[0], docs[0])


def test_truncate_and_split_long_documents(tok):
    text = "one two three four five six seven eight nine ten"
    full = tok(text)["input_ids"]
    eos = tok.eos_token_id
    (cut,) = tokenize_texts([text], tok, CorpusConfig(max_length=4))
    np.testing.assert_array_equal(cut, full[:3] + [eos])
    pieces = tokenize_texts([text], tok, CorpusConfig(max_length=4, overflow="split"))
    assert [len(p) for p in pieces] == [4, 4, 4, 2]  # 10 words: 3 + 3 + 3 + 1, each + EOS
    assert all(p[-1] == eos for p in pieces)
    np.testing.assert_array_equal(np.concatenate([p[:-1] for p in pieces]), full)
    (exact,) = tokenize_texts([text], tok, CorpusConfig(max_length=len(full) + 1))
    assert len(exact) == len(full) + 1


def test_load_corpus_end_to_end(tmp_path, tok):
    _jsonl(tmp_path / "law.jsonl", [{"content": t} for t in TEXTS])
    docs = load_corpus(tmp_path / "law.jsonl", tok, CorpusConfig(text_field="content", max_length=5))
    assert len(docs) == 3 and max(len(d) for d in docs) == 5


def test_split_heldout_is_seeded_disjoint_and_ordered():
    docs = [np.array([i, 0], np.int32) for i in range(20)]
    train, held = split_heldout(docs, 0.2, seed=3)
    train2, held2 = split_heldout(docs, 0.2, seed=3)

    def ids(ds):
        return [int(d[0]) for d in ds]

    assert ids(held) == ids(held2) and ids(train) == ids(train2)
    assert len(held) == 4 and sorted(ids(train) + ids(held)) == list(range(20))
    assert ids(train) == sorted(ids(train)) and ids(held) == sorted(ids(held))
    assert len(split_heldout(docs[:2], 0.01, seed=0)[1]) == 1
    with pytest.raises(ValueError):
        split_heldout(docs, 1.0, seed=0)
    with pytest.raises(ValueError):
        split_heldout(docs[:1], 0.5, seed=0)


def test_config_validation():
    for bad in ({"max_length": 1}, {"overflow": "wrap"}, {"text_field": ""}, {"block": 0}):
        with pytest.raises(ValueError):
            CorpusConfig(**bad)


# ------------------------------------------------------------------------- truncation cuts the text first


_WORDS = ["the", "court", "ruled", "statute", "appeal", "1999", "42", "café", "naïve", "漢字", "🙂", "don't",
          "<|endoftext|>", "e.g.", "...", "--", "(", ")", "\"", "supercalifragilisticexpialidocious", "x" * 300]
_SEPARATORS = [" ", " ", " ", "  ", "\n", "\n\n", "\t", " \n ", ""]


def _normal_texts(rng, n):
    """Texts with spaces, runs of whitespace, punctuation, digits, accents, CJK, emoji, a literal EOS, long words."""
    texts = []
    for _ in range(n):
        pieces = []
        for _ in range(int(rng.integers(0, 700))):
            pieces += [_WORDS[int(rng.integers(len(_WORDS)))], _SEPARATORS[int(rng.integers(len(_SEPARATORS)))]]
        texts.append("".join(pieces))
    return texts


def _bpe_tokenizer(texts, *, bos: bool):
    """A byte-level BPE tokenizer (GPT-2 / Pythia / Qwen style), optionally adding BOS and EOS around each text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<s>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A <|endoftext|>",
                                                           special_tokens=[("<s>", 1), ("<|endoftext|>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<s>")


def _encode_then_cut(tokenizer, text, max_length):
    """The reference: encode the whole text, then keep max_length - 1 tokens + EOS (EOS not doubled)."""
    ids = list(tokenizer(text)["input_ids"])
    eos = tokenizer.eos_token_id
    if ids and ids[-1] == eos:
        ids = ids[:-1]
    return ids + [eos] if len(ids) < max_length else ids[:max_length - 1] + [eos]


@pytest.mark.parametrize("kind", ["word_level", "byte_bpe", "byte_bpe_bos_eos"])
def test_truncation_equals_encode_then_cut_on_normal_text(tmp_path, kind):
    rng = np.random.default_rng(0)
    texts = _normal_texts(rng, 40) + ["", " ", "one", "x" * 20_000 + " tail words here", "🙂" * 3000]
    if kind == "word_level":
        tok = train_word_tokenizer(_normal_texts(rng, 20), tmp_path)
    else:
        tok = _bpe_tokenizer(_normal_texts(rng, 20), bos=kind.endswith("bos_eos"))
    for max_length in (2, 3, 7, 31, 128, 1000):
        got = tokenize_texts(texts, tok, CorpusConfig(max_length=max_length, block=16))
        assert len(got) == len(texts)
        for text, ids in zip(texts, got):
            np.testing.assert_array_equal(ids, _encode_then_cut(tok, text, max_length), err_msg=repr(text[:80]))


@pytest.mark.parametrize("kind", ["word_level", "byte_bpe", "byte_bpe_bos_eos"])
def test_truncation_equals_encode_then_cut_when_the_cut_hits_a_special_token_or_a_word(tmp_path, kind):
    """Texts built so that the first cut (8 characters per token + 64) falls just inside an added token, a
    whitespace run, a contraction or a long word, right where the kept tokens end."""
    rng = np.random.default_rng(1)
    if kind == "word_level":
        tok = train_word_tokenizer(_normal_texts(rng, 20), tmp_path)
    else:
        tok = _bpe_tokenizer(_normal_texts(rng, 20), bos=kind.endswith("bos_eos"))
    tok.add_tokens(["<|a|b|c|d|>"], special_tokens=True)  # cut inside, it falls apart into many pieces
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))

    def words(n, length):
        return " ".join("".join(rng.choice(letters, length)) for _ in range(n))

    for max_length in (2, 3, 5, 9):
        cut = 8 * max_length + 64
        fillers = [words(cut // n + 2, n) for n in range(2, 40, 3)]  # many short or long words
        fillers += [words(n, cut // n) for n in range(1, max_length + 1)]  # as few words as tokens are kept
        texts = [filler[:cut - back] + middle + " and more words after the cut"
                 for filler in fillers for back in range(16)
                 for middle in ("<|a|b|c|d|>", "<|endoftext|>", "<s>", "    ", "don't", "x" * 40, "\n\n")]
        got = tokenize_texts(texts, tok, CorpusConfig(max_length=max_length, block=4096))
        for text, ids in zip(texts, got, strict=True):
            np.testing.assert_array_equal(ids, _encode_then_cut(tok, text, max_length), err_msg=repr(text))


class _Spy:
    """A tokenizer that records the length of every text it is asked to encode."""

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def __call__(self, texts, **kwargs):
        self.lengths += [len(t) for t in texts]
        return self.tokenizer(texts, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_truncating_a_16mb_line_encodes_only_its_head(tok):
    line = " ".join(TEXTS) + " "
    huge = line * (16 * 2**20 // len(line) + 1)
    assert len(huge) >= 16 * 2**20
    spy = _Spy(tok)
    (doc,) = tokenize_texts([huge], spy, CorpusConfig(max_length=256))
    assert max(spy.lengths) <= 8 * 256 + 64  # one prefix of 2,112 characters was enough
    np.testing.assert_array_equal(doc, _encode_then_cut(tok, huge[:100_000], 256))
    split = _Spy(tok)
    tokenize_texts([line * 50], split, CorpusConfig(max_length=256, overflow="split"))
    assert split.lengths == [len(line) * 50]  # splitting keeps every token, so it encodes the whole text
