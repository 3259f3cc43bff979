"""``cfka di-walk`` at a tiny size: every kind of step runs, the record is written and loads back, steps resume."""

import json

import pytest

from cfka_jax.claims.results import load_records
from cfka_jax.experiments import di_walk


def _biography_record(root):
    """A stand-in for the di-attention record step 6 reads (the real one is transcribed from the docs)."""
    base = {"attention": "softmax", "world": "small", "measure": "context", "di": "centred/cooccur"}
    rows = [base | {"ports": "trained", "pearson": 0.5, "pearson_lo": 0.45, "pearson_hi": 0.55, "spearman": 0.35,
                    "spearman_lo": 0.29, "spearman_hi": 0.4, "per_seed_pearson_mean": 0.47,
                    "per_seed_pearson_sd": 0.15},
            base | {"ports": "untrained", "pearson": 0.65, "pearson_lo": 0.6, "pearson_hi": 0.69,
                    "spearman": 0.38, "spearman_lo": 0.32, "spearman_hi": 0.44},
            base | {"ports": "trained", "di": "uncentred/all", "pearson": -0.32, "pearson_lo": -0.36,
                    "pearson_hi": -0.27, "spearman": -0.26, "spearman_lo": -0.32, "spearman_hi": -0.2}]
    rec = {"schema": "cfka-result/1", "name": di_walk.BIOGRAPHY_RECORD, "origin": "transcribed",
           "provenance": {"docs_file": "docs/x.md", "docs_commit": "0" * 40, "command": "cfka di-attention",
                          "date": "2026-12-02", "seeds": [0, 1], "pt_replicates": []},
           "regime": {}, "rows": rows}
    path = root / f"{di_walk.BIOGRAPHY_RECORD}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rec))


@pytest.mark.slow
def test_tiny_walk_writes_its_record_and_resumes(tmp_path):
    results = tmp_path / "results"
    _biography_record(results)
    argv = ["--out", str(tmp_path / "walk"), "--results", str(results), "--seeds", "2", "--train-steps", "3",
            "--facts", "96", "--width", "8", "--theory-steps", "5", "--min-count", "1", "--bootstrap", "20",
            "--steps", "theory,1L-linear,templates,biography"]
    assert di_walk.main(argv) == 0
    rec = load_records(results)[di_walk.RECORD]
    assert rec.origin == "produced"
    assert [(r["name"], r["seed"]) for r in rec.rows] == [
        ("theory", 0), ("theory", 1), ("1L-linear", 0), ("1L-linear", 1), ("templates", 0), ("templates", 1),
        ("biography", "mean of 2")]
    port = rec.select(name="templates")[0]
    for key in ("pearson", "pearson_lo", "pearson_hi", "spearman", "final_loss", "pearson_init", "on_query",
                "z_word", "z_end"):
        assert key in port
    assert port["pearson_lo"] <= port["pearson"] <= port["pearson_hi"]
    assert [s["name"] for s in di_walk.summary(list(rec.rows))] == ["theory", "1L-linear", "templates", "biography"]
    assert "1500 AdamW steps" not in rec.regime["dose"] and "3 AdamW steps" in rec.regime["dose"]
    # a second run resumes every finished step and adds a new one in walk order
    first = (tmp_path / "walk" / "steps" / "1L-linear.json").stat().st_mtime_ns
    assert di_walk.main(argv[:-1] + ["1L-linear,2L-linear"]) == 0
    assert (tmp_path / "walk" / "steps" / "1L-linear.json").stat().st_mtime_ns == first
    names = [r["name"] for r in load_records(results)[di_walk.RECORD].rows]
    assert names.index("2L-linear") == names.index("1L-linear") + 2 and "templates" in names


def test_bad_walk_configs_are_refused():
    with pytest.raises(ValueError, match="steps must be"):
        di_walk.Config(steps=("theory", "nowhere"))
    with pytest.raises(ValueError, match="seeds"):
        di_walk.Config(seeds=0)
    with pytest.raises(SystemExit):
        di_walk.parse(["--steps", "nowhere"])
