"""KnowEdit loader: kinds, answers, malformed input, augmentation alignment, tokenisation."""

import json

import numpy as np
import pytest

from cfka_jax.data import knowedit as ke
from cfka_jax.data.tokenize import train_word_tokenizer

ZSRE = [
    {"subject": "Watts", "prompt": "Which university did Watts attend?", "target_new": "Yale",
     "ground_truth": ["Michigan", "UMich"], "rephrase_prompt": "Where did Watts study?",
     "locality": {"Relation_Specificity": [{"prompt": "The capital of France is", "ground_truth": ["Paris"]}]}},
    {"subject": "Ann", "prompt": "Who employs Ann?", "target_new": "IBM", "ground_truth": ["Acme"],
     "locality": {"Relation_Specificity": [{"prompt": "The sky is", "ground_truth": "blue"}]}},
]
WIKI_BIO = [
    {"text": "Anna Smith was a Dutch painter", "labels": "born in Delft", "concept": "Anna Smith",
     "locality": {"Relation_Specificity": [{"prompt": "Delft lies in", "ground_truth": ["Holland"]}]}},
]
WIKI_RECENT = [
    {"subject": "Club", "prompt": "The coach of Club is", "target_new": "Bob Lee", "rephrase": "Club is coached by",
     "locality": {"Relation_Specificity": [{"prompt": "The coach of Town is", "ground_truth": [["Tim", "Timmy"]]}],
                  "Forgetfulness": [{"prompt": "Club plays in", "ground_truth": ["red"]}]}},
]


def _write(tmp_path, name, obj) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(obj, indent=1))
    return str(path)


def _words(*datasets):
    texts = []

    def visit(x):
        if isinstance(x, str):
            texts.append(x)
            texts.append(" " + x)
        elif isinstance(x, dict):
            [visit(v) for v in x.values()]
        elif isinstance(x, list):
            [visit(v) for v in x]

    visit(list(datasets))
    return texts


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return train_word_tokenizer(_words(ZSRE, WIKI_BIO, WIKI_RECENT), tmp_path_factory.mktemp("ketok"))


def test_zsre_facts_and_detection(tmp_path):
    facts = ke.load_knowedit(_write(tmp_path, "test.json", ZSRE))
    assert facts.kind == "zsre"
    assert [f.prompt for f in facts.continual] == [ZSRE[0]["prompt"], ZSRE[0]["rephrase_prompt"], ZSRE[1]["prompt"]]
    assert facts.continual[0].truths == ("Michigan", "UMich")  # ground_truth, not target_new
    assert [f.record for f in facts.continual] == [0, 0, 1]
    assert [(f.prompt, f.truths) for f in facts.original] == [("The capital of France is", ("Paris",)),
                                                              ("The sky is", ("blue",))]


def test_wiki_bio_string_answers_are_wrapped_or_iterated(tmp_path):
    path = _write(tmp_path, "test.json", WIKI_BIO)
    facts = ke.load_knowedit(path)
    assert facts.kind == "wiki_bio" and facts.continual[0].truths == ("born in Delft",)
    assert facts.continual[0].prompt == WIKI_BIO[0]["text"] and facts.original[0].truths == ("Holland",)
    raw = ke.load_knowedit(path, wrap_strings=False)  # the reference bug: one answer per character
    assert raw.continual[0].truths == tuple("born in Delft")


def test_wiki_recent_reads_every_locality_category_first_answer(tmp_path):
    path = _write(tmp_path, "test.json", WIKI_RECENT)
    facts = ke.load_knowedit(path)
    assert facts.kind == "wiki_recent"
    assert [(f.prompt, f.truths) for f in facts.continual] == [("The coach of Club is", ("Bob Lee",)),
                                                               ("Club is coached by", ("Bob Lee",))]
    assert [f.truths for f in facts.original] == [("Tim", "Timmy"), ("red",)]
    assert ke.load_knowedit(path, wrap_strings=False).original[1].truths == ("r", "e", "d")


def test_explicit_kind_overrides_detection(tmp_path):
    # a zsre-like record read as wiki_recent: answers come from target_new
    facts = ke.load_knowedit(_write(tmp_path, "test.json", ZSRE[:1]), kind="wiki_recent")
    assert facts.continual[0].truths == ("Yale",) and len(facts.continual) == 1


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d[1].pop("prompt"), r"test\.json record 1: missing key 'prompt'"),
    (lambda d: d[1].update(ground_truth=3), r"record 1: key 'ground_truth' has type int"),
    (lambda d: d[1].update(ground_truth=["a", 1]), r"record 1 key 'ground_truth': answers must be"),
    (lambda d: d[0]["locality"].pop("Relation_Specificity"), r"record 0 key 'locality': missing key 'Relation_Spec"),
    (lambda d: d[0]["locality"]["Relation_Specificity"][0].pop("ground_truth"),
     r"record 0 locality\.Relation_Specificity\[0\]: missing key 'ground_truth'"),
    (lambda d: d.append("oops"), r"record 2: expected a JSON object"),
])
def test_malformed_records_name_file_record_and_key(tmp_path, mutate, match):
    data = json.loads(json.dumps(ZSRE))
    mutate(data)
    with pytest.raises(ValueError, match=match):
        ke.load_knowedit(_write(tmp_path, "test.json", data))


def test_bad_json_and_unknown_kind(tmp_path):
    path = tmp_path / "test.json"
    path.write_text('[\n  {"prompt": "a",\n   "ground_truth": ["b"] oops}\n]')
    with pytest.raises(ValueError, match=r"test\.json, line 3: invalid JSON"):
        ke.load_knowedit(path)
    with pytest.raises(ValueError, match="cannot tell the KnowEdit dataset"):
        ke.load_knowedit(_write(tmp_path, "x.json", [{"question": "q"}]))
    with pytest.raises(ValueError, match="non-empty JSON list"):
        ke.load_knowedit(_write(tmp_path, "y.json", {"a": 1}))
    with pytest.raises(ValueError):
        ke.KnowEditConfig(aug_align="per_query")


def test_test_sequences_are_prompt_answer_eos(tmp_path, tok):
    facts = ke.load_knowedit(_write(tmp_path, "test.json", ZSRE))
    test = ke.encode_test(facts.continual, tok)
    assert len(test.docs) == 2 + 2 + 1  # two truths for the prompt and its rephrase, one for record 1
    doc, idx = test.docs[1], int(test.idx[1])
    prompt_ids = tok(ZSRE[0]["prompt"])["input_ids"]
    assert idx == len(prompt_ids) and doc.dtype == np.int32
    assert doc.tolist() == prompt_ids + tok(" UMich")["input_ids"] + [tok.eos_token_id]
    assert tok.decode(doc[idx:-1]) == " UMich"
    q = ke.question_docs(facts.continual, tok)
    assert len(q) == 3 and q[0].tolist() == prompt_ids + [tok.eos_token_id]


def test_augmentation_alignment_per_truth_and_code(tmp_path):
    facts = ke.load_knowedit(_write(tmp_path, "test.json", ZSRE)).continual  # 3 facts, 5 (fact, truth) queries
    entries = [["r0a", "r0b"], {"rewrites": ["r1"], "truth": "UMich"}, ["r2"], ["r3"], {"rewrites": ["r4"]}]
    aug = _write(tmp_path, "aug.json", entries)
    assert ke.augmented_pairs(aug, facts) == [("r0a", "Michigan"), ("r0b", "Michigan"), ("r1", "UMich"),
                                               ("r2", "Michigan"), ("r3", "UMich"), ("r4", "Acme")]
    # the reference: fact i takes entry i and pairs its rewrites with every truth of fact i
    code = ke.augmented_pairs(aug, facts, align="per_example")
    assert code == [("r0a", "Michigan"), ("r0a", "UMich"), ("r0b", "Michigan"), ("r0b", "UMich"),
                    ("r1", "Michigan"), ("r1", "UMich"), ("r2", "Acme")]
    with pytest.raises(ValueError, match="expected a list of 5 entries"):
        ke.augmented_pairs(_write(tmp_path, "short.json", entries[:3]), facts)
    bad = entries[:1] + [{"rewrites": ["r1"], "truth": "Michigan"}] + entries[2:]
    with pytest.raises(ValueError, match=r"aug\.json entry 1: truth 'Michigan' does not match"):
        ke.augmented_pairs(_write(tmp_path, "aug.json", bad), facts)


def test_training_without_augmentation_equals_continual_test(tmp_path, tok):
    facts = ke.load_knowedit(_write(tmp_path, "test.json", WIKI_RECENT))
    docs, _ = ke.encode_pairs(ke.training_pairs(facts.continual), tok)
    test = ke.encode_test(facts.continual, tok)
    assert [d.tolist() for d in docs] == [d.tolist() for d in test.docs]


