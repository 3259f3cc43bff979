"""`cfka geometry erosion --study graded` (experiments/geometry_erosion_graded.py): the graded world of the scales,
the per-subject erosion and record rows, the record rewritten as seeds finish and resumed, and one smoke seed."""

import json

import numpy as np
import pytest

from cfka_jax.experiments import geometry
from cfka_jax.experiments import geometry_erosion_graded as gg
from cfka_jax.experiments.geometry_erosion import SCALES, ErosionConfig


def test_graded_study_parses_and_its_scales_grade_the_cue():
    _, cfg = geometry.configs(["erosion", "--study", "graded", "--lr", "3e-4", "--seeds", "0,1", "--record", "x"])
    assert (cfg.study, cfg.lr, cfg.seeds, cfg.record) == ("graded", 3e-4, (0, 1), "x")
    with pytest.raises(ValueError, match="--record"):
        ErosionConfig(study="cues", record="x")
    small = gg.graded_scale("small")
    assert small.world.cue_len == 7 and small.world.subjects == 8 and set(small.world.subject_weights) == {1.0}
    np.testing.assert_allclose(small.world.similarity, np.arange(8) / 7, rtol=0, atol=0)
    assert (small.steps, small.base_steps, small.model) == (200, SCALES["small"].base_steps, SCALES["small"].model)
    assert SCALES["small"].world.cue_len == 0  # the erosion study's own world is left as it was


def _curve(pads: np.ndarray, non_if: np.ndarray) -> list[dict]:
    return [{"step": t, "choice_mass_subject": p.tolist(), "non_if_subject": n.tolist(),
             "content_subject": [0.5] * len(p)} for t, (p, n) in enumerate(zip(pads, non_if))]


def test_subject_erosion_and_record_rows():
    # 3 subjects, 3 evaluations: subject 2 (most similar) loses most; subject 0's lowest point is mid-curve
    pads = np.array([[0.9, 0.9, 0.8], [0.3, 0.6, 0.2], [0.45, 0.3, 0.1]])
    non_if = np.array([[0.0, 0.0, 0.0], [0.2, 0.4, 0.6], [0.25, 0.5, 1.0]])
    ero = gg.subject_erosion(_curve(pads, non_if), 3)
    np.testing.assert_allclose(ero["dlog_pad"], np.log([0.5, 1 / 3, 0.125]), rtol=1e-12)
    np.testing.assert_allclose(ero["dlog_pad_min"], np.log([1 / 3, 1 / 3, 0.125]), rtol=1e-12)
    np.testing.assert_array_equal(ero["non_if"], [0.25, 0.5, 1.0])
    scores = {"total": [3.0, 2.0, 1.0], "ch1": [1.0, 1.0, 1.0], "ch2": [1.0, 2.0, 3.0], "ch2_no_kembd": [0, 1, 2],
              "h_cos": [0.1, 0.3, 0.2], "h_dot": [1.0, 3.0, 2.0]}
    rows = gg.record_rows(4, [0.0, 0.5, 1.0], [0, 1, 2], scores, ero, lr=3e-4, steps=2)
    subj = [r for r in rows if r["row"] == "subject"]
    rho = {(r["score"], r["target"]): r["spearman"] for r in rows if r["row"] == "spearman"}
    assert [(r["seed"], r["subject"], r["shared"], r["similarity"]) for r in subj] == [(4, 0, 0, 0.0), (4, 1, 1, 0.5),
                                                                                         (4, 2, 2, 1.0)]
    assert subj[2]["total"] == 1.0 and subj[2]["non_if"] == 1.0 and subj[2]["dlog_pad"] == round(np.log(0.125), 4)
    assert len(rho) == len(gg.SCORES) * len(gg.TARGETS) + len(gg.SCORES) - 1
    assert rho["similarity", "dlog_pad"] == -1.0 and rho["similarity", "non_if"] == 1.0  # the premise holds
    assert rho["total", "dlog_pad"] == 1.0 and rho["total", "similarity"] == -1.0
    assert rho["ch1", "dlog_pad"] is None  # a constant score: undefined, null
    assert all(r["n"] == 3 for r in rows if r["row"] == "spearman")


def _fake_rows(seed: int) -> list[dict]:
    pads = np.array([[0.9, 0.9, 0.9], [0.8 - 0.1 * seed, 0.5, 0.2]])
    ero = gg.subject_erosion(_curve(pads, np.array([[0.0] * 3, [0.1, 0.5, 0.9]])), 3)
    scores = {k: [1.0, 2.0, 3.0 + seed] for k in gg.SCORES[1:]}
    return gg.record_rows(seed, [0.0, 0.5, 1.0], [0, 1, 2], scores, ero, lr=1e-3, steps=2)


def test_record_as_seeds_finish_and_resume(tmp_path, monkeypatch):
    from cfka_jax.claims.results import load_records

    out, results, ran = tmp_path / "graded", tmp_path / "results", []

    def fake_seed(cfg, s, seed, seed_dir):
        assert seed_dir == out / f"seed{seed}" and s.world.cue_len == 2
        held = load_records(results)["token-force/g"].provenance["seeds"] if ran else []
        assert held == ran  # the record already holds every seed finished before this one
        ran.append(seed)
        return _fake_rows(seed)

    monkeypatch.setattr(gg, "run_seed", fake_seed)
    argv = ["erosion", "--scale", "smoke", "--study", "graded", "--out", str(out), "--record", "g", "--results",
            str(results)]
    assert geometry.main([*argv, "--seeds", "0,1"]) == 0 and ran == [0, 1]
    rec = load_records(results)["token-force/g"]
    assert rec.origin == "produced" and rec.provenance["seeds"] == [0, 1] and rec.unit == "run"
    assert rec.provenance["command"] == (f"cfka geometry erosion --scale smoke --seeds 0,1 --out {out} --study "
                                         f"graded --record g --results {results}")
    assert {"model", "params", "pt_quality", "world", "dose"} <= set(rec.regime)
    assert rec.rows == tuple(_fake_rows(0) + _fake_rows(1))
    assert len(rec.select(row="subject")) == 6 and rec.values("spearman", score="similarity", target="dlog_pad",
                                                              row="spearman") == [-1.0, -1.0]
    summary = json.loads((out / "erosion_graded.json").read_text())
    assert summary["spearman"]["similarity/non_if"] == {"0": 1.0, "1": 1.0}
    assert "similarity/dlog_pad" in (out / "erosion_graded.md").read_text()
    assert geometry.main([*argv, "--seeds", "0,1"]) == 0 and ran == [0, 1]  # both finished: nothing runs
    assert geometry.main([*argv, "--seeds", "0,1,2"]) == 0 and ran == [0, 1, 2]
    assert load_records(results)["token-force/g"].provenance["seeds"] == [0, 1, 2]
    assert geometry.main([*argv, "--seeds", "0", "--lr", "3e-4"]) == 0 and ran == [0, 1, 2, 0]  # another config


def test_graded_smoke_seed(tmp_path):
    out = tmp_path / "g"
    assert geometry.main(["erosion", "--scale", "smoke", "--study", "graded", "--out", str(out)]) == 0
    seed = json.loads((out / "graded_seed.json").read_text())
    assert seed["shared"] == [0, 1, 2] and sorted(seed["cue_order"]) == [0, 1]
    assert set(seed["scores"]) >= {"total", "ch1", "ch2", "ch2_no_kembd", "h_cos"}
    assert len(seed["curve"]) == 3 and all(len(c["choice_mass_subject"]) == 3 for c in seed["curve"])
    rows = json.loads((out / "erosion_rows.json").read_text())["rows"]
    assert [r["subject"] for r in rows if r["row"] == "subject"] == [0, 1, 2]
    assert all(np.isfinite(r["total"]) and 0 <= r["pad_end"] <= 1 for r in rows if r["row"] == "subject")
    assert (out / "erosion_graded.png").stat().st_size > 10_000
