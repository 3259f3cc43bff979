"""Provenance of the replay corpora and ensembles made after the Biography CPT ones (issue 24): a corpus left in a
folder by a run of another parent (stream stage, ``stoc-regime --pt-checkpoint``, KnowEdit, ``corpus-cpt``) and an
ensemble of another PT ensemble are refused with one line naming the flag and the folder, before anything is
sampled, read or written; the matching provenance passes the same check.

The stale artefacts are written here (a corpus ``config.json`` recording another parent), so no corpus is sampled.
"""

import dataclasses
import os

import numpy as np
import pytest

from cfka_jax import cli, jsonio
from cfka_jax.continual.replay import check_replay_dir
from cfka_jax.data.pipeline import build_data
from cfka_jax.data.stages import stage_tasks
from cfka_jax.provenance import KEY, docs_fingerprint, model_fingerprint
from cfka_jax.runs import ensemble as ens
from cfka_jax.runs import stream
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.replay import (ReplaySwitches, checkpoint_made_from, model_replay_made_from, real_replay_config,
                                  replay_made_from, synthetic_replay_config)
from cfka_jax.runs.specs import PTSpec
from tests.experiments.test_corpus_cpt import world  # noqa: F401  (fixture: corpus, MC files, tiny model)
from tests.experiments.test_knowedit import setup  # noqa: F401  (fixture: KnowEdit file, tiny model)


def _listing(root) -> list[tuple[str, int, int]]:
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(folder, name))
            out.append((os.path.relpath(os.path.join(folder, name), root), st.st_size, st.st_mtime_ns))
    return sorted(out)


def _stale_corpus(folder, rcfg, made_from) -> None:
    """A corpus ``config.json`` as ``save_replay`` writes it (its presence marks a whole corpus)."""
    jsonio.write_json_atomic(folder / "config.json", {**rcfg.to_json(), KEY: made_from}, indent=1)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return build_data(BIOGRAPHY["smoke"].data_config(), tmp_path_factory.mktemp("cache"))


def _finished(folder: RunFolder, run, preset, step: int) -> None:
    folder.start(run, preset)
    jsonio.write_json_atomic(folder.path / "final.json", {"step": step})


def test_stream_stage_corpus_of_another_start_run_is_refused(bundle, tmp_path):
    spec = stream.StreamSpec(out=str(tmp_path / "s"), methods=("stoc",), stages=2, pt_dir=str(tmp_path / "pt"),
                             progress=False)
    p = spec.scale
    _finished(RunFolder(tmp_path / "pt"), spec.pt_spec(), p, p.pt.steps)
    stage1 = RunFolder(tmp_path / "s" / "stage1")
    _finished(stage1, stream.StageRun(spec, 1, "stoc"), p, 3)
    expected = replay_made_from(bundle, stage1.path)
    stage2 = RunFolder(tmp_path / "s" / "stage2")
    stage2.start(stream.StageRun(spec, 2, "stoc"), p)
    (stage2.path / "replay").mkdir()
    rcfg = synthetic_replay_config("stoc", bundle.config.seq_len, ReplaySwitches(), spec.seed + 2)
    _stale_corpus(stage2.path / "replay", rcfg, {**expected, "parent_step": 2})  # stage 1 was re-run since
    check_replay_dir(stage2.path / "replay", {**expected, "parent_step": 2})  # the corpus's own record passes
    before = _listing(tmp_path)
    tasks = stage_tasks(bundle, 2)
    with pytest.raises(ValueError) as err:  # refused before the (absent) model is used
        stream.StageContext(spec, bundle, tasks, 2, None, stage2, None).generative_replay("stoc")
    msg = str(err.value)
    assert msg.startswith(f"--out {stage2.path / 'replay'} was made from something else") and "parent_step 2" in msg
    assert "\n" not in msg and _listing(tmp_path) == before


def test_pt_checkpoint_corpus_of_another_pt_run_is_refused(bundle, tmp_path):
    from cfka_jax.experiments import stoc_regime as sr

    p = BIOGRAPHY["smoke"]
    for seed in (0, 1):
        RunFolder(tmp_path / f"pt{seed}").start(PTSpec(preset="smoke", out=str(tmp_path / f"pt{seed}"), seed=seed),
                                                p)
    ours, theirs = checkpoint_made_from(bundle, tmp_path / "pt0", 4), checkpoint_made_from(bundle, tmp_path / "pt1", 4)
    assert ours["parent_run"] != theirs["parent_run"] and ours["parent_step"] == 4
    assert checkpoint_made_from(bundle, tmp_path / "pt0", 6)["parent_step"] == 6
    cfg = sr.RegimeConfig(preset="smoke", pt_dir=str(tmp_path / "pt0"), out=str(tmp_path / "out"),
                          kinds=("stoc_j1",), pt_checkpoint=True, progress=False)
    folder = tmp_path / "out" / "replay-stoc_j1-seed0-pt4"
    folder.mkdir(parents=True)
    rcfg = synthetic_replay_config("stoc", bundle.config.seq_len, sr.switches(cfg, "stoc_j1"), 0)
    _stale_corpus(folder, rcfg, theirs)
    before = _listing(tmp_path)
    with pytest.raises(ValueError) as err:
        sr.measure_corpus(cfg, "stoc_j1", 0, None, 4, bundle)
    msg = str(err.value)
    assert msg.startswith(f"--out {folder} was made from something else") and "parent_run" in msg
    assert "parent_step" not in msg and "\n" not in msg and _listing(tmp_path) == before


def _cli(argv, capsys) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err.strip()


def test_knowedit_corpus_of_another_model_is_refused(setup, tmp_path, capsys):  # noqa: F811
    from cfka_jax.models import load_tokenizer
    from cfka_jax.runs.presets import KNOWEDIT

    root, out = setup, tmp_path / "ke"
    tok = load_tokenizer(root / "model")
    stale = {"tokenizer": "sha256:0", "parent_model": "sha256:another-model", "sources": "sha256:0"}
    (out / "replay-stoc").mkdir(parents=True)
    _stale_corpus(out / "replay-stoc", real_replay_config("stoc", KNOWEDIT["smoke"], seed=0), stale)
    before = _listing(tmp_path)
    code, err = _cli(["knowedit", "--data", str(root / "test.json"), "--model", str(root / "model"), "--out",
                      str(out), "--preset", "smoke", "--methods", "naive,stoc", "--no-progress"], capsys)
    assert code == 2 and "\n" not in err, err
    assert f"--out {out / 'replay-stoc'} was made from something else" in err and "parent_model" in err
    assert f"(this run: {model_fingerprint(root / 'model')})" in err
    assert _listing(tmp_path) == before  # no run folder of naive or stoc started
    assert model_replay_made_from(root / "model", tok, [[1, 2]])["tokenizer"] != "sha256:0"


def test_corpus_cpt_corpus_of_another_model_or_corpus_is_refused(world, tmp_path, capsys):  # noqa: F811
    from cfka_jax.runs.presets import CORPUS

    root, _ = world
    out = tmp_path / "run"
    argv = ["corpus-cpt", "--data", str(root / "corpus"), "--model", str(root / "model"), "--out", str(out),
            "--method", "stoc", "--preset", "smoke", "--mc-original", str(root / "elementary_mathematics_test.csv"),
            "--mc-domain", str(root / "law.jsonl"), "--heldout", "0.2", "--no-progress"]
    (out / "replay").mkdir(parents=True)
    rcfg = real_replay_config("stoc", CORPUS["smoke"], seed=0)
    for key in ("parent_model", "sources"):
        _stale_corpus(out / "replay", rcfg, {"tokenizer": "sha256:0", "parent_model": "sha256:0", "sources":
                                              "sha256:0", key: "sha256:another"})
        before = _listing(tmp_path)
        code, err = _cli(argv, capsys)
        assert code == 2 and "\n" not in err, err
        assert f"--out {out / 'replay'} was made from something else" in err and f"{key} sha256:another" in err
        assert _listing(tmp_path) == before and not (out / "config.json").exists()  # no run folder started


def test_docs_and_model_fingerprints_see_content_not_names(tmp_path):
    assert docs_fingerprint([np.array([1, 2]), np.array([3])]) == docs_fingerprint([[1, 2], [3]])
    assert docs_fingerprint([[1, 2], [3]]) != docs_fingerprint([[1], [2, 3]])
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        (tmp_path / name / "model.safetensors").write_bytes(b"weights")
    assert model_fingerprint(tmp_path / "a") == model_fingerprint(tmp_path / "b")
    (tmp_path / "b" / "model.safetensors").write_bytes(b"weightz")  # same size, other bytes
    assert model_fingerprint(tmp_path / "a") != model_fingerprint(tmp_path / "b")
    with pytest.raises(ValueError, match="not a model folder"):
        model_fingerprint(tmp_path)


def _ensemble(spec, phase: str, step: int, made_from=None) -> ens.EnsembleResult:
    return ens.EnsembleResult(spec, phase, None, None, None, np.array([step]), np.zeros((1, len(spec.seeds))),
                              np.zeros(len(spec.seeds), np.int64), 0.0, made_from)


def test_ensemble_of_another_pt_ensemble_or_recording_nothing_is_refused(bundle, tmp_path):
    spec = ens.EnsembleSpec(preset="smoke", seeds=(0, 1))
    pt, other = _ensemble(spec, "pt", 12), _ensemble(dataclasses.replace(spec, seeds=(0, 2)), "pt", 12)
    record = {"spec": dataclasses.asdict(spec), "phase": "cpt", "steps": [4], "losses": [[1.0, 1.0]],
              "nonfinite": [0, 0], "seconds": 1.0}
    cases = {"another PT ensemble": ({KEY: ens.ensemble_made_from(bundle, "cpt", other)}, "parent_run"),
             "another PT step": ({KEY: ens.ensemble_made_from(bundle, "cpt", _ensemble(spec, "pt", 6))},
                                 "parent_step 6"),
             "another world": ({KEY: {**ens.ensemble_made_from(bundle, "cpt", pt), "world": "sha256:0"}}, "world"),
             "no provenance": ({}, "records no provenance")}
    for name, (extra, part) in cases.items():
        path = tmp_path / name.replace(" ", "-")
        jsonio.write_json_atomic(path / "ensemble.json", {**record, **extra})
        before = _listing(tmp_path)
        with pytest.raises(ValueError) as err:  # before params/ (absent here) is read
            ens.load_ensemble(path, spec, bundle, phase="cpt", parent=pt)
        msg = str(err.value)
        assert msg.startswith(f"--out {path}") and part in msg and "\n" not in msg, (name, msg)
        assert _listing(tmp_path) == before
    assert pt.identity() != other.identity() and pt.identity()["parent_step"] == 12
