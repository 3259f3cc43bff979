"""Sharded == single-device on 8 forced host CPU devices: a theory sweep, a train step on two meshes (and with the
vocabulary-tiled head loss on one), greedy generation, and a checkpoint written on a (2, 4) mesh restored on (8, 1) and on one device.

The checks run in one subprocess (``tests/parallel/sharded_checks.py``) because the device count is fixed when JAX
starts and this test process already runs with the 2 devices of tests/conftest.py.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from jax.sharding import PartitionSpec as P

import cfka_jax.models  # noqa: F401 (the families register their parameter axes with parallel/rules)
from cfka_jax.parallel.mesh import MeshConfig, make_mesh, parse_mesh
from cfka_jax.parallel.rules import logical_axes, spec_for
from tests.tolerances import F32

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded") / "results.json"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tests.parallel.sharded_checks", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_sweep_over_8_devices_equals_one_device(results):
    assert results["devices"] == 8 and results["sweep_devices"] == 8
    assert results["sweep_max_diff"] <= F32.exact_rtol


@pytest.mark.parametrize("shape", ["(2, 4, 1)", "(2, 2, 2)"])
def test_sharded_train_step_equals_one_device(results, shape):
    r = results[f"train_{shape}"]
    assert r["max_diff"] <= F32.op_atol and r["loss_diff"] <= F32.exact_rtol
    assert "fsdp" in r["q_kernel_spec"]  # the parameters really are sharded
    if shape == "(2, 2, 2)":
        assert "tensor" in r["q_kernel_spec"]


def test_sharded_tiled_head_loss_equals_one_device(results):
    """The vocabulary-tiled head loss (``--loss-chunk``) over a sharded tied embedding: the same training as on one
    device, and the same loss as the full-logits step."""
    r = results["train_tiled_(2, 2, 2)"]
    assert r["max_diff"] <= F32.op_atol and r["loss_diff"] <= F32.exact_rtol and r["vs_full_logits"] <= F32.exact_rtol
    assert r["embedding_spec"] != "PartitionSpec()"  # the head really is sharded


def test_sharded_greedy_generation_gives_identical_tokens(results):
    assert results["generate_same_tokens"]


def test_checkpoint_from_a_2x4_mesh_restores_on_8x1_and_on_one_device(results):
    for name, devices in (("mesh_8x1", [8]), ("one_device", [1])):
        r = results["checkpoint"][name]
        assert r["max_diff"] == 0.0 and r["step"] == 1 and r["devices"] == devices


def test_mesh_parsing_and_rules():
    assert parse_mesh("data=2,fsdp=4") == MeshConfig(2, 4, 1)
    for bad in ("data=0", "pipeline=2", "data=2,data=2", "fsdp=x"):
        with pytest.raises(ValueError, match="--mesh"):
            parse_mesh(bad)
    with pytest.raises(ValueError, match="2 are available"):
        make_mesh(MeshConfig(data=4))
    assert logical_axes("['layers'][0]['mlp']['down_proj']['kernel']", 2) == ("mlp", "embed")
    assert logical_axes("['layers']['mlp']['down_proj']['kernel']", 3) == (None, "mlp", "embed")  # scanned
    assert logical_axes("['norm']['scale']", 1) == (None,)
    mesh = make_mesh(MeshConfig(fsdp=2))
    assert spec_for((32, 7), ("embed", "mlp"), mesh) == spec_for((32, 7), ("embed", None), mesh)
    assert spec_for((31, 8), ("embed", "mlp"), mesh) == P(None, None)  # 31 is not divisible by fsdp = 2
    assert spec_for((32, 8), ("embed", "mlp"), mesh) == P("fsdp", None)  # no tensor axis of size > 1
