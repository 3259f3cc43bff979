"""Validate, then write: every command resolves its inputs (files, folders, models, tokenizers, φ, the mesh, option
combinations against the model's shape) before it creates or changes ``--out``, and refuses bad input with one line
naming the option, exit 2, leaving ``--out`` as it found it. One test per class of failure that preceded the
contract; each command runs under :func:`tests.reliability.inputs.tripwire`, so a command that reaches its first
write fails the test instead of starting a run (nothing here trains)."""

from __future__ import annotations

import json
import os

import pytest

from cfka_jax import cli
from tests.reliability.inputs import BLOCKS, Wrote, refused, tripwire, write_world

MISSING = "/nonexistent/cfka-validate"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return write_world(tmp_path_factory.mktemp("validate-first"))


def reaches_a_write(argv: list[str], root) -> str:
    """``cfka argv`` is accepted: it resolves every input and stops at its first write (the path)."""
    with pytest.raises(Wrote) as wrote, tripwire(root):
        cli.main(argv)
    return str(wrote.value)


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    return tmp_path


# ------------------------------------------------------------- refused only after writing into --out (now: before)


def test_an_option_the_models_shape_refuses_leaves_out_absent_and_the_corrected_command_runs(world, here, capsys):
    """``corpus-cpt`` and ``knowedit --freeze-layers 5`` on a 2-block model were refused after ``config.json`` was
    written, so the corrected command was then refused as "a run made with other settings". Now nothing is written
    and the corrected command reaches its run (LoRA on scanned blocks is a run, not a refusal)."""
    out = here / "run"
    corpus = ["corpus-cpt", "--data", str(world["corpus"]), "--model", str(world["model"]), "--out", str(out),
              "--preset", "smoke", "--update", "freeze", "--no-progress"]
    last = refused([*corpus, "--freeze-layers", "5"], here, capsys)
    assert "--freeze-layers 5" in last and f"{BLOCKS} blocks" in last and not out.exists()
    assert reaches_a_write([*corpus, "--freeze-layers", "1"], here) == str(out)  # not "another run"
    lora = here / "lora"
    assert reaches_a_write(["corpus-cpt", "--data", str(world["corpus"]), "--model", str(world["model"]), "--out",
                            str(lora), "--preset", "smoke", "--update", "lora", "--scan-layers", "--no-progress"],
                           here) == str(lora)
    knowedit = ["knowedit", "--data", str(world["knowedit"]), "--model", str(world["model"]), "--out", str(out),
                "--preset", "smoke", "--methods", "naive", "--update", "freeze", "--no-progress"]
    last = refused([*knowedit, "--freeze-layers", "5"], here, capsys)
    assert "--freeze-layers 5" in last and f"{BLOCKS} blocks" in last and not out.exists()
    assert reaches_a_write([*knowedit, "--freeze-layers", "1"], here).startswith(str(out))


def test_taalm_with_a_folder_that_is_no_model_writes_no_config(world, here, capsys):
    """``cfka taalm --lama-ckl … --model NOT_A_MODEL`` wrote ``config.json`` first; it then blocked the right model."""
    out = here / "lama"
    base = ["taalm", "--lama-ckl", str(world["lama"]), "--out", str(out), "--methods", "Finetune", "--no-progress"]
    last = refused([*base, "--model", str(world["lama"])], here, capsys)  # a folder, but no model in it
    assert str(world["lama"]) in last and not out.exists()
    assert reaches_a_write([*base, "--model", str(world["model"])], here).startswith(str(out))


@pytest.mark.parametrize("damage", ["lama", "twiki"])
def test_a_malformed_benchmark_line_leaves_out_unchanged(world, here, capsys, tmp_path_factory, damage):
    """A malformed LAMA-CKL or TemporalWiki line was read after ``config.json`` was written; now it is named
    (file and line) before ``--out`` is touched, and an existing ``--out`` stays byte-identical."""
    import shutil

    copy = tmp_path_factory.mktemp("bad") / damage
    shutil.copytree(world[damage], copy)
    if damage == "lama":
        path, flag = copy / "variant.jsonl", "--lama-ckl"
    else:
        path, flag = sorted((copy / "train").glob("*.jsonl"))[0], "--temporalwiki"
    path.write_text(path.read_text() + "{not json\n")
    from cfka_jax.experiments import taalm_real
    from cfka_jax.runs.ckl_real import start_folder

    out = here / "out"
    argv = [flag, str(copy), "--model", str(world["model"]), "--out", str(out), "--methods", "Finetune",
            "--no-progress"]
    start_folder(taalm_real.FLAGS.parse(argv).spec())  # the folder of this run, started before the line was damaged
    last = refused(["taalm", *argv], here, capsys)
    assert str(path) in last and "line" in last
    assert os.listdir(out) == ["config.json"]


def test_a_phi_of_another_tokenizer_is_refused_before_writing(world, here, capsys):
    """φ's body with another tokenizer was refused after ``config.json`` was written."""
    out = here / "lama"
    last = refused(["taalm", "--lama-ckl", str(world["lama"]), "--model", str(world["model"]), "--phi-model",
                    str(world["other_model"]), "--phi-train", str(world["phi_train"]), "--out", str(out),
                    "--methods", "TAALM", "--no-progress"], here, capsys)
    assert "--phi-model" in last and "tokenizer" in last and not out.exists()


@pytest.mark.parametrize("command", ["corpus-cpt", "knowedit", "taalm", "cpt", "pt", "stoc-table", "sweep"])
def test_a_mesh_larger_than_the_machine_is_refused_before_writing(world, here, capsys, command):
    import jax

    mesh = f"data={jax.device_count() + 1}"
    argv = {"corpus-cpt": ["--data", str(world["corpus"]), "--model", str(world["model"]), "--preset", "smoke"],
            "knowedit": ["--data", str(world["knowedit"]), "--model", str(world["model"]), "--preset", "smoke"],
            "taalm": ["--lama-ckl", str(world["lama"]), "--model", str(world["model"]), "--methods", "Finetune"],
            "cpt": ["--preset", "smoke"], "pt": ["--preset", "smoke"], "stoc-table": ["--preset", "smoke"],
            "sweep": []}[command]
    last = refused([command, *argv, "--out", str(here / "out"), "--mesh", mesh], here, capsys)
    assert f"--mesh {mesh}" in last and "devices" in last


@pytest.mark.parametrize("command", ["corpus-cpt", "knowedit"])
def test_loss_chunk_with_a_token_objective_it_cannot_compute_is_refused_naming_both(world, here, capsys, command):
    methods = ["--method", "rho1"] if command == "corpus-cpt" else ["--methods", "naive,rho1"]
    last = refused([command, "--data", str(world["corpus" if command == "corpus-cpt" else "knowedit"]), "--model",
                    str(world["model"]), "--out", str(here / "out"), "--preset", "smoke", "--loss-chunk", "8",
                    *methods], here, capsys)
    assert "--loss-chunk" in last and "rho1" in last


# --------------------------------------------------------------------- accepted silently with a wrong result


def test_option_combinations_that_cannot_apply_fail_up_front_naming_both_options(world, here, capsys):
    """``--freeze-layers`` without ``--update freeze`` (it was ignored), ``--freeze-layers`` >= the model's blocks
    (every block frozen), ``--lora-rank`` < 1, ``--lora-rank`` without LoRA: one line naming both options."""
    model = ["--data", str(world["corpus"]), "--model", str(world["model"]), "--out", str(here / "o"), "--preset",
             "smoke"]
    cases = [
        (["cpt", "--freeze-layers", "7"], ["--freeze-layers 7", "--update full"]),
        (["corpus-cpt", *model, "--freeze-layers", "7"], ["--freeze-layers 7", "--update full"]),
        (["corpus-cpt", *model, "--update", "freeze", "--freeze-layers", str(BLOCKS)],
         [f"--freeze-layers {BLOCKS}", f"{BLOCKS} blocks"]),
        (["cpt", "--update", "freeze", "--freeze-layers", "2"], ["--freeze-layers 2", "2 blocks"]),
        (["corpus-cpt", *model, "--update", "lora", "--lora-rank", "0"], ["--lora-rank", "0"]),
        (["cpt", "--lora-rank", "8"], ["--lora-rank 8", "--update lora"]),
        (["taalm", "--lama-ckl", str(world["lama"]), "--model", str(world["model"]), "--out", str(here / "o"),
          "--methods", "Finetune", "--update", "freeze", "--freeze-layers", str(BLOCKS)],
         [f"--freeze-layers {BLOCKS}", "blocks"]),
    ]
    for argv, words in cases:
        last = refused(argv, here, capsys)
        assert all(w in last for w in words), (argv, last)


def test_stoc_regime_refuses_what_it_ran_with_or_crashed_on(here, capsys):
    """``python -m cfka_jax.experiments.stoc_regime`` (a script of its own): ``--bpe-vocab 0`` ran with the
    word-level tokenizer; ``--pt-dir MISSING`` and ``--lora-rank 0`` (after a replay corpus was drawn) were
    tracebacks; ``--seeds -1`` / ``one`` did not name the option. Each is now one line naming the option, exit 2,
    before any data is built."""
    from cfka_jax.experiments import stoc_regime

    base = ["--preset", "smoke", "--out", "study", "--cache-dir", "cache"]
    cases = [(["--pt-dir", "pt", "--bpe-vocab", "0"], "--bpe-vocab"),
             (["--pt-dir", MISSING], f"--pt-dir {MISSING}"),
             (["--pt-dir", "pt", "--train", "--lora-rank", "0"], "--lora-rank"),
             (["--pt-dir", "pt", "--train", "--freeze-layers", "1"], "--freeze-layers 1"),
             (["--pt-dir", "pt", "--seeds", "-1"], "--seeds"), (["--pt-dir", "pt", "--seeds", "one"], "--seeds")]
    for extra, words in cases:
        with pytest.raises(SystemExit) as exit_info, tripwire(here):
            stoc_regime.main([*base, *extra])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "Traceback" not in err, (extra, err)
        assert words in err.strip().splitlines()[-1], (extra, err)
    assert os.listdir(here) == []


# ------------------------------------------------------------------------- tracebacks instead of one line


@pytest.mark.parametrize("line, words", [("[1, 2]", "expected a JSON object"), ('{"kind": "eval", "loss": 1}', "'step'"),
                                         ('{"kind": "train", "step": -3}', "'step'"), ('{"step": 4}', "'kind'")])
def test_report_names_the_file_and_line_of_a_malformed_metrics_record(here, capsys, line, words):
    run = here / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "loss": 2.0}) + "\n" + line + "\n"
                                       + json.dumps({"kind": "train", "step": 2, "loss": 1.0}) + "\n")
    last = refused(["report", str(run), "--out", str(here / "report")], here, capsys)
    assert f"{run / 'metrics.jsonl'}, line 2" in last and words in last


# -------------------------------------------------------------------- messages that did not name the option


@pytest.mark.parametrize("argv, option", [
    (["geometry", "select", "--seeds", "-1"], "--seeds"),
    (["geometry", "erosion", "--seeds", "0,-1"], "--seeds"),
    (["geometry", "transmission", "--seeds", "one"], "--seeds"),
    (["geometry", "transmission", "--sft-lr", "nan"], "--sft-lr"),
    (["sweep", "--seeds", "-2"], "--seeds"),
    (["stoc-scale", "--alpha", "inf"], "--alpha"),
    (["taalm", "--preset", "smoke", "--record-seeds", "1,x"], "--record-seeds"),
])
def test_a_bad_number_is_refused_as_it_is_parsed_naming_the_option(here, capsys, argv, option):
    """Every integer option is >= 0 and every number finite, checked when the command line is parsed (``cfka_jax/
    cli_gen.number``), so a NaN learning rate never reaches a fine-tune after a CPT has run."""
    last = refused(argv, here, capsys)
    assert f"Error parsing {option}" in last, last


# ----------------------------------------------------------------------- a missing input that started a long job


def test_stream_with_a_missing_pt_dir_refuses_instead_of_pretraining_into_it(here, capsys):
    last = refused(["stream", "--preset", "smoke", "--stages", "2", "--pt-dir", str(here / "pt"), "--out",
                    str(here / "stream"), "--cache-dir", str(here / "cache")], here, capsys)
    assert f"--pt-dir {here / 'pt'}" in last and "no finished PT run" in last
    assert os.listdir(here) == []  # no PT run started, no data built
    # without --pt-dir a PT run is trained in <out>/pt-<preset>-<arch> (after the data is built)
    assert reaches_a_write(["stream", "--preset", "smoke", "--stages", "2", "--out", str(here / "stream"),
                            "--cache-dir", str(here / "cache")], here).startswith(str(here / "cache"))


def test_a_missing_input_file_is_refused_as_it_is_parsed_naming_the_option(world, here, capsys):
    """Options that name input files or folders (``cli_gen.Flags.inputs``) are checked to exist before anything runs."""
    base = ["corpus-cpt", "--data", str(world["corpus"]), "--model", str(world["model"]), "--out", str(here / "o")]
    for argv, option in [([*base, "--mc-dev", MISSING], "--mc-dev"),
                         (["knowedit", "--data", MISSING, "--model", str(world["model"]), "--out", "o"], "--data"),
                         (["taalm", "--biography", MISSING, "--preset", "smoke"], "--pt-dir")]:
        last = refused(argv, here, capsys)
        assert f"{option} {MISSING}: no such file or folder" in last, last
    assert f"--config {MISSING}: no such sweep config file" in refused(["sweep", "--config", MISSING], here, capsys)
