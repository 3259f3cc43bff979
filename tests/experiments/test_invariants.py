"""The `cfka invariants` script on a run folder with an initialisation, two checkpoints and exported params."""

import json

import jax
import numpy as np
import pytest
from flax import nnx

from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.folder import RunFolder, RunFolderError
from cfka_jax.runs.specs import PTSpec
from cfka_jax.train.checkpoint import CheckpointDir
from cfka_jax.train.step import TrainState
from cfka_jax.experiments import invariants as inv
from tests.tolerances import F32


def test_invariants_over_a_runs_snapshots(tmp_path):
    cache, run = tmp_path / "data", tmp_path / "pt-smoke"
    spec = PTSpec(preset="smoke", out=str(run), seed=3, cache_dir=str(cache), progress=False)
    bundle = build_data(spec.scale.data_config(), cache)
    folder = RunFolder(run)
    with pytest.raises(RunFolderError, match="no Biography run"):
        inv.main([str(run)])
    folder.start(spec, spec.scale)
    _, params, _ = nnx.split(build_model(spec.scale, "qwen", len(bundle.tokenizer), seed=3), nnx.Param, ...)
    scale = lambda f: jax.tree.map(lambda x: x * f, params)  # noqa: E731  (moves every family but none of its form)
    ckpts = CheckpointDir(run / "checkpoints")
    for step, f in ((6, 1.1), (12, 1.3)):
        ckpts.save(step, TrainState(scale(f), (), np.int32(step)))
    folder.save_params(scale(1.3), 12)
    (run / "final.json").write_text("{}")
    assert inv.main([str(run)]) == 0
    res = json.loads((run / "invariants" / "invariants.json").read_text())
    assert res["steps"] == [0, 6, 12, 12] and res["labels"] == ["init", "checkpoint", "checkpoint", "params"]
    for name, drift in res["relative_drift"].items():
        assert drift[0] == 0.0 and drift[1] > 0.0 and drift[2] == drift[3], name
        # C is quadratic in the parameters: scaling them all by f scales C by f²
        np.testing.assert_allclose(np.asarray(res["value_norm"][name][1:3]) / res["value_norm"][name][0],
                                   [1.1**2, 1.3**2], rtol=F32.exact_rtol)
    assert (run / "invariants" / "invariants.png").stat().st_size > 10_000
