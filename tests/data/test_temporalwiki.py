"""TemporalWiki loaders (diffset filter, probe and TA records naming file and line) and the synthetic periods."""

import json

import pytest

from cfka_jax.data import temporalwiki as tw
from cfka_jax.data.ckl_world import build_synthetic_world
from cfka_jax.data.lama_ckl import SyntheticCKLConfig


def test_diffset_filter_and_reader(tmp_path):
    long_text = "  The city council approved a new budget for the coming fiscal year.  "
    rows = ["text,other", f'"{long_text}",x', "short,x", '"' + "1234567890 " * 6 + '",x',
            '"multi\nline ' + "a" * 60 + '",y']
    path = tmp_path / "wikipedia_0910_gpt2.csv"
    path.write_text("\n".join(rows) + "\n")
    out = tw.read_diffset_csv(path)
    assert out == [long_text.strip(), "multi\nline " + "a" * 60]
    assert tw.keep_diffset_text("x" * 49) is None and tw.keep_diffset_text("1" * 45 + "a" * 10) is None
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="empty.csv: empty file"):
        tw.read_diffset_csv(tmp_path / "empty.csv")


def test_probe_and_ta_records(tmp_path):
    good = {"subject": "Ann", "relation": "employer", "object": "Apex"}
    (tmp_path / "p.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "object": ""}) + "\n")
    with pytest.raises(ValueError, match=r"p.jsonl, line 2: field 'object' must be a non-empty string"):
        tw.read_probes(tmp_path / "p.jsonl")
    (tmp_path / "q.jsonl").write_text(json.dumps(good) + "\n")
    probe = tw.read_probes(tmp_path / "q.jsonl")[0]
    assert probe.text() == "Guess the object. \n  subject is Ann , relation is employer , object is Apex"
    ta = {"text": "Ann now works for Apex.", **good}
    (tmp_path / "t.jsonl").write_text(json.dumps(ta) + "\n" + json.dumps({**ta, "text": "nothing"}) + "\n")
    with pytest.raises(ValueError, match=r"t.jsonl, line 2: the object 'Apex' does not occur"):
        tw.read_ta_rows(tmp_path / "t.jsonl")
    (tmp_path / "u.jsonl").write_text(json.dumps({"subject": "Ann", "relation": "employer"}) + "\n")
    with pytest.raises(ValueError, match=r"u.jsonl, line 1: missing field 'object'"):
        tw.read_probes(tmp_path / "u.jsonl")


def test_synthetic_periods():
    cfg = SyntheticCKLConfig(pt_changed=2, to_learn_pool=4, ta_pool=2, twiki_pool=9, other=4, to_learn=2,
                             not_to_forget=2, bios_per_person=1, distractors=1, name_pool=40)
    periods = tw.synthetic_periods(build_synthetic_world(cfg), unchanged_per_period=7)
    assert [p.name for p in periods] == ["period1", "period2", "period3"]
    for p in periods:
        assert len(p.docs) == len(p.changed) == len(p.objects) == 3 and len(p.unchanged) == 7
        assert all(o in d for o, d in zip(p.objects, p.docs))
        assert not {c.subject for c in p.changed} & {u.subject for u in p.unchanged}
