"""The full re-train reference of a stream (cfka_jax/runs/retrain.py) on the smoke preset."""

import json

import pytest

from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.retrain import RetrainSpec, retrain, schedule


def test_schedule_scales_the_pt_steps_and_warmup_with_the_data():
    pt = BIOGRAPHY["small"].pt
    s = schedule(RetrainSpec(preset="small"), 600, 800)
    assert s.steps == round(pt.steps * 4 / 3) and s.warmup == round(pt.warmup * s.steps / pt.steps)
    assert schedule(RetrainSpec(preset="small", steps=7), 600, 800).steps == 7


def test_retrain_row_covers_every_task_and_resumes_to_the_same_summary(tmp_path):
    spec = RetrainSpec(preset="smoke", out=str(tmp_path / "r"), stages=2, steps=3,
                       cache_dir=str(tmp_path / "cache"), progress=False)
    first = retrain(spec)
    assert len(first["row"]) == 3 and all(0.0 <= v <= 1.0 for v in first["row"])
    assert first["avg_acc"] == pytest.approx(sum(first["row"][1:]) / 2) and first["steps"] == 3
    assert json.loads((tmp_path / "r" / "retrain.json").read_text())["row"] == first["row"]
    assert retrain(spec)["row"] == first["row"]  # read back from the finished run folder
    with pytest.raises(ValueError, match="holds another run"):
        retrain(RetrainSpec(**{**spec.__dict__, "steps": 4}))


@pytest.mark.parametrize("kwargs", [dict(stages=0), dict(steps=0), dict(metric="EM"), dict(preset="nope")])
def test_bad_retrain_specs_are_refused(kwargs):
    with pytest.raises(ValueError):
        RetrainSpec(**kwargs)
