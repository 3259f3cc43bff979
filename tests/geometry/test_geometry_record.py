"""``cfka geometry ... --seeds --record``: produced records written seed by seed, resumed, loadable (smoke scale)."""

from __future__ import annotations

import pytest

from cfka_jax.claims.results import load_records
from cfka_jax.experiments import geometry

SMOKE = ["--scale", "smoke"]


def _run(tmp_path, study, *extra):
    out, results = tmp_path / study, tmp_path / "results"
    assert geometry.main([study, *SMOKE, "--out", str(out), "--results", str(results), *extra]) == 0
    return out, results


@pytest.mark.slow
def test_attribution_record_grows_seed_by_seed_and_resumes(tmp_path):
    out, results = _run(tmp_path, "attribution", "--seeds", "0", "--record", "ident_smoke")
    rec = load_records(results)["token-force/ident_smoke"]
    assert rec.origin == "produced" and rec.provenance["seeds"] == [0]
    first = (out / "seed0" / "attribution_rows.json").stat().st_mtime_ns
    _run(tmp_path, "attribution", "--seeds", "0,1", "--record", "ident_smoke")  # seed 0 is resumed, not rerun
    assert (out / "seed0" / "attribution_rows.json").stat().st_mtime_ns == first
    rec = load_records(results)["token-force/ident_smoke"]
    assert rec.provenance["seeds"] == [0, 1] and rec.seeds == 2
    assert rec.provenance["command"] == ("cfka geometry attribution --scale smoke --out " + str(out) + " --seeds 0,1 --record "
                                         "ident_smoke --results " + str(results))
    assert set(rec.provenance["seed_seconds"]) == {"0", "1"} and rec.provenance["wall_s"] > 0
    assert rec.count("seed", method="ch1") == 2
    assert {r["method"] for r in rec.rows} == {"base", "ch1", "ch1-ch2", "ch1-ch2-inputln", "exact", "datainf",
                                                "datainf-neg"}
    for row in rec.select(method="ch1"):
        assert 0.0 <= row["auc"] <= 1.0 and row["k"] == 4 and row["arch"] == "qwen"
    # different draws per seed: the base model's loss differs
    assert len(set(rec.values("base_loss", method="base"))) == 2


@pytest.mark.slow
def test_energy_and_coldstart_records(tmp_path):
    _, results = _run(tmp_path, "energy", "--taus", "inf,1.5", "--seeds", "0,1", "--record", "energy_smoke")
    _run(tmp_path, "coldstart", "--seeds", "0,1", "--record", "cold_smoke")
    recs = load_records(results)
    en, cold = recs["token-force/energy_smoke"], recs["token-force/cold_smoke"]
    assert en.seeds == 2 and cold.seeds == 2
    assert [r["variant"] for r in en.select(seed=1)] == ["base", "plain", "masked"]
    assert en.select(variant="plain")[0]["tau"] is None and en.select(variant="masked")[0]["tau"] == 1.5
    assert len(en.values("collision", variant="plain", normalize="all")) == 2
    assert [r["step"] for r in cold.select(seed=0)] == [0, 2] and cold.count("seed", start="random") == 2
    assert all(0.0 <= v <= 1.0 for v in cold.values("sign_c"))


@pytest.mark.slow
def test_erosion_record(tmp_path):
    out, results = _run(tmp_path, "erosion", "--taus", "1.5", "--record", "erosion_smoke")
    rec = load_records(results)["token-force/erosion_smoke"]
    assert rec.provenance["seeds"] == [0] and rec.provenance["seed_seconds"]["0"]["wall_s"] > 0
    assert [(r["variant"], r["tau"]) for r in rec.rows] == [("plain", None), ("masked", 1.5), ("isolated", None)]
    assert all(0.0 <= r["pad_end"] <= 1.0 and r["pad_min"] <= r["pad_end"] for r in rec.rows)
    mtime = (out / "erosion_seed0.json").stat().st_mtime_ns
    _run(tmp_path, "erosion", "--taus", "1.5", "--record", "erosion_smoke")  # resumed: the record is rewritten
    assert (out / "erosion_seed0.json").stat().st_mtime_ns == mtime
    assert load_records(results)["token-force/erosion_smoke"].rows == rec.rows


def test_bad_record_name_or_seeds_is_refused_before_running(tmp_path):
    for bad, msg in ((["--record", "../x"], "--record must be a plain name"), (["--seeds", "1,1"], "--seeds must be distinct")):
        with pytest.raises(ValueError, match=msg):
            geometry.main(["attribution", *SMOKE, "--out", str(tmp_path / "o"), *bad])
    assert not (tmp_path / "o").exists()


def test_run_study_writes_per_seed_and_resumes_a_killed_run(tmp_path):
    """The record is rewritten after every seed; a run killed mid-seed resumes the finished seeds only."""
    from cfka_jax.experiments import geometry_record
    from cfka_jax.experiments.geometry_attribution import AttributionConfig

    cfg = AttributionConfig(out=str(tmp_path / "o"), seeds=(0, 1, 2), record="fake", results=str(tmp_path / "r"))
    ran = []

    def run_seed(seed, out):
        if seed == 2 and not ran.count(-1):
            ran.append(-1)
            raise KeyboardInterrupt  # killed in seed 2
        ran.append(seed)
        return [{"method": "ch1", "seed": seed, "auc": 0.5 + seed / 10}]

    with pytest.raises(KeyboardInterrupt):
        geometry_record.run_study("attribution", cfg, run_seed, {"model": "m"})
    rec = load_records(tmp_path / "r")["token-force/fake"]
    assert rec.provenance["seeds"] == [0, 1] and rec.provenance["seeds_planned"] == [0, 1, 2]
    assert rec.values("auc") == [0.5, 0.6]
    done = geometry_record.run_study("attribution", cfg, run_seed, {"model": "m"})
    assert ran == [0, 1, -1, 2] and [d["seed"] for d in done] == [0, 1, 2]
    rec = load_records(tmp_path / "r")["token-force/fake"]
    assert rec.provenance["seeds"] == [0, 1, 2] and rec.values("auc") == [0.5, 0.6, 0.7]
    assert rec.provenance["command"].startswith("cfka geometry attribution --scale smoke --out ")
    # another config (the vocabulary) does not reuse the finished seeds
    other = AttributionConfig(out=cfg.out, seeds=(0,), vocab="full", record="fake", results=cfg.results)
    geometry_record.run_study("attribution", other, run_seed, {"model": "m"})
    assert ran[-1] == 0
    # the same config whose scale resolved to other contents (the regime) runs the seed again
    n = len(ran)
    geometry_record.run_study("attribution", other, run_seed, {"model": "m"})
    assert len(ran) == n
    geometry_record.run_study("attribution", other, run_seed, {"model": "m, 48 subsets"})
    assert len(ran) == n + 1 and ran[-1] == 0


def test_a_study_whose_seeds_pretrain_their_own_base_names_them_and_its_start_commit(tmp_path, monkeypatch):
    """``pt_per_seed``: one PT replicate per finished seed (``base-s<k>``); the record names the commit of the code
    the study started with, even when HEAD moved before the record was written."""
    import cfka_jax.claims.results as results
    from cfka_jax.experiments import geometry_record
    from cfka_jax.experiments.geometry_attribution import AttributionConfig

    monkeypatch.setattr(results, "git_commit", lambda cwd=None: "a" * 40)
    cfg = AttributionConfig(out=str(tmp_path / "o"), seeds=(0, 1), record="fake", results=str(tmp_path / "r"))

    def run_seed(seed, out):
        monkeypatch.setattr(results, "git_commit", lambda cwd=None: "b" * 40)  # HEAD moves during the run
        return [{"method": "ch1", "seed": seed, "auc": 0.5}]

    geometry_record.run_study("attribution", cfg, run_seed, {"model": "m"}, pt_per_seed=True)
    rec = load_records(tmp_path / "r")["token-force/fake"]
    assert rec.provenance["pt_replicates"] == ["base-s0", "base-s1"] and rec.pt_replicates == 2
    assert rec.provenance["commit"] == "a" * 40 and rec.provenance["commit_at_write"] == "b" * 40
    plain = AttributionConfig(out=str(tmp_path / "p"), seeds=(0,), record="plain", results=str(tmp_path / "r"))
    geometry_record.run_study("attribution", plain, run_seed, {"model": "m"})
    assert load_records(tmp_path / "r")["token-force/plain"].provenance["pt_replicates"] == []
