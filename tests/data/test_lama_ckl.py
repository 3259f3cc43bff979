"""LAMA-CKL records: the reader rejects bad records naming file and line; the synthetic world and selection."""

import dataclasses
import json

import pytest

from cfka_jax.data import lama_ckl as lc
from cfka_jax.data.ckl_world import MIN_EVIDENCE_CHARS, build_synthetic_world

SMALL = lc.SyntheticCKLConfig(pt_changed=3, to_learn_pool=6, ta_pool=4, twiki_pool=6, other=3, to_learn=4,
                              not_to_forget=4, bios_per_person=1, distractors=2, name_pool=40,
                              change_relations=("employer", "residence"))


def _record(**over):
    r = lc.make_record("employer", "u1", "Ann B. Cole", "Apex Dynamics",
                       "Ann B. Cole was born in Mesa, AZ. " * 5 + "Ann B. Cole now works for Apex Dynamics.",
                       invariant=False, scores={"descriptive": {"m": 0.0}, "schematic": {"m": 0.0}}).as_dict()
    r.update(over)
    return r


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_round_trip(tmp_path):
    rows = [_record(), _record(uuid="u2")]
    _write(tmp_path / "v.jsonl", rows)
    recs = lc.read_lama_ckl(tmp_path / "v.jsonl")
    assert [r.uuid for r in recs] == ["u1", "u2"] and recs[0].as_dict() == rows[0]
    assert recs[0].task_schematic == ("Guess the object. \n  subject is Ann B. Cole , relation is employer , "
                                      "object is Apex Dynamics")
    assert recs[0].task_descriptive == "Ann B. Cole works for Apex Dynamics ."
    lc.write_lama_ckl(tmp_path / "w.jsonl", recs)
    assert lc.read_lama_ckl(tmp_path / "w.jsonl") == recs


@pytest.mark.parametrize("bad, message", [
    ({"uuid": 3}, "field 'uuid' must be a string"),
    ({"invariant": "false"}, "'invariant' must be true or false"),
    ({"evidence_length": 1.5}, "'evidence_length' must be an integer"),
    ({"position": True}, "'position' must be a finite number"),
    ({"object": "Globex"}, "does not occur in 'task_descriptive'"),
    ({"scores": {"descriptive": {"m": 2.0}, "schematic": {}}}, r"scores.descriptive.m"),
    ({"scores": {"descriptive": {}}}, "scores.schematic"),
    ({"subject": "  "}, "field 'subject' is empty"),
])
def test_bad_records_are_rejected_naming_file_and_line(tmp_path, bad, message):
    path = tmp_path / "variant.jsonl"
    _write(path, [_record(), "", _record(**{"uuid": "u2", **bad})])
    with pytest.raises(ValueError, match=rf"variant.jsonl, line 3: .*{message}"):
        lc.read_lama_ckl(path)


def test_missing_fields_invalid_json_and_repeated_uuid(tmp_path):
    r = _record()
    del r["scores"], r["relation_code"]
    _write(tmp_path / "a.jsonl", [r])
    with pytest.raises(ValueError, match=r"a.jsonl, line 1: missing field\(s\) \['relation_code', 'scores'\]"):
        lc.read_lama_ckl(tmp_path / "a.jsonl")
    _write(tmp_path / "b.jsonl", [_record(), "{not json"])
    with pytest.raises(ValueError, match="b.jsonl, line 2: invalid JSON"):
        lc.read_lama_ckl(tmp_path / "b.jsonl")
    _write(tmp_path / "c.jsonl", [_record(), _record()])
    with pytest.raises(ValueError, match="c.jsonl, line 2: uuid 'u1' repeats .*c.jsonl, line 1"):
        lc.read_lama_ckl(tmp_path / "c.jsonl")


def test_synthetic_world_is_deterministic_and_well_formed():
    w1, w2 = build_synthetic_world(SMALL), build_synthetic_world(SMALL)
    assert w1.pt_texts == w2.pt_texts and w1.all_records() == w2.all_records()
    assert len(w1.to_learn_candidates) == 6 and len(w1.ta_candidates) == 8 and len(w1.nf_candidates) == 30
    assert [len(p) for p in w1.twiki_changes] == [2, 2, 2]
    for r in w1.all_records():
        assert r.evidence_length == len(r.evidence) >= MIN_EVIDENCE_CHARS
        assert r.evidence.count(r.object) == 1 and f" {r.object}" in r.evidence
        assert r.object in r.task_descriptive and r.object in r.task_schematic
        assert r.masked_evidence.count("[MASK]") == 1
    people = lambda rows: {r.subject for r in rows}  # noqa: E731
    tl, ta, nf = people(w1.to_learn_candidates), people(w1.ta_candidates), people(w1.nf_candidates)
    tw = {r.subject for p in w1.twiki_changes for r in p}
    assert not (tl & ta) and not (tl & nf) and not (tl & tw) and not (ta & tw) and not (nf & tw)
    # θ0 never reads a changed fact (subject with its new object) but reads every invariant fact verbatim
    assert not any(r.subject in t and r.object in t for r in w1.to_learn_candidates for t in w1.pt_texts)
    assert all(r.task_descriptive in w1.pt_texts for r in w1.nf_candidates)


def test_select_applies_the_score_rules():
    w = build_synthetic_world(SMALL)
    scores = {r.uuid: {"descriptive": 0.0, "schematic": 0.0} for r in w.all_records()}
    for r in w.nf_candidates[:5]:
        scores[r.uuid]["descriptive"] = 1.0
    scores[w.to_learn_candidates[0].uuid]["schematic"] = 0.5  # partially known: not TO-LEARN
    scores[w.ta_candidates[0].uuid]["descriptive"] = 0.5  # not < 0.5: not a TA pair
    sets = lc.select_ckl(w, scores)
    assert w.to_learn_candidates[0].uuid not in {r.uuid for r in sets.to_learn} and len(sets.to_learn) == 4
    assert {r.uuid for r in sets.not_to_forget} <= {r.uuid for r in w.nf_candidates[:5]}
    assert len(sets.ta_train) == 7 and sets.stats["nf_qualified"] == 5
    assert sets.to_learn[0].scores == {"descriptive": {"theta0": 0.0}, "schematic": {"theta0": 0.0}}
    del scores[w.ta_candidates[1].uuid]
    with pytest.raises(ValueError, match="no score"):
        lc.select_ckl(w, scores)


def test_select_refuses_too_few_unless_not_strict():
    w = build_synthetic_world(SMALL)
    scores = {r.uuid: {"descriptive": 0.0, "schematic": 0.0} for r in w.all_records()}
    with pytest.raises(ValueError, match="NOT-TO-FORGET"):
        lc.select_ckl(w, scores)
    sets = lc.select_ckl(w, scores, strict=False)
    assert len(sets.not_to_forget) == 4 and sets.stats["nf_qualified"] == 0 and not sets.stats["strict"]


def test_config_checks():
    with pytest.raises(ValueError, match="exceeds"):
        dataclasses.replace(SMALL, to_learn=99)
    with pytest.raises(ValueError, match=">= 0"):
        dataclasses.replace(SMALL, other=-1)
    with pytest.raises(ValueError, match="change_relations"):
        dataclasses.replace(SMALL, change_relations=("birthplace",))
