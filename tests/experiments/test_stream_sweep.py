"""experiments/stream_sweep.py: every shipped configuration parses; the table reads stream folders."""

import json
import types

import pytest

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
        row = {c: 0.5 for c in sweep.COLUMNS} | {"bwt": bwt, "fuar": None, "matrix": [[0.8, 0.1], [0.4, 0.6]],
                                                 "tasks": ["PT", "stage 1"]}
        (d / "stream.json").write_text(json.dumps(row))
    text = sweep.table(tmp_path)
    assert "| gpm-rewarm | 2 | 40.0 (40.0–40.0) |" in text and "-20.0 (-30.0–-10.0)" in text and "n.d." in text
    assert json.loads((tmp_path / "table.json").read_text())["gpm-rewarm"]["bwt"] == [-10.0, -30.0]


def test_grid_reuses_the_main_cells_and_sets_alpha_and_peak():
    assert sweep.grid_name(0, 1e-3) == "naive-rewarm" and sweep.grid_name(25, None) == "replay25-norewarm"
    assert sweep.grid_name(5, 1e-3) == "replay5-rewarm" and sweep.grid_name(10, 3e-3) == "replay10-peak0.003"
    assert sweep.CONFIGS["replay1-peak0.0003"] == dict(methods=("replay",), rewarm="rewarm", alpha=0.99,
                                                       rewarm_peak=3e-4)
    assert sweep.CONFIGS["naive-norewarm"] == dict(methods=("naive",), rewarm="none")
    assert len(sweep.GRID) == len(sweep.REPLAY_PERCENTS) * len(sweep.PEAKS)


def test_table_has_the_retrain_row_and_the_grid(tmp_path):
    for name, t0 in (("naive-rewarm", 0.2), ("replay50-peak0.003", 0.6)):
        d = tmp_path / f"{name}-seed0"
        d.mkdir()
        (d / "stream.json").write_text(json.dumps({c: 0.1 for c in sweep.COLUMNS} | {
            "matrix": [[0.8, 0.1], [t0, 0.5]], "tasks": ["PT", "stage 1"]}))
    d = tmp_path / "retrain-seed0"
    d.mkdir()
    (d / "retrain.json").write_text(json.dumps({"final_T0": 0.9, "avg_acc": 0.7, "row": [0.9, 0.7]}))
    text = sweep.table(tmp_path)
    assert "| retrain | 1 | 90.0 | 70.0 | n.d. |" in text
    grid = text.split("final Original (T0), replay share")[1]
    assert "| 0 % | n.d. | n.d. | 20.0 | n.d. |" in grid and "| 50 % | n.d. | n.d. | n.d. | 60.0 |" in grid


def test_a_malformed_stream_summary_is_named_with_its_key(tmp_path):
    d = tmp_path / "naive-rewarm-seed0"
    d.mkdir()
    good = {c: 0.1 for c in sweep.COLUMNS} | {"matrix": [[0.8, 0.1], [0.2, 0.5]], "tasks": ["PT", "stage 1"]}
    for bad, words in (({"matrix": [[0.8], [0.2]]}, "'matrix' must be a square"), ({"bwt": "low"}, "key bwt"),
                       ({"tasks": None}, "key tasks"), ({"avg_acc": float("nan")}, "key avg_acc")):
        (d / "stream.json").write_text(json.dumps(good | bad))
        with pytest.raises(ValueError, match=words) as err:
            sweep.table(tmp_path)
        assert str(d / "stream.json") in str(err.value) and "\n" not in str(err.value)
    (d / "stream.json").write_text(json.dumps({k: v for k, v in good.items() if k != "fuar"}))
    with pytest.raises(ValueError, match="missing key.*'fuar'"):
        sweep.table(tmp_path)


def test_flags_parse_as_before_and_bad_values_name_the_flag(tmp_path, capsys):
    name, cfg = sweep.FLAGS.parse(["run", "--root", "R", "--seeds", "0,2", "--configs", "gpm-rewarm,retrain",
                                   "--worker", "1/2", "--stage-steps", "40", "--pt-dir", "P"])
    assert name == "run" and (cfg.seeds, cfg.configs, cfg.worker_share(), cfg.stage_steps) == (
        (0, 2), ("gpm-rewarm", "retrain"), (1, 2), 40)
    assert sweep.spec_of("gpm-rewarm", 2, cfg).out.endswith("gpm-rewarm-seed2")
    (tmp_path / "t.toml").write_text(f'root = "{tmp_path}"\n')
    assert sweep.FLAGS.parse(["table", "--config", str(tmp_path / "t.toml")]) == ("table", sweep.TableConfig(
        str(tmp_path)))
    for argv, flag in ((["run", "--root", "R", "--worker", "2/2"], "--worker"),
                       (["run", "--root", "R", "--configs", "naive"], "--configs"),
                       (["run", "--root", "R", "--seeds", "x"], "--seeds"), (["table"], "--root")):
        with pytest.raises(SystemExit) as err:
            sweep.cli(argv)
        assert err.value.code == 2 and flag in capsys.readouterr().err


def test_pt_replicates_lay_out_their_streams_and_pt_runs():
    _, cfg = sweep.FLAGS.parse(["run", "--root", "R", "--pt-seeds", "0,1", "--pt-root", "P", "--seeds", "0,2",
                                "--configs", "naive-rewarm,ewc-rewarm", "--record", "cfka/x"])
    spec = sweep.spec_of("ewc-rewarm", 2, cfg, 1)
    assert (spec.out, spec.pt_dir, spec.seed) == ("R/pt1/ewc-rewarm-seed2", "P/pt-seed1", 2)
    assert (sweep.pt_spec(cfg, 1).out, sweep.pt_spec(cfg, 1).seed) == ("P/pt-seed1", 1)
    assert sweep.plan(cfg)[:3] == [(0, "naive-rewarm", 0), (0, "ewc-rewarm", 0), (0, "naive-rewarm", 2)]
    assert [k for k, _, _ in sweep.plan(cfg)] == [0] * 4 + [1] * 4  # PT replicate by PT replicate
    _, one = sweep.FLAGS.parse(["run", "--root", "R", "--pt-dir", "D"])
    assert sweep.spec_of("naive-rewarm", 0, one).out == "R/naive-rewarm-seed0" and sweep.plan(one)[0][0] is None


@pytest.mark.parametrize("argv, words", [
    (["--pt-dir", "D", "--pt-seeds", "0"], "--pt-dir and --pt-seeds"),
    (["--pt-root", "P"], "--pt-root"),
    (["--record", "cfka/x"], "--record needs --pt-seeds"),
    (["--pt-seeds", "0", "--record", "../x"], "--record must be"),
    (["--pt-seeds", "0,0"], "--pt-seeds must be distinct"),
    (["--seeds", "1,1"], "--seeds must be distinct"),
    (["--pt-seeds", "0", "--configs", "retrain"], "--configs retrain"),
])
def test_bad_replicate_options_are_one_line_naming_the_flag(argv, words, capsys, tmp_path):
    with pytest.raises(SystemExit) as err:
        sweep.cli(["run", "--root", str(tmp_path / "R"), *argv])
    assert err.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "R").exists()


def test_a_pt_folder_of_another_run_or_an_unfinished_pt_with_workers_is_refused_before_anything(tmp_path):
    from cfka_jax.runs.folder import RunFolder, RunFolderError
    from cfka_jax.runs.specs import PTSpec

    _, cfg = sweep.FLAGS.parse(["run", "--root", str(tmp_path), "--pt-seeds", "0", "--preset", "smoke",
                                "--configs", "naive-rewarm", "--worker", "1/2"])
    with pytest.raises(RunFolderError, match="PT replicate 0 .*has not finished"):
        sweep.run(cfg)
    other = PTSpec(preset="smoke", out=str(tmp_path / "pt-seed0"), seed=7)
    RunFolder(other.out).start(other, other.scale)
    with pytest.raises(RunFolderError, match="pt-seed0 holds another run"):
        sweep.run(cfg)
    (tmp_path / "f").write_text("x")
    _, cfg = sweep.FLAGS.parse(["run", "--root", str(tmp_path), "--pt-seeds", "0", "--pt-root", str(tmp_path / "f")])
    with pytest.raises(ValueError, match="--pt-root .* is a file"):
        sweep.run(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "pt-seed0"]


@pytest.mark.slow
def test_smoke_sweep_over_a_pt_replicate_writes_the_record_and_resumes(tmp_path, monkeypatch):
    """Smoke scale, real training (≈ 1 min on 2 cores: one PT run and two 3-stage streams of 1 step each)."""
    from cfka_jax.claims.results import load_records
    from cfka_jax.runs.folder import RunFolderError

    argv = ["run", "--root", str(tmp_path / "S"), "--pt-seeds", "0", "--preset", "smoke", "--stage-steps", "1",
            "--seeds", "0,1", "--configs", "naive-rewarm", "--record", "cfka/streams", "--results",
            str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")]
    assert sweep.cli(argv) == 0
    rec = load_records(tmp_path / "results")["cfka/streams"]
    assert rec.origin == "produced" and rec.provenance["seeds"] == [0, 1] and rec.provenance["pt_replicates"] == ["s0"]
    assert [(r["stream"], r["pt"], r.get("seed")) for r in rec.rows] == [
        ("pt", "s0", None), ("naive-rewarm", "s0", 0), ("naive-rewarm", "s0", 1)]
    summary = json.loads((tmp_path / "S/pt0/naive-rewarm-seed1/stream.json").read_text())
    row = rec.rows[2]
    assert row["final_original"] == round(100 * summary["matrix"][-1][0], 2)
    assert row["avg_acc"] == round(100 * summary["avg_acc"], 2) and set(row) == {
        "stream", "pt", "seed", *sweep.RECORD_METRICS}
    assert set(rec.provenance["replicate_seconds"]) == {"pt0/naive-rewarm-seed0", "pt0/naive-rewarm-seed1"}
    assert "| naive-rewarm |" in (tmp_path / "S/record.md").read_text()
    # started again: nothing is trained, the record is rewritten from the finished folders
    import cfka_jax.experiments.stream as stream
    import cfka_jax.runs.biography as bio

    boom = lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained again"))  # noqa: E731
    monkeypatch.setattr(stream, "main", boom)
    monkeypatch.setattr(bio, "pretrain", boom)
    assert sweep.cli(argv) == 0
    assert load_records(tmp_path / "results")["cfka/streams"].rows == rec.rows
    # another stream in the same folders is refused before anything runs
    _, cfg = sweep.FLAGS.parse(["run", *argv[1:5], "--preset", "smoke", "--stage-steps", "2", "--seeds", "0",
                                "--configs", "naive-rewarm", "--cache-dir", str(tmp_path / "cache")])
    with pytest.raises(RunFolderError, match="naive-rewarm-seed0/stage1 holds another run"):
        sweep.run(cfg)
