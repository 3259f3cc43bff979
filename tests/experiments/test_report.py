"""cfka report on two fixture run folders and one stream folder (experiments/report.py)."""

import pytest

from cfka_jax.cli import main as cfka
from cfka_jax.train.loop import MetricsLog
from cfka_jax.experiments import report


def _run(path, evals, losses):
    log = MetricsLog(path / "metrics.jsonl")
    for step, loss in losses:
        log.write({"kind": "train", "step": step, "loss": loss})
    for step, value in evals:
        log.write({"kind": "eval", "step": step, "Original/sFTA": value, "Original/sFTA/major": 0.0,
                   "Original/n": 9.0})
    return path


@pytest.fixture
def runs(tmp_path):
    a = _run(tmp_path / "a", [(0, 0.2), (10, 0.6), (20, 0.5)], [(10, 2.0), (20, 1.0)])
    b = _run(tmp_path / "b", [(0, 0.2), (10, 0.3), (20, 0.4)], [(10, 3.0), (20, 2.5)])
    return a, b


def test_table_has_first_final_and_best_per_run_and_one_plot_per_metric(runs, tmp_path):
    text = report.main([str(p) for p in runs], str(tmp_path / "out"))
    assert "| Original/sFTA | a | 0.2000 (0) | 0.5000 (20) | 0.6000 (10) |" in text
    assert "| Original/sFTA | b | 0.2000 (0) | 0.4000 (20) | 0.4000 (20) |" in text
    assert "| loss | a | 2.0000 (10) | 1.0000 (20) | 1.0000 (20) |" in text        # lower is better for losses
    assert "sFTA/major" not in text and "Original/n" not in text
    assert (tmp_path / "out" / "Original_sFTA.png").stat().st_size > 0
    assert (tmp_path / "out" / "loss.png").exists()
    assert (tmp_path / "out" / "report.md").read_text() == text


def test_stream_folders_join_their_stages_at_global_steps(tmp_path):
    s = tmp_path / "stream"
    _run(s / "stage1", [(0, 0.1), (4, 0.7)], [(4, 1.0)])
    _run(s / "stage2", [(0, 0.7), (4, 0.3)], [(4, 0.5)])
    steps = [(r["kind"], r["step"]) for r in report.history(s)]
    assert steps == [("train", 4), ("eval", 0), ("eval", 4), ("train", 8), ("eval", 8)]


def test_bad_inputs_exit_2_naming_the_folder_or_metric(runs, tmp_path, capsys):
    assert cfka(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "missing: not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cfka(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
    assert cfka(["report", *map(str, runs), "--metrics", "Continual/EM", "--out", str(tmp_path / "o")]) == 2
    assert "Continual/EM" in capsys.readouterr().err
