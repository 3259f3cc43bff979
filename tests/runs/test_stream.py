"""Task streams (cfka_jax/runs/stream.py, data/stages.py) on the smoke preset."""

import json
import shutil

import numpy as np
import pytest

from cfka_jax.data.pipeline import build_data
from cfka_jax.data.stages import stage_tasks
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.stream import StreamSpec, run_stream
from cfka_jax.experiments.stream import matrix_markdown, parse


def test_stages_cut_the_cpt_population_into_disjoint_groups(tmp_path):
    bundle = build_data(BIOGRAPHY["smoke"].data_config(), tmp_path / "cache")
    tasks = stage_tasks(bundle, 3)
    pids = [set(t.pids) for t in tasks]
    assert [len(p) for p in pids] == [4, 3, 3]
    assert set().union(*pids) == set(np.unique(bundle.splits["cpt_train"].pid).tolist())
    assert all(not (a & b) for i, a in enumerate(pids) for b in pids[i + 1:])
    for t in tasks:
        assert set(t.train.pid.tolist()) == set(t.pids) == set(t.test.pid.tolist())
        assert len(t.eval[1].chunk) > 0
    assert sum(len(t.train) for t in tasks) == len(bundle.splits["cpt_train"])
    with pytest.raises(ValueError, match="exceeds the 10 CPT people"):
        stage_tasks(bundle, 11)


@pytest.mark.parametrize("kwargs, match", [
    (dict(methods=("naive", "ewc")), "once per stage"), (dict(methods=("lora",)), "unknown method component 'lora'"),
    (dict(methods=("replay",), alpha=1.0), "alpha < 1"), (dict(methods=("ewc + stoc",), alpha=1.0), "alpha < 1"),
    (dict(methods=("kadapter",)), "not available in the stream recipe"),
    (dict(methods=("gpm + nullspace",)), "both set the transform hook"), (dict(alpha=0.0), "alpha"),
    (dict(rewarm="later"), "rewarm"), (dict(stages=0), "stages"), (dict(gpm_threshold=1.5), "threshold"),
    (dict(rewarm_peak=1e-9), "peak")])
def test_bad_stream_specs_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StreamSpec(**kwargs)


def test_cli_arguments_make_the_spec_and_the_matrix_table():
    cfg = parse(["--preset", "small", "--method", "naive,replay,gpm", "--alpha", "0.75", "--rewarm", "none",
                 "--out", "x", "--tensorboard"])
    spec = cfg.spec()
    assert type(spec) is StreamSpec and cfg.tracking().tensorboard == "x/tb" and cfg.tracking().run_name == "x"
    assert spec.methods == ("naive", "replay", "gpm") and spec.method(2) == "replay"
    assert spec.schedule.steps == BIOGRAPHY["small"].cpt.steps // 3 and spec.schedule.warmup == 13
    both = parse(["--method", "stoc + ewc,replay + lwf(T=2 weight=0.5)", "--stages", "2", "--out", "y"]).spec()
    assert both.methods == ("stoc + ewc", "replay + lwf(T=2 weight=0.5)")  # a stage runs a composition
    assert both.resolved(1).hooks.filled() == ("documents", "penalty")
    assert both.resolved(2).hooks.filled() == ("documents", "token_objective") and both.resolved(2).mixes
    text = matrix_markdown([[0.5, 0.1], [0.25, 0.75]], ["PT", "stage 1"], "sFTA")
    assert "| stage 1 | 25.0 | 75.0 |" in text


@pytest.mark.slow
def test_three_stage_stream_resumes_after_a_kill_mid_stage_with_identical_results(tmp_path):
    root = tmp_path / "s"
    spec = StreamSpec(preset="smoke", out=str(root), methods=("naive", "ewc", "gpm"), ckpt_every=1,
                      cache_dir=str(tmp_path / "cache"), progress=False)
    first = run_stream(spec)
    assert first.matrix.shape == (4, 4)
    stream = json.loads((root / "stream.json").read_text())
    assert stream["matrix"] == first.matrix.tolist() and "fuar" in stream
    # a kill after stage 2's first checkpoint: its later checkpoint, params and final record never got written
    stage2 = root / "stage2"
    for p in (stage2 / "final.json", root / "stream.json", root / "gpm" / "bases-before-stage3.npz"):
        p.unlink()
    shutil.rmtree(stage2 / "params")
    shutil.rmtree(stage2 / "checkpoints" / "2")
    shutil.rmtree(root / "stage3")
    again = run_stream(spec)
    np.testing.assert_array_equal(again.matrix, first.matrix)
    np.testing.assert_array_equal(np.concatenate([np.ravel(x) for x in __import__("jax").tree.leaves(again.params)]),
                                  np.concatenate([np.ravel(x) for x in __import__("jax").tree.leaves(first.params)]))
    with pytest.raises(ValueError, match="holds another run"):
        run_stream(StreamSpec(**{**spec.__dict__, "methods": ("naive",)}))
