"""The world-size sweep (experiments/stoc_scale.py): config checks, the presets it walks, the table, and (slow) a
resumable smoke sweep."""

import dataclasses
import json

import pytest

from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.experiments import stoc_scale as ss


def test_config_checks():
    with pytest.raises(ValueError, match="sizes"):
        ss.ScaleConfig(sizes=("small", "huge"))
    with pytest.raises(ValueError, match="seeds"):
        ss.ScaleConfig(seeds=(0, 0))
    with pytest.raises(ValueError, match="alpha"):
        ss.ScaleConfig(alpha=1.0)
    with pytest.raises(ValueError, match="methods"):
        ss.ScaleConfig(methods=("stoc", "ewc"))
    with pytest.raises(ValueError, match="methods"):
        ss.ScaleConfig(methods=("stoc", "stoc"))
    with pytest.raises(ValueError, match="methods"):
        ss.ScaleConfig(methods=())


def test_world_presets_grow_and_keep_each_persons_exposure():
    sizes = ["small", "w600", "w2400", "w10k"]
    people = [ss.pt_people(s) for s in sizes]
    assert people == sorted(people) and people[0] == 150 and people[-1] == 10_000
    for size in sizes:
        p = BIOGRAPHY[size]
        pt_tokens = p.pt.steps * p.pt.batch * p.seq_len / ss.pt_people(size)
        cpt_tokens = p.cpt.steps * p.cpt.batch * p.seq_len / p.data_config().bio.num_cpt_people
        assert 26_000 < pt_tokens < 29_000 and 15_500 < cpt_tokens < 17_000, size


def test_markdown_gives_mean_and_seed_range():
    entry = lambda m, lo, hi, n=2: {"mean": m, "min": lo, "max": hi, "n": n}  # noqa: E731
    results = {"small": {"pt_people": 150, "PT/Original/sFTA": 0.788, "methods": {
        "stoc": {"Original/sFTA": entry(0.555, 0.55, 0.56), "Continual/sFTA": entry(0.5, 0.5, 0.5),
                 "pt_people_named": entry(0.7, 0.7, 0.7), "pt_fact_coverage": entry(0.6, 0.58, 0.62),
                 "true_values_per_mention": entry(0.9, 0.9, 0.9)},
        "naive": {"Original/sFTA": entry(0.25, 0.25, 0.25, 1), "Continual/sFTA": entry(0.7, 0.7, 0.7, 1)}}}}
    text = ss.markdown(results)
    assert ("| 150 | small | 78.8 | STOC | 2 | 55.5 (55.0–56.0) | 50.0 (50.0–50.0) | 70.0 (70.0–70.0) "
            "| 60.0 (58.0–62.0) | 90.0 (90.0–90.0) |") in text
    assert "| 150 | small | 78.8 | naive | 1 | 25.0 | 70.0 | – | – | – |" in text


@pytest.mark.slow
def test_smoke_sweep_resumes_and_reports(tmp_path):
    cfg = ss.ScaleConfig(sizes=("smoke",), seeds=(0, 1), out=str(tmp_path), cache_dir=str(tmp_path / "cache"),
                         progress=False)
    piece = ss.run(dataclasses.replace(cfg, seeds=(1,), methods=("lamol",)))["smoke"]  # a piece of the sweep
    assert set(piece["methods"]) == {"lamol"} and piece["methods"]["lamol"]["Original/sFTA"]["n"] == 1
    results = ss.run(cfg)["smoke"]
    assert set(results["methods"]) == set(ss.METHODS)
    assert all(m["Original/sFTA"]["n"] == 2 for m in results["methods"].values())
    assert results["methods"]["stoc"]["pt_fact_coverage"]["n"] == 2
    assert (tmp_path / "scale.png").stat().st_size > 0
    assert json.loads((tmp_path / "table.json").read_text())["smoke"]["pt_people"] == ss.pt_people("smoke")
    again = ss.run(cfg)["smoke"]  # every folder is finished: nothing retrains, the same numbers come back
    assert again == results
