"""MMLU-style multiple choice (cfka_jax/eval/multiple_choice.py): readers, prompts, letters, and the batched
jitted scorer against an unpadded per-example forward and against a model whose right answers are known."""

import csv
import dataclasses
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flax import nnx

from cfka_jax.data import mmlu
from cfka_jax.eval import multiple_choice as mc
from cfka_jax.data.tokenize import train_word_tokenizer
from cfka_jax.models.qwen import QwenConfig, QwenModel
from tests.tolerances import F32

LAW = [("Who may hear an appeal?", ["a judge", "a clerk", "a juror", "a bailiff"], "A"),
       ("What binds two parties?", ["a statute", "a contract", "a verdict", "a motion"], "B"),
       ("Which court is highest?", ["district", "appeals", "supreme", "county"], "C")]
MATH = [("What is two plus two?", ["three", "four", "five", "six"], "B"),
        ("Which number is prime?", ["four", "six", "seven", "eight"], "C")]
DEV = [("Who writes a statute?", ["the legislature", "a judge", "a juror", "a clerk"], "A")]


def _csv(path, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([[q, *choices, a] for q, choices, a in rows])
    return path


def _questions(rows, subject):
    return [mmlu.MCQuestion(q, tuple(c), "ABCD".index(a), subject) for q, c, a in rows]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmlu")
    (root / "test").mkdir()
    _csv(root / "test" / "professional_law_test.csv", LAW)
    _csv(root / "test" / "elementary_mathematics_test.csv", MATH)
    _csv(root / "professional_law_dev.csv", DEV)
    records = [{"question": q, "choices": c, "answer": i if i % 2 else a, "subject": "professional_law"}
               for i, (q, c, a) in enumerate(LAW)]
    (root / "law.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pq.write_table(pa.table({"question": [q for q, _, _ in MATH], "choices": [c for _, c, _ in MATH],
                             "answer": ["ABCD".index(a) for _, _, a in MATH]}), root / "elementary_mathematics.parquet")
    return root


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    qs = _questions(LAW, "professional_law") + _questions(MATH, "elementary_mathematics")
    prompts = [mc.build_prompt(q, _questions(DEV, q.subject)) for q in qs]
    words = [f"two plus two cue{letter} about law math Answer: {letter}" for letter in "ABCD"]
    return train_word_tokenizer(prompts + words, tmp_path_factory.mktemp("mc-tok"))


def test_csv_jsonl_parquet_and_folder_agree(files):
    law = _questions(LAW, "professional_law")
    math = _questions(MATH, "elementary_mathematics")
    assert mmlu.read_mc(files / "test" / "professional_law_test.csv") == law
    assert mmlu.read_mc(files / "law.jsonl") == law  # answers given as letters and as indices
    assert mmlu.read_mc(files / "elementary_mathematics.parquet") == math  # subject from the file name
    assert mmlu.read_mc(files / "test") == math + law  # sorted file order
    assert mmlu.subject_from_path("x/high_school_biology_dev.csv") == "high_school_biology"


@pytest.mark.parametrize("name, text, message", [
    ("s_test.csv", "q,a,b,c,d,E\n", r"s_test\.csv, row 1: answer 'E' is neither a letter in ABCD"),
    ("s_test.csv", "question,A,B,C,D,answer\n", r"row 1: .*no header row"),
    ("s_test.csv", "q,a,b,c,d,A\nq2,a,B\n", r"row 2: expected question, >= 2 choices"),
    ("s.jsonl", '{"question": "q", "choices": ["a", "b"], "answer": 0}\n{"question": "q"}\n',
     r"s\.jsonl, line 2: missing field 'choices'"),
    ("s.jsonl", '{"question": "q", "choices": ["a", "b"], "answer": 2}\n', r"line 1: answer 2 is neither"),
    ("s.jsonl", '{"question": "q", "choices": ["a", 3], "answer": 0}\n', r"line 1: field 'choices' must be"),
    ("s.jsonl", "{oops\n", r"line 1: invalid JSON"),
    ("s.txt", "q", r"unknown question file extension '\.txt'"),
])
def test_reader_errors_name_file_and_row(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        mmlu.read_mc(tmp_path / name)


def test_prompt_is_the_mmlu_form():
    q = _questions(MATH, "elementary_mathematics")[0]
    assert mc.build_prompt(q) == ("The following are multiple choice questions (with answers) about elementary "
                                  "mathematics.\n\nWhat is two plus two?\nA. three\nB. four\nC. five\nD. six\nAnswer:")
    shot = _questions(MATH, "elementary_mathematics")[1]
    assert mc.build_prompt(q, [shot]).endswith(
        "mathematics.\n\nWhich number is prime?\nA. four\nB. six\nC. seven\nD. eight\nAnswer: C\n\n"
        "What is two plus two?\nA. three\nB. four\nC. five\nD. six\nAnswer:")


def test_letter_ids_are_distinct_or_rejected(tok, tmp_path):
    ids = mc.letter_token_ids(tok, 4)
    assert [tok.convert_ids_to_tokens(int(i)) for i in ids] == [" A", " B", " C", " D"]
    no_letters = train_word_tokenizer(["plain words only"], tmp_path)
    with pytest.raises(ValueError, match="do not map to distinct token ids"):
        mc.letter_token_ids(no_letters, 4)


def test_split_by_subjects_and_predictions_respect_choice_counts(files):
    qs = mmlu.read_mc(files / "test")
    sets = mmlu.split_by_subjects(qs, ["professional_law"])
    assert [q.subject for q in sets["Domain"]] == ["professional_law"] * 3 and len(sets["Original"]) == 2
    with pytest.raises(ValueError, match="match no question"):
        mmlu.split_by_subjects(qs, ["profesional_law"])
    logits = np.array([[0.0, 1.0, 9.0], [0.0, 1.0, 9.0]])
    np.testing.assert_array_equal(mc.predictions(logits, np.array([2, 3])), [1, 2])


def _tiny_qwen(vocab: int) -> QwenModel:
    cfg = QwenConfig(model_type="qwen2", vocab_size=vocab, hidden_size=24, intermediate_size=29, num_hidden_layers=1,
                     num_attention_heads=6, num_key_value_heads=2, head_dim=4, initializer_range=0.2)
    return QwenModel(cfg, rngs=nnx.Rngs(0))


def test_batched_scorer_matches_unpadded_per_example_forward(files, tok):
    qs = mmlu.read_mc(files / "test")
    dev = mmlu.read_mc(files / "professional_law_dev.csv")
    model = _tiny_qwen(len(tok))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    cfg = mc.MCConfig(shots=1, batch_size=2, max_length=512)  # 5 questions: the last batch is padded
    enc = mc.encode_questions(qs, tok, cfg, dev)
    assert enc.shots.tolist() == [0, 0, 1, 1, 1] and len({len(t) for t in enc.tokens}) > 2
    letters = mc.letter_token_ids(tok, 4)
    score = mc.make_choice_scorer(graphdef, rest, letters)
    got = mc.choice_logits(score, params, enc, batch_size=cfg.batch_size, pad_id=tok.pad_token_id, max_length=512)
    last_logits = nnx.jit(lambda m, tokens_1S: m(tokens_1S).logits[0, -1])  # no mask, no padding, one row
    want = np.stack([np.asarray(last_logits(model, jnp.asarray(t)[None]))[letters] for t in enc.tokens])
    np.testing.assert_allclose(got, want, atol=F32.model_atol, rtol=0)
    sets = {"Math": mc.encode_questions(qs[:2], tok, cfg, dev), "Law": mc.encode_questions(qs[2:], tok, cfg, dev)}
    report = mc.evaluate_sets(score, params, sets, cfg, pad_id=tok.pad_token_id)
    correct = want.argmax(1) == enc.answers
    assert report["All/acc"] == pytest.approx(correct.mean()) and report["All/n"] == 5
    assert report["Law/acc"] == pytest.approx(correct[2:].mean()) and report["Law/n"] == 3
    assert report["Math/acc/elementary_mathematics"] == pytest.approx(correct[:2].mean())


class CueModel(nnx.Module):
    """A causal bag-of-words LM: logits[b, s] = Σ_{t ≤ s} W[tokens[b, t]]; W is set by hand."""

    def __init__(self, w_VV):
        self.w = nnx.Param(jnp.asarray(w_VV, jnp.float32))

    def __call__(self, tokens_BS, *, attention_mask_BT=None, positions_BS=None, segment_ids_BS=None):
        return types.SimpleNamespace(logits=jnp.cumsum(self.w[...][tokens_BS], axis=1))


def test_known_answers_give_the_known_accuracy(tok):
    """Each question carries a cue word pointing at one letter; the padding token points hard at "A", so reading
    any position but the row's last prompt token would change the answers."""
    letters = mc.letter_token_ids(tok, 4)
    w = np.zeros((len(tok), len(tok)), np.float32)
    for c, letter in enumerate("ABCD"):
        w[tok.convert_tokens_to_ids(f" cue{letter}"), letters[c]] = 5.0
    w[tok.pad_token_id, letters[0]] = 100.0
    graphdef, params, rest = nnx.split(CueModel(w), nnx.Param, ...)
    choices = ("three", "four", "five", "six")

    def cue(answer, pointed, subject):
        return mmlu.MCQuestion(f"two plus two cue{pointed}", choices, answer, subject)

    law = [cue(1, "B", "law"), cue(2, "C", "law"), cue(3, "A", "law")]  # the cue is right on 2 of 3
    math = [cue(0, "D", "math"), cue(3, "D", "math"), cue(2, "B", "math"), cue(2, "B", "math")]  # 1 of 4
    evaluate = mc.mc_evaluator(graphdef, rest, {"Original": math, "Domain": law}, tok, mc.MCConfig(batch_size=3))
    for q in law + math:
        assert tok.unk_token_id not in tok(mc.build_prompt(q))["input_ids"]
    report = jax.block_until_ready(evaluate(params, 0))
    assert report["Domain/acc"] == pytest.approx(2 / 3) and report["Original/acc"] == pytest.approx(1 / 4)
    assert report["All/acc"] == pytest.approx(3 / 7) and report["Domain/acc/law"] == pytest.approx(2 / 3)
    w[tok.pad_token_id] = 0.0  # a right answer for every question once the cues all point at the answers
    truth = [dataclasses.replace(q, answer="ABCD".index(q.question[-1])) for q in law + math]
    graphdef, params, rest = nnx.split(CueModel(w), nnx.Param, ...)
    assert mc.mc_evaluator(graphdef, rest, {"T": truth}, tok)(params, 0)["T/acc"] == 1.0

