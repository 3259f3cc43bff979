"""Result records: strict reading (file and key named), atomic writing, provenance; the spread rule."""

import json

import pytest

from cfka_jax.claims.results import Clock, Record, git_commit, load_records, provenance, write_record
from cfka_jax.claims.verdicts import Judgement, gap, not_tested, ordered, paired, spread

TRANSCRIBED = {"docs_file": "docs/x.md", "docs_commit": "abc", "command": "cfka cpt --preset small",
               "date": "2026-12-01", "seeds": [0, 1], "pt_replicates": ["A"]}


def _write(tmp_path, name, obj):
    path = tmp_path / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


def _obj(name="p/r", **over):
    obj = {"schema": "cfka-result/1", "name": name, "origin": "transcribed", "provenance": dict(TRANSCRIBED),
           "regime": {"model": "m"}, "rows": [{"kind": "a", "seed": 0, "acc": 1.0}]}
    obj.update(over)
    return obj


def test_produced_record_round_trip(tmp_path):
    prov = provenance(config={"lr": 0.1}, seeds=[0, 1, 2], pt_replicates=["A", "B"], clock=Clock(),
                      command="cfka cpt --preset smoke")
    rows = [{"kind": "stoc", "pt": "A", "seed": 0, "sfta": 58.2}, {"kind": "random", "pt": "A", "seed": 0, "sfta": 57.0}]
    path = write_record(tmp_path, "cfka/x", rows=rows, regime={"model": "tiny", "params": 10}, provenance=prov)
    assert path == tmp_path / "cfka" / "x.json"
    rec = load_records(tmp_path)["cfka/x"]
    assert rec.origin == "produced" and rec.seeds == 3 and rec.pt_replicates == 2
    assert rec.values("sfta", kind="stoc") == [58.2]
    assert rec.count("kind") == 2
    for key in ("commit", "command", "config", "machine", "date", "wall_s", "cpu_s"):
        assert key in rec.provenance
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically: no temporary file left


@pytest.mark.parametrize("change, message", [
    (lambda o: o["provenance"].pop("docs_commit"), "lacks 'docs_commit'"),
    (lambda o: o["provenance"].update(command=""), "provenance.command"),
    (lambda o: o.update(rows=[]), "'rows' is empty"),
    (lambda o: o.update(origin="typed"), "'origin'"),
    (lambda o: o.update(schema="other/1"), "'schema'"),
    (lambda o: o.update(name="q/r"), "'name'"),
    (lambda o: o.pop("regime"), "'regime'"),
    (lambda o: o["provenance"].update(seeds=3), "provenance.seeds"),
    (lambda o: o["provenance"].update(unit="trial"), "provenance.unit"),
])
def test_a_malformed_record_is_refused_naming_file_and_key(tmp_path, change, message):
    obj = _obj()
    change(obj)
    path = _write(tmp_path, "p/r", obj)
    with pytest.raises(ValueError, match=message) as err:
        load_records(tmp_path)
    assert str(path) in str(err.value)


def test_produced_record_needs_its_provenance(tmp_path):
    with pytest.raises(ValueError, match="lacks 'commit'"):
        write_record(tmp_path, "x", rows=[{"a": 1}], regime={}, provenance={"command": "c"})
    assert not (tmp_path / "x.json").exists()


def test_non_finite_values_are_refused(tmp_path):
    with pytest.raises(ValueError, match="finite"):
        Record("x", "transcribed", TRANSCRIBED, {}, ({"acc": float("nan")},))


def test_record_names_stay_under_results(tmp_path):
    prov = provenance(config={}, seeds=[0], clock=Clock(), command="c")
    for bad in ("../x", "/abs", ""):
        with pytest.raises(ValueError, match="relative path"):
            write_record(tmp_path, bad, rows=[{"a": 1}], regime={}, provenance=prov)


def test_missing_values_name_the_record():
    rec = Record("p/r", "transcribed", TRANSCRIBED, {}, ({"kind": "a", "acc": 1.0},))
    with pytest.raises(KeyError, match="p/r"):
        rec.values("acc", kind="b")


def test_provenance_names_the_commit_of_the_clock_start(monkeypatch):
    """A long study's record names the code it started with; a HEAD that moved meanwhile is kept beside it."""
    import cfka_jax.claims.results as results

    monkeypatch.setattr(results, "git_commit", lambda cwd=None: "a" * 40)
    clock = results.Clock()
    assert results.provenance(config={}, seeds=[0], clock=clock, command="c")["commit"] == "a" * 40
    assert "commit_at_write" not in results.provenance(config={}, seeds=[0], clock=clock, command="c")
    monkeypatch.setattr(results, "git_commit", lambda cwd=None: "b" * 40 + "+dirty")
    prov = results.provenance(config={}, seeds=[0], clock=clock, command="c")
    assert prov["commit"] == "a" * 40 and prov["commit_at_write"] == "b" * 40 + "+dirty"


def test_git_commit_is_a_commit_or_unknown():
    c = git_commit()
    assert c == "unknown" or len(c.split("+")[0]) == 40


# ------------------------------------------------------------------------------------------------- the spread rule

def test_gap_needs_two_runs_a_side_to_be_apart():
    assert gap([1.0, 2.0], [3.0, 4.0]).apart is True
    assert gap([1.0, 3.5], [3.0, 4.0]).apart is False
    assert gap([1.0], [3.0, 4.0]).apart is None


@pytest.mark.parametrize("a, b, verdict", [
    ([5.0, 6.0], [1.0, 2.0], "holds"),
    ([5.0], [1.0, 2.0], "partly"),          # one run: direction only
    ([1.0, 3.0], [2.0, 2.5], "not reproduced"),  # a difference inside the spread is not a difference
    ([1.0, 2.0], [5.0, 6.0], "refuted"),
    ([1.0], [2.0], "not reproduced"),
])
def test_ordered_verdicts(a, b, verdict):
    assert ordered(gap(a, b), claim="a above b").verdict == verdict


def test_ordered_checks_the_papers_size():
    j = ordered(gap([5.0, 6.0], [1.0, 2.0]), claim="a above b", size=30.0)
    assert j.verdict == "partly" and "30.0" in j.reason


def test_paired_differences_remove_what_runs_share():
    rows = [{"kind": "a", "pt": p, "seed": s, "m": base + d} for p, base in (("A", 50.0), ("B", 60.0))
            for s, d in ((0, 2.0), (1, 1.0))]
    rows += [{"kind": "b", "pt": p, "seed": s, "m": base} for p, base in (("A", 50.0), ("B", 60.0)) for s in (0, 1)]
    pooled = gap([r["m"] for r in rows if r["kind"] == "a"], [r["m"] for r in rows if r["kind"] == "b"])
    assert pooled.apart is False  # the between-PT spread hides the difference ...
    p = paired(rows, "m", {"kind": "a"}, {"kind": "b"})
    assert p.apart is True and p.diff == pytest.approx(1.5) and len(p.keys) == 4  # ... pairing shows it
    assert ordered(p, claim="a above b").verdict == "holds"
    with pytest.raises(ValueError, match="matches"):
        paired(rows, "m", {"kind": "a"}, {"kind": "c"})


def test_judgements_are_checked():
    with pytest.raises(ValueError):
        Judgement("true", "x")
    with pytest.raises(ValueError):
        Judgement("holds", "two\nlines")
    with pytest.raises(ValueError):
        spread([float("nan")])
    assert not_tested("sized for an accelerator").verdict == "not tested"
