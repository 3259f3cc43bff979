"""`cfka geometry erosion --study cues` (the §6.6 cue grid and the §6.2 collision protocol) and the selection
study's world choice: configs refuse bad names; the smoke runs write their tables (slow)."""

import json

import numpy as np
import pytest

from cfka_jax.experiments import geometry
from cfka_jax.experiments.geometry_cues import summarize_cues
from cfka_jax.experiments.geometry_erosion import ErosionConfig
from cfka_jax.experiments.geometry_select import SelectConfig


def test_study_and_rule_are_checked():
    with pytest.raises(ValueError, match="--study"):
        ErosionConfig(study="grid")
    with pytest.raises(ValueError, match="--rule"):
        SelectConfig(rule="shift")
    assert SelectConfig(scale="small").select_scale.task.rule == "map"
    permute = SelectConfig(scale="small", rule="permute").select_scale.task
    assert (permute.rule, permute.content_tokens) == ("permute", 24)


def test_summarize_cues_takes_mean_and_std_of_every_leaf():
    runs = [{"base": {"QA": {"x": a}}, "grid": {"PR": {"y": 2 * a}}, "collision": {"QA/QA": {"z": {"w": -a}}}}
            for a in (1.0, 3.0)]
    out = summarize_cues(runs)
    assert out["base"]["QA"]["x"] == [2.0, 1.0] and out["grid"]["PR"]["y"] == [4.0, 2.0]
    np.testing.assert_allclose(out["collision"]["QA/QA"]["z"]["w"], [-2.0, 1.0])


@pytest.mark.slow
def test_cues_smoke_writes_the_grid_and_the_collision_table(tmp_path):
    out = tmp_path / "cues"
    assert geometry.main(["erosion", "--scale", "smoke", "--study", "cues", "--out", str(out)]) == 0
    data = json.loads((out / "cues.json").read_text())
    assert set(data["grid"]) == {"QA", "PR"} and set(data["grid"]["QA"]) == {"new_acc", "QA", "PR"}
    assert set(data["collision"]) == {"QA/QA", "QA/PR", "PR/QA", "PR/PR"}
    assert "F_ratio" in (out / "cues.md").read_text() and (out / "cues_seed0.json").exists()


@pytest.mark.slow
def test_select_smoke_records_balance_and_the_ch2_diagnosis(tmp_path):
    out = tmp_path / "select"
    assert geometry.main(["select", "--scale", "smoke", "--out", str(out)]) == 0
    data = json.loads((out / "select.json").read_text())
    rows = [r for d in data["seeds"] for r in d["rows"]]
    assert all(r["selected"] == 2 and 0.0 <= r["balance"] <= 1.0 for r in rows)
    assert {"ch1/within", "ch1/cross", "ch2/within", "ch2/cross", "ch2/all"} <= set(data["ch2_diagnosis"])
