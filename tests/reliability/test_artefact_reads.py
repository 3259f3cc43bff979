"""Damaged run artefacts read back by a later command (issue 24): ``ensemble.json`` and its progress records,
``.npz`` arrays (GPM bases, di-attention's ``attention.npz``, geometry snapshots), the TAALM-on-real-files records
(``history.json``, ``periods.json``, method results), stream summaries and replay corpora. Each damaged file is
generated here; the error must be a one-line ``ValueError`` (or ``OSError`` for a missing file) naming the file.
"""

import json

import numpy as np
import pytest

from cfka_jax import jsonio
from cfka_jax.continual import gpm, replay
from cfka_jax.runs import ckl_real
from cfka_jax.runs.ensemble import EnsembleSpec, load_ensemble

NPZ_DAMAGE = {
    "truncated": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "garbage": lambda b: b"\x00\xff" * 64,
    "flipped": lambda b: b[:40] + bytes(x ^ 0xFF for x in b[40:80]) + b[80:],
}


def _one_line_error(fn, *names, exc=ValueError):
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg, msg
    for name in names:
        assert str(name) in msg, msg
    return msg


@pytest.mark.parametrize("damage", sorted(NPZ_DAMAGE))
def test_damaged_npz_names_the_file(damage, tmp_path):
    good = tmp_path / "good.npz"
    gpm.save_bases(good, {("layers", 0, "mlp"): np.eye(3, 2, dtype=np.float32)})
    assert gpm.load_bases(good)[("layers", 0, "mlp")].shape == (3, 2)
    bad = tmp_path / "bases.npz"
    bad.write_bytes(NPZ_DAMAGE[damage](good.read_bytes()))
    _one_line_error(lambda: gpm.load_bases(bad), bad)


def test_npz_missing_arrays_and_object_arrays_are_named(tmp_path):
    from cfka_jax.experiments.di_attention import training_change

    path = tmp_path / "attention.npz"
    np.savez(path, eligible=np.ones(3, bool), z_ELM=np.ones((1, 1, 3)))
    msg = _one_line_error(lambda: training_change(path), path, "'z_init_ELM'")
    assert "missing" in msg
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, a=np.array([{"x": 1}], dtype=object))
    _one_line_error(lambda: jsonio.read_npz(pickled), pickled)
    _one_line_error(lambda: jsonio.read_npz(tmp_path / "absent.npz"), tmp_path / "absent.npz", exc=OSError)


ENSEMBLE_CASES = {
    "torn": ('{"spec": {"preset": "smoke"', "line 1"),
    "list": ("[1, 2]", "JSON object"),
    "no steps": (json.dumps({"spec": {}, "phase": "pt", "losses": [], "nonfinite": [], "seconds": 1.0}),
                 "'steps'"),
    "unknown spec field": (json.dumps({"spec": {"preset": "smoke", "seeds": [0], "colour": 1}, "phase": "pt",
                                       "steps": [], "losses": [], "nonfinite": [], "seconds": 1.0}), "'spec'"),
    "bad spec value": (json.dumps({"spec": {"preset": "nope", "seeds": [0]}, "phase": "pt", "steps": [],
                                   "losses": [], "nonfinite": [], "seconds": 1.0}), "'spec'"),
    "binary": (b"\xff\xfe\x00garbage", "UTF-8"),
}


@pytest.mark.parametrize("case", sorted(ENSEMBLE_CASES))
def test_damaged_ensemble_json_names_the_file(case, tmp_path):
    text, part = ENSEMBLE_CASES[case]
    path = tmp_path / "ensemble.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    _one_line_error(lambda: load_ensemble(tmp_path, EnsembleSpec(seeds=(0,)), bundle=None), path, part)


@pytest.mark.parametrize("text,part", [("[{\"epoch\": 0}, {\"epo", "line 1"), ('{"epoch": 0}', "list"),
                                       ('[{"epoch": 0}, 3]', "[1]"), ('[{"period": "a"}]', "'epoch'")])
def test_damaged_taalm_real_records_name_the_file(text, part, tmp_path):
    path = tmp_path / "history.json"
    path.write_text(text)
    _one_line_error(lambda: ckl_real._read_list(path, "epoch"), path, part)


def test_damaged_stream_summary_names_the_file(tmp_path):
    from cfka_jax.experiments.stream_sweep import table

    (tmp_path / "naive-seed0").mkdir()
    path = tmp_path / "naive-seed0" / "stream.json"
    path.write_text('{"tasks": ["T0", ')
    _one_line_error(lambda: table(tmp_path), path, "line 1")


@pytest.mark.parametrize("name,text", [("config.json", '{"kind": "stoc", '), ("stats.json", "[]"),
                                       ("prompts.jsonl", '{"source": 0}\n{"sou'), ("config.json", '{"colour": 1}')])
def test_damaged_replay_corpus_names_the_file(name, text, tmp_path):
    folder = tmp_path / "replay"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(replay.ReplayConfig.synthetic("random").to_json()))
    (folder / "stats.json").write_text("{}")
    (folder / "prompts.jsonl").write_text(json.dumps({"source": 0, "start": 0, "end": 1, "ids": [3]}) + "\n")
    for sub in ("candidates", "replay"):
        (folder / sub).mkdir()
    (folder / name).write_text(text)
    _one_line_error(lambda: replay.load_replay(folder), folder / name)
