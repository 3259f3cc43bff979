"""Bad input on the surfaces added after the engine's hardening (issue 24): TAALM, token weights, geometry, the
theory sweep, invariants, di-attention. Each case is generated here; it must fail with one message naming the flag,
file, line or key at fault, exit 2 on the command line, and write nothing.

The φ-provenance refusals and the TAALM kill-and-resume test live in ``test_provenance.py`` and
``test_taalm_resume.py``.
"""

import json
import math
import os

import pytest

from cfka_jax import cli
from cfka_jax.data import lama_ckl, mmlu, temporalwiki
from cfka_jax.experiments import theory_sweep


def _listing(root) -> list[tuple[str, int, int]]:
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(folder, name))
            out.append((os.path.relpath(os.path.join(folder, name), root), st.st_size, st.st_mtime_ns))
    return sorted(out)


# ------------------------------------------------------------------------------------------ numbers on the CLI

CLI_CASES = [
    (["geometry", "onestep", "--eta", "nan"], "--eta"),
    (["geometry", "onestep", "--eta=-1e-4"], "--eta"),
    (["geometry", "onestep", "--eta", "inf"], "--eta"),
    (["geometry", "coldstart", "--lr", "inf"], "--lr"),
    (["geometry", "energy", "--taus", "inf,nan"], "--taus"),
    (["geometry", "energy", "--taus", "1.5,1.5"], "--taus"),
    (["sweep", "--ks", "0,nan"], "--ks"),
    (["sweep", "--ks", "0,-1"], "--ks"),
    (["sweep", "--ks", "1,1"], "--ks"),
    (["sweep", "--eta", "inf"], "--eta"),
    (["sweep", "--alphas", "0.5,1.5"], "--alphas"),
    (["cpt", "--bpe-vocab", "0"], "--bpe-vocab"),
]


@pytest.mark.parametrize("argv,flag", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_non_finite_or_out_of_range_flags_exit_2_naming_the_flag(argv, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert flag in last and "error" in last
    assert _listing(tmp_path) == []


def test_sweep_config_file_numbers_are_checked_naming_file_and_key(tmp_path):
    bad = {"ks.json": ('{"ks": [0.0, 1.0, 1.0]}', "'ks'"),
           "eta.toml": ("eta_y = -0.5\n", "'eta_y'"),
           "nan.toml": ("eta_y = nan\n", "'eta_y'"),
           "syntax.toml": ("ks = [0.0,\nalphas = 1\n", "line 2")}
    for name, (text, fragment) in bad.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError) as exc:
            theory_sweep.load_config(["--config", str(path)])
        msg = str(exc.value)
        assert str(path) in msg and fragment in msg and "\n" not in msg, msg


# ---------------------------------------------------------------------------------------------- data readers


def _lama_record(**over) -> dict:
    rec = lama_ckl.make_record("employer", "u1", "Ann Lee", "Acme", "Ann Lee now works for Acme in the city.",
                               invariant=False).as_dict()
    return {**rec, **over}


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.1, 1.5])
def test_lama_ckl_position_must_be_a_finite_ratio(value, tmp_path):
    path = tmp_path / "variant.jsonl"
    path.write_text(json.dumps(_lama_record()) + "\n" + json.dumps(_lama_record(uuid="u2", position=value)) + "\n")
    with pytest.raises(ValueError, match=r"variant\.jsonl, line 2: field 'position' must be a finite number"):
        lama_ckl.read_lama_ckl(path)


@pytest.mark.parametrize("reader,name", [(lama_ckl.read_lama_ckl, "variant.jsonl"),
                                         (lama_ckl.read_lama_ckl, "invariant_descriptive.jsonl"),
                                         (temporalwiki.read_probes, "0901-1001_changed.jsonl"),
                                         (temporalwiki.read_ta_rows, "ta.jsonl")])
@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_empty_evaluation_files_are_errors(reader, name, text, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"{name}: no .*empty file"):
        reader(path)


def test_diffset_with_no_row_passing_the_filter_is_an_error(tmp_path):
    path = tmp_path / "wikipedia_0910_gpt2.csv"
    path.write_text("text\nshort\n12345678901234567890123456789012345678901234567890123\n")
    with pytest.raises(ValueError, match="no row passes the diffset filter"):
        temporalwiki.read_diffset_csv(path)


GARBAGE = bytes(range(128, 256)) * 4


@pytest.mark.parametrize("reader,name", [(mmlu.read_mc_csv, "law_test.csv"),
                                         (temporalwiki.read_diffset_csv, "wikipedia_0910_gpt2.csv")])
@pytest.mark.parametrize("payload", [GARBAGE, b"q,a,b,c,d,A\n" + GARBAGE, b"ok,\x00,b,c\n"])
def test_binary_csv_names_file_and_line(reader, name, payload, tmp_path):
    path = tmp_path / name
    path.write_bytes(payload)
    with pytest.raises(ValueError) as exc:
        reader(path)
    msg = str(exc.value)
    assert f"{name}, line " in msg and ("UTF-8" in msg or "NUL" in msg), msg


def test_bpe_vocabulary_larger_than_the_corpus_makes_is_refused_before_writing(tmp_path):
    from cfka_jax.data.tokenize import train_word_tokenizer

    with pytest.raises(ValueError, match=r"--bpe-vocab\) 10000000: this corpus makes at most \d+ BPE entries"):
        train_word_tokenizer(["the cat sat on the mat", "a dog sat on the log"] * 5, tmp_path / "tok",
                             bpe_vocab=10_000_000)
    assert not (tmp_path / "tok").exists()


# ------------------------------------------------------------------------------ damaged files of run folders


def _cli(argv, capsys) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("text,fragment", [('{"run": {"preset": "huge", "arch": "qwen"}}', "'run.preset' = 'huge'"),
                                           ('{"run": {"preset": "smoke", "arch"', "line 1: invalid JSON"),
                                           (b"\xff\xfe{}", "invalid UTF-8")])
def test_invariants_on_a_bad_run_config_exits_2_naming_the_file(text, fragment, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    before = _listing(tmp_path)
    code, err = _cli(["invariants", str(run)], capsys)
    assert code == 2 and str(run / "config.json") in err and fragment in err and "\n" not in err, err
    assert _listing(tmp_path) == before


def _truncate_arrays(ckpt) -> None:
    """Every array file of an orbax checkpoint cut to a third (a disk fault after the write)."""
    files = [p for p in ckpt.rglob("*") if p.is_file() and p.stat().st_size > 0 and "d" in p.parent.name]
    assert files, f"no array files under {ckpt}"
    for p in files:
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 3])


def _garbage_metadata(ckpt) -> None:
    files = list(ckpt.rglob("_METADATA"))
    assert files, f"no _METADATA under {ckpt}"
    for p in files:
        p.write_bytes(bytes(range(256)) * 4)


def _no_manifests(ckpt) -> None:
    files = [p for p in ckpt.rglob("*") if p.is_file() and "manifest" in p.name]
    assert files, f"no OCDBT manifest under {ckpt}"
    for p in files:
        p.unlink()


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """A smoke PT run folder with checkpoints at steps 6 and 12 (no final parameters), and its data cache."""
    import jax
    import numpy as np
    from flax import nnx

    from cfka_jax.data.pipeline import build_data
    from cfka_jax.runs.biography import build_model
    from cfka_jax.runs.folder import RunFolder
    from cfka_jax.runs.specs import PTSpec
    from cfka_jax.train.checkpoint import CheckpointDir
    from cfka_jax.train.step import TrainState

    root = tmp_path_factory.mktemp("invariants")
    spec = PTSpec(preset="smoke", out=str(root / "run"), cache_dir=str(root / "data"), progress=False)
    bundle = build_data(spec.scale.data_config(), root / "data")
    RunFolder(root / "run").start(spec, spec.scale)
    _, params, _ = nnx.split(build_model(spec.scale, "qwen", len(bundle.tokenizer), seed=0), nnx.Param, ...)
    for step in (6, 12):
        CheckpointDir(root / "run" / "checkpoints").save(step, TrainState(jax.tree.map(lambda x: x * 1.1, params),
                                                                            (), np.int32(step)))
    return root


@pytest.mark.parametrize("damage", [_truncate_arrays, _garbage_metadata, _no_manifests],
                         ids=lambda f: f.__name__.strip("_"))
def test_invariants_on_a_damaged_checkpoint_exits_2_naming_its_folder(damage, smoke_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(smoke_run / "run", run)
    damage(run / "checkpoints" / "12")
    before = _listing(tmp_path)
    code, err = _cli(["invariants", str(run)], capsys)
    lines = [line for line in err.splitlines() if line.startswith("cfka invariants")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"checkpoint {run / 'checkpoints' / '12'} " in lines[0] and "remove that folder" in lines[0], err
    assert _listing(tmp_path) == before  # no invariants/ folder, nothing rewritten


def test_taalm_folder_with_a_torn_config_or_result_names_the_file(tmp_path, capsys):
    from cfka_jax.experiments import taalm_stages

    out = tmp_path / "taalm"
    out.mkdir()
    (out / "config.json").write_text('{"preset": "smoke", "data": {')
    before = _listing(tmp_path)
    code, err = _cli(["taalm", "--preset", "smoke", "--out", str(out), "--no-progress"], capsys)
    assert code == 2 and f"{out / 'config.json'}, line 1: invalid JSON" in err, err
    assert _listing(tmp_path) == before
    torn = out / "lama" / "taalm.json"
    torn.parent.mkdir()
    torn.write_text('{"summary": {"top_acc": 0.')
    with pytest.raises(ValueError, match=r"lama/taalm\.json, line 1: invalid JSON"):
        taalm_stages._read(torn)


def test_taalm_folder_of_other_settings_names_the_folder_and_fields(tmp_path, capsys):
    import dataclasses

    from cfka_jax.experiments import taalm, taalm_stages

    out = tmp_path / "taalm"
    taalm_stages.check_config(out, taalm.preset("smoke", str(out)))
    other = dataclasses.replace(taalm.preset("smoke", str(out)), review="disjoint")
    with pytest.raises(ValueError, match=rf"--out {out} was made with other settings .*review differ"):
        taalm_stages.check_config(out, other)
