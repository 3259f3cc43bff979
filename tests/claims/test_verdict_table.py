"""The verdict table: derived from the records, generated blocks in the docs, ``cfka claims --check``."""

import json
import pathlib
import shutil

import pytest

from cfka_jax.claims import table
from cfka_jax.claims.command import Config, check, command
from cfka_jax.claims.papers import PaperClaim, paper_claims
from cfka_jax.claims.results import Record, load_records
from cfka_jax.claims.verdicts import Judgement, VERDICTS
from cfka_jax.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLAIM = "cfka.stoc-vs-random"
RECORD = "cfka/stoc_names600"


@pytest.fixture
def checkout(tmp_path):
    """A copy of the records and a README with two generated blocks, filled from the records."""
    shutil.copytree(ROOT / "results", tmp_path / "results")
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# x\n\n<!-- claims:summary -->\n<!-- /claims -->\n\ntext\n")
    (tmp_path / "docs" / "page.md").write_text(f"intro\n<!-- claims:claim {CLAIM} -->\nstale\n<!-- /claims -->\nend\n")
    assert command(Config(results=str(tmp_path / "results"), docs=str(tmp_path), write_docs=True)) == 0
    return tmp_path


def _cfg(root, **kw):
    return Config(results=str(root / "results"), docs=str(root), **kw)


def test_every_registered_claim_is_judged_from_the_committed_records():
    records = load_records(ROOT / "results")
    rows = table.derive(records)
    assert {r.claim.id for r in rows} >= {c.id for c in paper_claims()}
    for r in rows:
        assert r.judgement.verdict in VERDICTS
        assert (r.record == "none") == (not r.claim.records)
        if r.judgement.verdict != "not tested":
            assert r.claim.records, r.claim.id


def test_no_verdict_rests_on_one_seed_unless_it_names_the_accelerator_run():
    """A claim on one seed names the command that adds seeds on an accelerator; a claim whose records hold three
    seeds carries no stale accelerator mark."""
    rows = table.derive(load_records(ROOT / "results"))
    one = sorted(r.claim.id for r in rows if r.claim.kind == "empirical" and r.seeds == 1 and not r.claim.accelerator)
    assert one == []
    stale = sorted(r.claim.id for r in rows if r.claim.accelerator and r.seeds >= 3)
    assert stale == []


def _rec(name, seeds, unit=None):
    prov = {"docs_file": "d.md", "docs_commit": "0" * 40, "command": "c", "date": "2026-12-07",
            "seeds": list(range(seeds)), "pt_replicates": []}
    if unit:
        prov["unit"] = unit
    return Record(name, "transcribed", prov, {}, ({"kind": "a", "v": 1.0},))


@pytest.mark.parametrize("units, seeds", [((None, "pt-model"), 3), ((None, "timing"), 3), ((None, None), 1),
                                          (("timing",), 3)])
def test_pt_model_and_timing_records_do_not_count_as_seeds(units, seeds):
    """A claim's seed count is its fewest-seed record of seeded runs; a record of PT models or of cost timings
    counts only when the claim reads nothing else."""
    recs = {f"p/r{i}": _rec(f"p/r{i}", 3 if i == 0 else 1, u) for i, u in enumerate(units)}
    claim = PaperClaim(id="cfka.x", paper="cfka", section="§1", statement="s", paper_value="", paper_regime="",
                       command="c", records=tuple(recs), rule=lambda r: Judgement("holds", "r", "o"))
    assert table.judge(claim, recs).seeds == seeds


def test_a_context_record_reaches_the_rule_but_not_the_seed_count():
    """A record shown beside a verdict (``context``) is handed to the rule but counts toward neither the claim's
    seeds nor its origin; a record cannot be both; a missing context record is named."""
    recs = {"p/main": _rec("p/main", 3), "p/side": _rec("p/side", 1)}
    seen = {}

    def rule(r):
        seen.update(r)
        return Judgement("holds", "r", "o")

    claim = PaperClaim(id="cfka.x", paper="cfka", section="§1", statement="s", paper_value="", paper_regime="",
                       command="c", records=("p/main",), context=("p/side",), rule=rule)
    row = table.judge(claim, recs)
    assert sorted(seen) == ["p/main", "p/side"] and row.seeds == 3
    assert "p/side" not in table.unread(recs, [row])
    with pytest.raises(table.ClaimsError, match="results/p/side.json"):
        table.judge(claim, {"p/main": recs["p/main"]})
    with pytest.raises(ValueError, match="either read for the verdict or shown as context"):
        PaperClaim(id="cfka.y", paper="cfka", section="§1", statement="s", paper_value="", paper_regime="",
                   command="c", records=("p/main",), context=("p/main",), rule=rule)


def _runs_record():
    prov = {"docs_file": "d.md", "docs_commit": "0" * 40, "command": "make it", "date": "2026-12-07",
            "seeds": [0, 1], "pt_replicates": ["s0", "s1"]}
    rows = [{"kind": k, "pt": pt, "seed": seed, "acc": base + 10 * (pt == "s1") + seed, "lam": lam}
            for k, base, lam in (("a", 10.0, None), ("b", 50.0, 1e6)) for pt in ("s0", "s1") for seed in (0, 1)]
    return Record("p/runs", "transcribed", prov, {}, tuple(rows))


def test_a_record_block_summarises_runs_per_factor_with_each_pt_models_mean():
    text = table.render("record p/runs kind,lam acc", [], "page.md", {"p/runs": _runs_record()})
    lines = text.splitlines()
    assert lines[0] == "| kind, lam | runs (PT × seeds) | acc |"
    assert lines[2] == "| a, – | 4 (2 × 2) | 15.5 (10.0–21.0); PT 10.5 / 20.5 |"
    assert lines[3] == "| b, 1e+06 | 4 (2 × 2) | 55.5 (50.0–61.0); PT 50.5 / 60.5 |"
    assert "`make it`" in lines[-1] and "results/p/runs.json" in lines[-1]
    one = table.render("record p/runs kind acc pt=s1 seed=0", [], "page.md", {"p/runs": _runs_record()})
    assert "| a | 1 (1 × 1) | 20.0 |" in one
    both = table.render("record p/runs kind acc kind=a|b seed=0", [], "page.md", {"p/runs": _runs_record()})
    assert "| a | 2 (2 × 1) |" in both and "| b | 2 (2 × 1) |" in both
    rec = _runs_record()
    frac = Record(rec.name, rec.origin, rec.provenance, {}, tuple(dict(r, acc=r["acc"] / 100) for r in rec.rows))
    assert "| a | 4 (2 × 2) | 0.155 (0.100–0.210); PT 0.105 / 0.205 |" in table.render(
        "record p/runs kind acc", [], "page.md", {"p/runs": frac})


@pytest.mark.parametrize("spec, message", [("record p/none kind acc", "names no record"),
                                           ("record p/runs kind", "expected record NAME"),
                                           ("record p/runs kind nope", "no selected row has 'nope'"),
                                           ("record p/runs kind acc pt=s9", "no row where")])
def test_a_bad_record_block_is_named(spec, message):
    with pytest.raises(table.ClaimsError, match=message) as err:
        table.render(spec, [], "docs/page.md, line 3", {"p/runs": _runs_record()})
    assert "docs/page.md, line 3" in str(err.value)


def test_the_checkout_passes_its_own_check():
    assert check(Config(results=str(ROOT / "results"), docs=str(ROOT))) == []


def test_blocks_are_filled_and_the_text_around_them_kept(checkout):
    page = (checkout / "docs" / "page.md").read_text()
    assert page.startswith("intro\n<!-- claims:claim ") and page.endswith("<!-- /claims -->\nend\n")
    assert "stale" not in page and f"**{CLAIM}**" in page
    assert "| paper | kind |" in (checkout / "README.md").read_text()
    assert check(_cfg(checkout)) == []


def test_a_record_edited_by_hand_fails_the_check(checkout):
    path = checkout / "results" / f"{RECORD}.json"
    obj = json.loads(path.read_text())
    row = next(r for r in obj["rows"] if r["kind"] == "random")
    row["original_sfta"] += 10.0  # now Random beats STOC on this run: the verdict and the table change
    path.write_text(json.dumps(obj))
    problems = check(_cfg(checkout))
    assert problems and any("page.md, line 2" in p and CLAIM in p for p in problems), problems
    assert main(["claims", "--check", "--results", str(checkout / "results"), "--docs", str(checkout)]) == 1


def test_a_missing_record_names_the_claim(checkout):
    (checkout / "results" / f"{RECORD}.json").unlink()
    problems = check(_cfg(checkout))
    assert any(CLAIM in p and f"results/{RECORD}.json" in p for p in problems), problems


def test_a_record_without_provenance_fails(checkout):
    path = checkout / "results" / f"{RECORD}.json"
    obj = json.loads(path.read_text())
    del obj["provenance"]["command"]
    path.write_text(json.dumps(obj))
    problems = check(_cfg(checkout))
    assert any(str(path) in p and "command" in p for p in problems), problems


def test_an_unknown_block_is_named(checkout):
    (checkout / "docs" / "bad.md").write_text("<!-- claims:claim cfka.no-such-claim -->\n<!-- /claims -->\n")
    problems = check(_cfg(checkout))
    assert any("bad.md, line 1" in p and "cfka.no-such-claim" in p for p in problems), problems


def test_a_verdict_needs_a_record():
    claim = PaperClaim(id="cfka.x", paper="cfka", section="§1", statement="s", paper_value="", paper_regime="",
                       command="", records=(), rule=lambda recs: Judgement("holds", "because"))
    with pytest.raises(table.ClaimsError, match="rests on no record"):
        table.judge(claim, {})


def test_a_rule_that_fails_on_its_record_is_named():
    rec = Record("r", "transcribed", {"docs_file": "d", "docs_commit": "c", "command": "c", "date": "d",
                                      "seeds": [0], "pt_replicates": []}, {}, ({"a": 1.0},))
    claim = PaperClaim(id="cfka.y", paper="cfka", section="§1", statement="s", paper_value="", paper_regime="",
                       command="c", records=("r",), rule=lambda recs: recs["r"].values("missing"))
    with pytest.raises(table.ClaimsError, match="cfka.y"):
        table.judge(claim, {"r": rec})


def test_json_lists_every_claim_with_the_keys_tools_read(capsys):
    assert main(["claims", "--json", "--results", str(ROOT / "results")]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(set(table.JSON_KEYS) <= set(r) for r in rows)
    for r in rows:
        assert r["paper"] in ("cfka", "taalm", "token-force") and r["kind"] in ("lemma", "empirical")
        assert r["record"] in ("produced", "transcribed", "none")
    assert any(r["kind"] == "lemma" for r in rows) and any(r["kind"] == "empirical" for r in rows)


def test_out_writes_three_formats(tmp_path):
    assert main(["claims", "--paper", "cfka", "--results", str(ROOT / "results"), "--out", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"claims.md", "claims.json", "claims.tex"}
    assert "\\begin{longtable}" in (tmp_path / "claims.tex").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--paper", "nature"], "--paper"),
    (["--check", "--write-docs"], "--check and --write-docs"),
])
def test_bad_options_exit_2(argv, message, capsys):
    try:
        code = main(["claims", *argv])
    except SystemExit as exit_:  # the generated parser exits itself
        code = exit_.code
    assert code == 2
    assert message in capsys.readouterr().err
