"""Run grids of Biography CPT (``runs/grid.py``, ``runs/grid_spec.py``): the spec refuses what one program cannot
vary before anything is built; at the smoke preset every member equals the same run made alone.

Tolerance of member vs lone run: F32.adam_batched_rtol (1e-4 of a leaf's largest entry). The grid step is the lone
step compiled as the body of ``lax.map`` (``auto`` on CPU) or vmapped, whose kernels fuse and accumulate in another
order than the lone step's (ulps), and AdamW's per-entry normalisation amplifies those ulps in entries near ε; the
schedule and λ are the lone run's to the bit (``tests/train/test_grid.py``). Final metrics are compared through the
training losses logged at every step, to the same tolerance.
"""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from cfka_jax.runs.grid_spec import GridSpec, grid_axes, parse_grid, read_grid_file
from cfka_jax.runs.specs import CPTSpec
from cfka_jax.train.ensemble import max_rel_diff
from tests.tolerances import F32


def _base(tmp_path, method="replay-all + ewc", **kw):
    return CPTSpec(preset="smoke", method=method, out=str(tmp_path / "grid"), cache_dir=str(tmp_path / "cache"),
                   progress=False, **kw)


def test_grid_syntax_and_members(tmp_path):
    grid = GridSpec(_base(tmp_path), parse_grid("lr=1e-3,3e-4; alpha=0.5,0.8;seeds=0,1"))
    assert len(grid) == 8 and grid.names[0] == "lr0.001_alpha0.5_seed0" and grid.names[-1] == "lr0.0003_alpha0.8_seed1"
    spec = grid.member_spec(5)
    assert (spec.lr, spec.alpha, spec.seed) == (3e-4, 0.5, 1) and spec.scale.cpt.peak_lr == 3e-4
    assert spec.out == str(tmp_path / "grid" / grid.names[5]) and spec.pt_dir == str(tmp_path / "pt-smoke-qwen")


@pytest.mark.parametrize("text, match", [
    ("foo=1", "unknown axis 'foo'"), ("update=full,freeze", "axis 'update' cannot vary"),
    ("freeze_layers=0,1", "axis 'freeze_layers' varies the frozen blocks of --update freeze"),
    ("lora_rank=2,4", "axis 'lora_rank' cannot vary"), ("method=naive,ewc", "axis 'method' cannot vary"),
    ("lr=", "axis 'lr' has an empty value"), ("lr=1e-3,,3e-4", "axis 'lr' has an empty value"),
    ("lr=1e-3,0.001", "axis 'lr' repeats a value"), ("seeds=0;seed=1", "axis 'seed' is given twice"),
    ("seeds=0.5", "axis 'seed'"), ("lr=nan", "axis 'lr'"), ("lr 1e-3", "not AXIS=V1,V2"), (" ; ", "at least one axis"),
    ("alpha=0.5,1.0", "member alpha1: replay needs 0 < alpha < 1"), ("lr=1e-5", "member lr1e-05: lr / min_lr"),
    ("warmup=99", "member warmup99: lr / min_lr / warmup")])
def test_bad_grids_are_refused_naming_the_key(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        GridSpec(_base(tmp_path), parse_grid(text))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("method, text, match", [
    ("naive", "alpha=0.5,0.8", "method 'naive' mixes no replay"), ("replay-all", "ewc_lambda=1,2", "no EWC penalty"),
    ("stoc", "seeds=0,1", "does not take --method 'stoc'"), ("rho1", "seeds=0,1", "does not take --method 'rho1'")])
def test_axes_the_method_cannot_vary_are_refused(tmp_path, method, text, match):
    with pytest.raises(ValueError, match=match):
        GridSpec(_base(tmp_path, method=method), parse_grid(text))


def test_freeze_layers_varies_under_update_freeze(tmp_path):
    grid = GridSpec(_base(tmp_path, update="freeze"), parse_grid("freeze=0,1"))
    assert [grid.member_spec(i).freeze_layers for i in range(2)] == [0, 1]
    with pytest.raises(ValueError, match="member freeze_layers2: --freeze-layers 2 with --update freeze leaves none"):
        GridSpec(_base(tmp_path, update="freeze"), parse_grid("freeze_layers=1,2"))


def test_grid_files(tmp_path):
    (tmp_path / "g.toml").write_text('lr = [1e-3, 3e-4]\nseeds = [0, 1]\n')
    (tmp_path / "g.json").write_text('{"ewc_lambda": [0, 100.0], "alpha": [0.5]}')
    assert read_grid_file(tmp_path / "g.toml") == (("lr", (1e-3, 3e-4)), ("seed", (0, 1)))
    assert grid_axes(str(tmp_path / "g.json")) == (("ewc_lambda", (0.0, 100.0)), ("alpha", (0.5,)))
    (tmp_path / "bad.json").write_text('{"lr": []}')
    with pytest.raises(ValueError, match="bad.json: axis 'lr' has no values"):
        grid_axes(str(tmp_path / "bad.json"))
    (tmp_path / "bad.toml").write_text('lr = 1e-3\n')
    with pytest.raises(ValueError, match="bad.toml: key 'lr' must be a list"):
        grid_axes(str(tmp_path / "bad.toml"))
    with pytest.raises(ValueError, match="no such grid file"):
        grid_axes(str(tmp_path / "absent.toml"))




def _losses(folder) -> np.ndarray:
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    return np.asarray([r["loss"] for r in lines if r["kind"] == "train"])


@pytest.mark.slow
def test_members_equal_lone_runs(tmp_path):
    """Four members varying lr, α, λ and seed together (a 2 × 2 grid over (lr, α) × (λ, seed) pairs is not a
    product; the grid is lr × seed with α and λ tied to the base), each against ``continual`` of its spec."""
    from cfka_jax.data.pipeline import build_data
    from cfka_jax.runs.biography import continual, pretrain
    from cfka_jax.runs.grid import SUMMARY, run_grid
    from cfka_jax.runs.presets import BIOGRAPHY
    from cfka_jax.runs.specs import PTSpec

    data = build_data(BIOGRAPHY["smoke"].data_config(), str(tmp_path / "cache"))
    pt = pretrain(PTSpec(preset="smoke", out=str(tmp_path / "pt-smoke-qwen"), progress=False), data)
    grid = GridSpec(_base(tmp_path, alpha=0.6, ewc_lambda=300.0),
                    parse_grid("lr=1e-3,2e-4;ewc_lambda=0,3e3;seeds=0,2"))
    results = run_grid(grid, pt, data, log=lambda s: None)
    assert len(results) == len(grid) == 8
    summary = json.loads((tmp_path / "grid" / SUMMARY).read_text())
    assert [m["name"] for m in summary["members"]] == grid.names
    for i in (0, 3, 6):  # lr × λ × seed corners; each lone run compiles its own step
        spec = grid.member_spec(i)
        lone = continual(dataclasses.replace(spec, out=str(tmp_path / "lone" / grid.names[i])), pt, data)
        assert max_rel_diff(results[i].params, lone.params) <= F32.adam_batched_rtol, grid.names[i]
        np.testing.assert_allclose(_losses(tmp_path / "grid" / grid.names[i]),
                                   _losses(tmp_path / "lone" / grid.names[i]), rtol=F32.adam_batched_rtol)
        assert set(results[i].final) == set(lone.final)
    assert max_rel_diff(results[0].params, results[1].params) > 1e3 * F32.adam_batched_rtol  # distinct runs


@pytest.mark.slow
def test_freeze_k_members_equal_lone_freeze_runs(tmp_path):
    """``--update freeze`` with freeze_layers per member (a 0 / 1 mask per member over the same leaves) against
    ``continual`` of each member's spec (its own trainable mask)."""
    from cfka_jax.data.pipeline import build_data
    from cfka_jax.runs.biography import continual, pretrain
    from cfka_jax.runs.grid import run_grid
    from cfka_jax.runs.presets import BIOGRAPHY
    from cfka_jax.runs.specs import PTSpec

    data = build_data(BIOGRAPHY["smoke"].data_config(), str(tmp_path / "cache"))
    pt = pretrain(PTSpec(preset="smoke", out=str(tmp_path / "pt-smoke-qwen"), progress=False), data)
    grid = GridSpec(_base(tmp_path, method="ewc", update="freeze"), parse_grid("freeze_layers=0,1;lr=1e-3,2e-4"))
    results = run_grid(grid, pt, data, log=lambda s: None)
    for i in (0, 3):
        spec = grid.member_spec(i)
        lone = continual(dataclasses.replace(spec, out=str(tmp_path / "lone" / grid.names[i])), pt, data)
        assert max_rel_diff(results[i].params, lone.params) <= F32.adam_batched_rtol, grid.names[i]
        np.testing.assert_allclose(_losses(tmp_path / "grid" / grid.names[i]),
                                   _losses(tmp_path / "lone" / grid.names[i]), rtol=F32.adam_batched_rtol)
    blocks0 = [np.asarray(x) for x in jax.tree.leaves(results[2].params["layers"][0])]  # freeze 1: block 0 fixed
    start0 = [np.asarray(x) for x in jax.tree.leaves(pt.params["layers"][0])]
    assert all(np.array_equal(a, b) for a, b in zip(blocks0, start0))


SHARDED = r"""
import json, sys
import jax
from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.biography import pretrain
from cfka_jax.runs.grid import run_grid
from cfka_jax.runs.grid_spec import GridSpec, parse_grid
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import CPTSpec, PTSpec
root, mode = sys.argv[1], sys.argv[2]
assert jax.device_count() == 4
data = build_data(BIOGRAPHY["smoke"].data_config(), root + "/cache")
pt = pretrain(PTSpec(preset="smoke", out=root + "/pt-smoke-qwen", progress=False), data)
grid = GridSpec(CPTSpec(preset="smoke", method="replay-all + ewc", out=root + "/" + mode, alpha=0.6, progress=False),
                parse_grid("lr=1e-3,2e-4;ewc_lambda=0,3e3"), mode=mode)
out = run_grid(grid, pt, data, log=lambda s: None)
print(json.dumps({"params": [[float(abs(x).sum()) for x in jax.tree.leaves(r.params)] for r in out]}))
"""


@pytest.mark.slow
def test_sharded_over_four_host_devices_equals_one_program_on_one(tmp_path):
    """``vmap`` with the members split over 4 forced host devices (a ``("seed",)`` mesh) against ``map`` on one
    device, in a subprocess (the device count is fixed when the backend starts)."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    runs = {}
    for mode in ("vmap", "map"):
        proc = subprocess.run([sys.executable, "-c", SHARDED, str(tmp_path), mode], env=env, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (tmp_path / "vmap" / "grid.json").exists()
    summary = json.loads((tmp_path / "vmap" / "grid.json").read_text())
    assert summary["devices"] == 4 and summary["member_devices"] == 4 and summary["mode"] == "vmap"
    np.testing.assert_allclose(runs["vmap"]["params"], runs["map"]["params"], rtol=F32.adam_batched_rtol)


@pytest.mark.slow
def test_a_killed_grid_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """A grid killed right after its step-3 checkpoint, run again, restores the stacked state, drops the members'
    records after step 3 and ends with the parameters and logs of an uninterrupted grid (CPU: bit for bit)."""
    from cfka_jax.data.pipeline import build_data
    from cfka_jax.runs.biography import pretrain
    from cfka_jax.runs.grid import run_grid
    from cfka_jax.runs.presets import BIOGRAPHY
    from cfka_jax.runs.specs import PTSpec
    from cfka_jax.train.checkpoint import CheckpointDir

    data = build_data(BIOGRAPHY["smoke"].data_config(), str(tmp_path / "cache"))
    pt = pretrain(PTSpec(preset="smoke", out=str(tmp_path / "pt-smoke-qwen"), progress=False), data)

    def grid(name):
        base = dataclasses.replace(_base(tmp_path, method="replay-all"), out=str(tmp_path / name), ckpt_every=3)
        return GridSpec(base, parse_grid("lr=1e-3,2e-4"))

    whole = run_grid(grid("whole"), pt, data, log=lambda s: None)
    save = CheckpointDir.save

    class Killed(Exception):
        pass

    def killed_after_3(self, step, state, *a, **k):
        save(self, step, state, *a, **k)
        if step == 3:
            raise Killed

    monkeypatch.setattr(CheckpointDir, "save", killed_after_3)
    with pytest.raises(Killed):
        run_grid(grid("resumed"), pt, data, log=lambda s: None)
    monkeypatch.setattr(CheckpointDir, "save", save)
    assert not (tmp_path / "resumed" / "grid.json").exists()
    resumed = run_grid(grid("resumed"), pt, data, log=lambda s: None)
    for a, b, name in zip(whole, resumed, grid("whole").names):
        jax.tree.map(np.testing.assert_array_equal, a.params, b.params)
        np.testing.assert_array_equal(_losses(tmp_path / "whole" / name), _losses(tmp_path / "resumed" / name))
        assert [r["step"] for r in b.history] == [r["step"] for r in a.history]
