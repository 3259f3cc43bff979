"""cfka_jax/experiments/stream_sweep.py: every shipped configuration parses; the table reads stream folders."""

import json
import types

from cfka_jax.experiments import stream_sweep as sweep


def test_every_config_parses_and_jobs_are_seed_major(tmp_path):
    args = types.SimpleNamespace(preset="small", root=str(tmp_path), stage_steps=40, pt_dir=None, cache_dir="c")
    for name in sweep.CONFIGS:
        spec = sweep.spec_of(name, 1, args)
        assert spec.out.endswith(f"{name}-seed1") and spec.schedule.steps == 40
    assert sweep.jobs(["a", "b"], [0, 1]) == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]


def test_table_means_over_seeds(tmp_path):
    for seed, bwt in ((0, -0.1), (1, -0.3)):
        d = tmp_path / f"gpm-rewarm-seed{seed}"
        d.mkdir()
        row = {c: 0.5 for c in sweep.COLUMNS} | {"bwt": bwt, "fuar": None, "matrix": [[0.8, 0.1], [0.4, 0.6]]}
        (d / "stream.json").write_text(json.dumps(row))
    text = sweep.table(tmp_path)
    assert "| gpm-rewarm | 2 | 40.0 (40.0–40.0) |" in text and "-20.0 (-30.0–-10.0)" in text and "n.d." in text
    assert json.loads((tmp_path / "table.json").read_text())["gpm-rewarm"]["bwt"] == [-10.0, -30.0]
