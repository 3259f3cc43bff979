"""The ``cfka`` command line: every subcommand parses and dispatches to an importable entry point; bad values of
every subcommand give one error line naming the option or path, exit status 2, and write nothing."""

import collections
import os

import pytest

from cfka_jax import cli


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_generated_commands_resolve_once_and_list_every_field_in_help(command, capsys):
    flags, run = cli.resolve(command)
    assert callable(run) and flags.prog == f"cfka {command}"
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "usage" in out
    if hasattr(flags, "commands"):  # cli_gen.Subcommands: `cfka geometry onestep --help`, ...
        for name, sub in flags.commands.commands.items():
            assert name in out
            with pytest.raises(SystemExit) as exit_info:
                cli.main([command, name, "--help"])
            sub_out = capsys.readouterr().out
            assert exit_info.value.code == 0 and sub.prog in sub_out
            _assert_every_field_listed(sub, sub_out)
    elif hasattr(flags, "modes"):  # `cfka taalm`: a study chosen by an option (--biography, --lama-ckl)
        for selector, sub in flags.modes.values():
            with pytest.raises(SystemExit) as exit_info:
                cli.main([command, *selector, "--help"])
            sub_out = capsys.readouterr().out
            assert exit_info.value.code == 0 and sub.prog in sub_out
            _assert_every_field_listed(sub, sub_out)
    else:
        _assert_every_field_listed(flags, out)


def _assert_every_field_listed(flags, out: str) -> None:
    import dataclasses

    for f in dataclasses.fields(flags.config):
        if f.name in flags.nested:  # a nested config's fields are this command's options
            _assert_every_field_listed(flags.nested[f.name], out)
        elif f.name in flags.positional:
            assert flags.metavars[f.name] in out.splitlines()[0], (f.name, out)
        elif f.name not in flags.hidden:
            flag = "--" + flags.names.get(f.name, f.name.replace("_", "-"))
            assert flag in out or flag.replace("--", "--no-", 1) in out, (flag, out)


def test_generated_flags_fill_nested_configs_and_comma_lists():
    from cfka_jax.experiments import stoc_table as st
    from cfka_jax.runs.replay import ReplaySwitches

    cfg = st.parse(["--preset", "smoke", "--alphas", "0.5,0.8", "--kinds", "stoc", "--score-norm", "n_queries",
                    "--no-minhash", "--report-only"])
    assert type(cfg.replay) is ReplaySwitches and cfg.replay == ReplaySwitches(score_norm="n_queries", minhash=False)
    assert (cfg.alphas, cfg.kinds, cfg.report_only) == ((0.5, 0.8), ("stoc",), True)
    assert cfg.table() == st.TableConfig(preset="smoke", out="runs/stoc-smoke", alphas=(0.5, 0.8), kinds=("stoc",),
                                         replay=cfg.replay)
    assert st.parse([]).table() == st.TableConfig(out="runs/stoc-small")


def test_top_level_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert not hasattr(cli, "PASSTHROUGH")  # one dispatch level: every command is generated
    for name in ["proofs", "pt", "cpt", "sweep", "knowedit", "corpus-cpt", "taalm", "geometry", *cli.COMMANDS]:
        assert name in out, name


def test_cpt_parses_generative_replay_switches():
    flags, _ = cli.resolve("cpt")
    cfg = flags.parse(["--method", "stoc", "--alpha", "0.8", "--score-norm", "n_queries", "--snippet-rule",
                       "window_sum", "--no-minhash", "--eval-every", "25"])
    switches = cfg.spec().replay
    assert (cfg.method, cfg.alpha, cfg.eval_every) == ("stoc", 0.8, 25)
    assert (switches.score_norm, switches.snippet_rule, switches.minhash) == ("n_queries", "window_sum", False)
    assert switches.tag == "-score_norm=n_queries-snippet_rule=window_sum-minhash=False"


def test_pt_and_cpt_keep_their_defaults_and_spell_the_spec():
    from cfka_jax.runs.specs import CPTSpec, PTSpec

    pt = cli.resolve("pt")[0].parse([])
    assert pt.spec() == PTSpec(out="runs/pt-smoke-qwen") and pt.distributed is False
    assert type(pt.spec()) is PTSpec
    cpt = cli.resolve("cpt")[0].parse(["--update", "lora", "--lora-rank", "4", "--distributed", "--no-progress"])
    assert cpt.spec() == CPTSpec(update="lora", lora_rank=4, progress=False) and cpt.distributed


def test_boolean_flags_say_what_they_do(capsys):
    with pytest.raises(SystemExit):
        cli.main(["cpt", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(on by default; this flag turns it off)" in out and "(default: True)" not in out
    assert "(off by default)" in out and "(default: False)" not in out


def test_corpus_cpt_and_knowedit_keep_their_flags(tmp_path, monkeypatch):
    from cfka_jax.experiments.corpus_cpt import CorpusCPTConfig
    from cfka_jax.experiments.knowedit import KnowEditRun

    monkeypatch.chdir(tmp_path)  # the input options name files that exist
    for name in ("a.txt", "b,c.txt", "q.csv", "a", "t.json", "m/config.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")

    cc = cli.resolve("corpus-cpt")[0].parse(["--data", "a.txt", "b,c.txt", "--model", "m", "--out", "o", "--steps",
                                             "7", "--lr", "1e-4", "--remat", "--no-minhash", "--mc", "q.csv",
                                             "--domain-subjects", "law", "tax"]).run_config()
    assert type(cc) is CorpusCPTConfig and cc.data == ("a.txt", "b,c.txt") and cc.remat is True
    assert cc.overrides == (("steps", 7), ("lr", 1e-4)) and not cc.minhash and cc.domain_subjects == ("law", "tax")
    assert cli.resolve("corpus-cpt")[0].parse(["--data", "a", "--model", "m", "--out", "o"]).run_config() == \
        CorpusCPTConfig(data=("a",), model="m", out="o")
    ke = cli.resolve("knowedit")[0].parse(["--data", "t.json", "--model", "m", "--out", "o", "--methods",
                                           "naive,stoc + ewc", "--no-wrap-strings", "--update", "lora"])
    assert ke == KnowEditRun(data="t.json", model="m", out="o", methods=("naive", "stoc + ewc"),
                             wrap_strings=False, update="lora")


def test_geometry_subcommands_fill_the_out_default():
    name, cfg = cli.resolve("geometry")[0].parse(["energy", "--scale", "small", "--taus", "inf,1.5"])
    assert name == "energy" and cfg.out is None and cfg.taus == (float("inf"), 1.5)
    from cfka_jax.experiments.geometry import finish

    assert finish(name, cfg)[1].out == "runs/geometry/energy-small"


def test_every_command_reads_a_config_file_under_its_flags(tmp_path):
    from cfka_jax.experiments.cpt import FLAGS as cpt
    from cfka_jax.experiments.pt import FLAGS as pt

    (tmp_path / "pt.toml").write_text('preset = "smoke"\nseed = 3\nprogress = false\ncache-dir = "c"\n')
    cfg = pt.parse(["--config", str(tmp_path / "pt.toml")])
    assert (cfg.preset, cfg.seed, cfg.progress, cfg.cache_dir) == ("smoke", 3, False, "c")
    assert pt.parse([f"--config={tmp_path / 'pt.toml'}", "--seed", "5"]).seed == 5  # the flag over the file
    (tmp_path / "cpt.yaml").write_text("alpha: 0.25\nscore_norm: n_queries\n")  # a nested config's option too
    cfg = cpt.parse(["--config", str(tmp_path / "cpt.yaml")])
    assert cfg.alpha == 0.25 and cfg.replay.score_norm == "n_queries"
    (tmp_path / "c.json").write_text('{"seed": 1}')
    assert pt.parse(["--config", str(tmp_path / "c.json")]).seed == 1


@pytest.mark.parametrize("text, suffix, words", [
    ("sed = 3\n", ".toml", ["unknown key 'sed'"]),
    ("seed = true\n", ".toml", ["key 'seed'", "expected int"]),
    ("preset: huge\n", ".yaml", ["key 'preset'", "'huge'"]),
    ("seed = -1\n", ".toml", ["key 'seed'", ">= 0"]),
    ("[1, 2]", ".json", ["top level"]),
    ("seed = \n", ".toml", ["not a valid config file"]),
])
def test_a_bad_config_file_is_one_line_naming_file_and_key(text, suffix, words, tmp_path, capsys, monkeypatch):
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    assert cli.main(["pt", "--config", str(path), "--out", "o"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(path) in last and all(w in last for w in words), last
    assert sorted(os.listdir(tmp_path)) == [path.name]


def test_options_meant_to_repeat_still_repeat():
    from cfka_jax.proofs_check.command import FLAGS as proofs
    from cfka_jax.experiments.corpus_cpt import FLAGS as corpus

    assert "--extra" in proofs.repeatable() and "--data" not in corpus.repeatable()
    assert proofs.parse(["--extra", "a.py", "--extra", "b.py"]).extra == ("a.py", "b.py")


def test_proofs_extra_takes_several_files_and_repeats():
    flags, _ = cli.resolve("proofs")
    assert flags.parse(["--extra", "a.py", "b.py", "--extra", "c.py"]).extra == ("a.py", "b.py", "c.py")
    assert flags.parse([]).extra == () and flags.parse(["--only", "taylor"]).only == "taylor"


def test_sweep_flags_override_the_config_file_which_overrides_the_defaults(tmp_path):
    from cfka_jax.experiments.theory_sweep import SweepConfig

    grid = tmp_path / "grid.toml"
    grid.write_text("steps = 400\nnum_seeds = 3\nx64 = false\n")
    flags, _ = cli.resolve("sweep")
    cfg = flags.parse(["--config", str(grid), "--seeds", "5", "--eta", "0.25"])
    assert cfg.sweep() == SweepConfig(steps=400, num_seeds=5, eta_y=0.25, x64=False)
    assert flags.parse(["--float32"]).sweep() == SweepConfig(x64=False)


MISSING = "/nonexistent/cfka-test"
HERE = "<an existing folder>"  # the test puts one in its place (input options must name files that exist)
BAD = [  # (argv, words the one error line must contain)
    (["pt", "--seed", "-1"], ["seed"]),
    (["pt", "--ckpt-every", "-2"], ["--ckpt-every", "-2"]),
    (["pt", "--preset", "huge"], ["--preset", "huge"]),
    (["cpt", "--alpha", "1.5"], ["alpha", "1.5"]),
    (["cpt", "--method", "replay-all", "--alpha", "0"], ["alpha"]),
    (["cpt", "--ewc-lambda", "-1"], ["ewc_lambda", "-1"]),
    (["cpt", "--lora-rank", "0", "--update", "lora"], ["--lora-rank", "0"]),
    (["cpt", "--freeze-layers", "7"], ["--freeze-layers 7", "--update freeze", "--update full"]),
    (["cpt", "--update", "freeze", "--freeze-layers", "2"], ["--freeze-layers 2", "2 blocks"]),
    (["cpt", "--lora-rank", "4"], ["--lora-rank 4", "--update lora"]),
    (["cpt", "--mesh", "data=64"], ["--mesh data=64", "64 devices"]),
    (["stream", "--pt-dir", MISSING], ["--pt-dir", MISSING]),
    (["geometry", "select", "--seeds", "-1"], ["--seeds", "-1"]),
    (["geometry", "transmission", "--sft-lr", "nan"], ["--sft-lr", "nan"]),
    (["geometry", "transmission", "--seeds", "one"], ["--seeds", "one"]),
    (["cpt", "--eval-every", "-5"], ["--eval-every", "-5"]),
    (["cpt", "--energy-tau", "0"], ["tau", "0"]),
    (["cpt", "--energy-normalize", "kept"], ["energy_tau"]),
    (["cpt", "--token-weights", MISSING], ["--token-weights", MISSING, "phi.json"]),
    (["cpt", "--pt-dir", MISSING], ["--pt-dir", MISSING]),
    (["cpt", "--method", "dropout"], ["--method", "dropout"]),
    (["proofs", "--only", "no_such_lemma"], ["--only", "no_such_lemma"]),
    (["proofs", "--extra", MISSING + ".py"], ["--extra", MISSING]),
    (["corpus-cpt", "--data", "c.txt", "--model", HERE, "--out", "o", "--steps", "-1"], ["steps", "-1"]),
    (["corpus-cpt", "--data", "c.txt", "--model", HERE, "--out", "o", "--lr", "inf"], ["--lr", "inf"]),
    (["corpus-cpt", "--data", "c.txt", "--model", HERE, "--out", "o", "--method", "stoc", "--alpha", "1"],
     ["--alpha"]),
    (["corpus-cpt", "--data", "c.txt", "--model", HERE, "--out", "o", "--heldout", "0"], ["--heldout"]),
    (["corpus-cpt", "--data", "c.txt", "--model", MISSING, "--out", "o"], [MISSING]),
    (["corpus-cpt", "--model", MISSING, "--out", "o"], ["--data"]),
    (["corpus-cpt", "--data", "c.txt", "--model", HERE, "--out", "o", "--opt-state-dtype", "float16"],
     ["--opt-state-dtype", "float16"]),
    (["knowedit", "--data", "t.json", "--model", HERE, "--out", "o", "--alpha", "2"], ["alpha", "2"]),
    (["knowedit", "--data", "t.json", "--model", HERE, "--out", "o", "--steps", "0"], ["steps"]),
    (["knowedit", "--data", "t.json", "--model", HERE, "--out", "o", "--methods", "no_such_method"], ["--methods", "no_such_method"]),
    (["knowedit", "--data", "t.json", "--model", MISSING, "--out", "o"], [MISSING]),
    (["knowedit", "--data", "t.json", "--out", "o"], ["--model"]),
    (["knowedit", "--data", "t.json", "--model", HERE, "--out", "o", "--mixing", "half"], ["--mixing", "half"]),
    (["stoc-table", "--preset", "smoke", "--alphas", "0.5,1.5"], ["alpha", "1.5"]),
    (["stoc-table", "--preset", "smoke", "--kinds", "stoc,gen"], ["kinds", "gen"]),
    (["stoc-table", "--alphas", "0.5,half"], ["--alphas", "half"]),
    (["stoc-table", "--score-norm", "mean"], ["--score-norm", "mean"]),
    (["sweep", "--config", MISSING + ".toml"], [MISSING]),
    (["geometry", "onestep", "--scale", "paper"], ["--scale", "paper"]),
    (["geometry", "select", "--fraction", "0"], ["fraction"]),
    (["geometry", "transmission", "--resets", "none,top9"], ["top9"]),
    (["geometry"], ["geometry"]),
    (["taalm", "--preset", "huge"], ["--preset", "huge"]),
    (["taalm", "--methods", "Finetune,NoSuchMethod", "--preset", "smoke"], ["NoSuchMethod"]),
    (["taalm", "--biography", MISSING, "--preset", "huge"], ["--preset", "huge"]),
    (["taalm", "--lama-ckl", MISSING, "--out", "o"], ["--model"]),
    (["taalm", "--lama-ckl", MISSING, "--model", MISSING, "--out", "o", "--update", "half"], ["--update", "half"]),
    (["sweep", "--seeds", "3", "--chunk-runs", "2"], ["chunk_runs", "command-line flags"]),
    (["sweep", "--replay", "fake"], ["--replay", "fake"]),
    (["pt", "--bpe-vocab", "3"], ["--bpe-vocab"]),
    (["cpt", "--update", "half"], ["--update", "half"]),
    (["proofs", "--no-such-flag"], ["--no-such-flag"]),
    (["di-attention", "--preset", "tiny", "--out", "o"], ["--preset", "tiny"]),
    (["di-attention", "--seeds", "many", "--out", "o"], ["--seeds", "many"]),
    (["di-attention", "--measures", "fact,cosine", "--out", "o"], ["--measures", "cosine"]),
    (["di-attention", "--seeds", "0", "--out", "o"], ["seeds", "0"]),
    (["di-attention", "--no-such-flag", "--out", "o"], ["--no-such-flag"]),
    (["di-attention", "--preset", "small"], ["--out"]),
    (["stream", "--method", "naive,lora"], ["--method", "lora"]),
    (["stream", "--stages", "2", "--method", "naive,ewc,gpm"], ["--method", "once per stage"]),
    (["stream", "--alpha", "half"], ["--alpha", "half"]),
    (["report"], ["RUN_DIR"]),
    (["report", MISSING], [MISSING]),
    (["invariants"], ["RUN_DIR"]),
    (["invariants", MISSING], [MISSING]),
    # a single-valued option given twice is refused, naming it (the last one does not silently win)
    (["corpus-cpt", "--data", "a.jsonl", "--data", "b.jsonl", "--model", MISSING, "--out", "o"],
     ["--data", "more than once"]),
    (["pt", "--seed", "1", "--seed=2"], ["--seed", "more than once"]),
    (["geometry", "onestep", "--eta", "1e-4", "--eta", "1e-3"], ["--eta", "more than once"]),
    (["claims", "--paper", "cfka", "--paper", "taalm"], ["--paper", "more than once"]),
]


@pytest.mark.parametrize("argv, words", BAD, ids=[" ".join(a[:4]) for a, _ in BAD])
def test_bad_values_give_one_error_line_and_exit_2(argv, words, tmp_path, capsys, monkeypatch, tmp_path_factory):
    inputs = tmp_path_factory.mktemp("inputs")
    (inputs / "c.txt").write_text("a document\n")
    argv = [{"c.txt": str(inputs / "c.txt"), "t.json": str(inputs / "c.txt"), HERE: str(inputs)}.get(a, a)
            for a in argv]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    try:
        code = cli.main(argv)
    except SystemExit as exit_info:  # argparse's own errors (unknown choice, bad type)
        code = exit_info.code
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 2, err
    assert "Traceback" not in err and "error" in last, err
    for word in words:
        assert word in last, (word, last)
    assert os.listdir(tmp_path) == [], "a rejected command wrote files"


def test_xla_flags_add_the_memory_scheduler_and_keep_the_users_settings():
    from cfka_jax.cli import XLA_CPU_FLAGS, xla_flags

    assert xla_flags("") == " ".join(XLA_CPU_FLAGS)
    assert xla_flags("--xla_dump_to=/tmp/x") == "--xla_dump_to=/tmp/x " + " ".join(XLA_CPU_FLAGS)
    mine = "--xla_cpu_enable_concurrency_optimized_scheduler=true"
    assert xla_flags(mine) == mine  # the user's own value wins


def test_a_cfka_process_compiles_with_the_memory_scheduler(tmp_path):
    """In a fresh ``cfka`` process the flag reaches XLA: eight chained bf16 matmuls hold one float32 upcast at a
    time instead of all eight (the concurrency scheduler hoists them)."""
    import subprocess
    import sys

    code = ("import os, sys; from cfka_jax import cli; os.environ['XLA_FLAGS'] = cli.xla_flags(os.environ.get("
            "'XLA_FLAGS', '')); import jax, jax.numpy as jnp; "
            "w = [jax.ShapeDtypeStruct((512, 1536), jnp.bfloat16)] * 8; x = jax.ShapeDtypeStruct((64, 512), "
            "jnp.bfloat16); f = lambda x, w: [x := (x @ v)[:, :512] for v in w][-1]; "
            "print(jax.jit(f).lower(x, w).compile().memory_analysis().temp_size_in_bytes)")
    env = {k: v for k, v in __import__("os").environ.items() if k != "XLA_FLAGS"}
    lean = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              check=True).stdout.split()[-1])
    plain = int(subprocess.run([sys.executable, "-c", code.replace("cli.xla_flags(", "(")], capture_output=True,
                               text=True, env=env, check=True).stdout.split()[-1])
    upcast = 512 * 1536 * 4
    assert lean < 3 * upcast < 6 * upcast < plain, (lean, plain)


# ------------------------------------------------ every command, every option kind: refused before --out is touched

INPUT_PATHS = {  # (command, mode or subcommand, field): options naming an input; a missing one is refused naming it
    ("corpus-cpt", "", "data"), ("corpus-cpt", "", "model"), ("corpus-cpt", "", "mc_original"),
    ("corpus-cpt", "", "mc_dev"), ("knowedit", "", "data"), ("knowedit", "", "model"),
    ("knowedit", "", "augmentation"), ("cpt", "", "pt_dir"), ("cpt", "", "token_weights"), ("stream", "", "pt_dir"),
    ("sweep", "", "config"), ("proofs", "", "extra"), ("taalm", "real", "model"), ("taalm", "real", "phi_model"),
    ("taalm", "real", "phi_train"), ("taalm", "real", "review"), ("taalm", "real", "lama_ckl"),
    ("taalm", "biography", "pt_dir"),
}
SKIP = {("taalm", "synthetic", f) for f in ("biography", "lama_ckl", "temporalwiki")}  # they choose another study


def _bases(w: dict, out: str, cache: str) -> dict:
    """(command, mode) → a valid argv (``None`` below: the command's control run is too long for the default tests)."""
    smoke = ["--preset", "smoke", "--out", out, "--cache-dir", cache, "--no-progress"]
    return {
        ("claims", ""): ([], None), ("proofs", ""): (["--out", out, "--only", "taylor"], None),
        ("pt", ""): (smoke, True), ("cpt", ""): (smoke, True), ("stream", ""): ([*smoke, "--stages", "2"], True),
        ("sweep", ""): (["--out", out, "--steps", "2", "--log-every", "1", "--seeds", "1", "--ks", "0", "--alphas",
                         "0.5"], True),
        ("di-attention", ""): (["--preset", "smoke", "--out", out, "--cache-dir", cache, "--seeds", "1"], True),
        ("di-walk", ""): (["--out", out, "--results", out, "--seeds", "1", "--steps", "1L-linear"], None),
        ("stoc-table", ""): ([*smoke, "--alphas", "0.5", "--kinds", "stoc"], True),
        ("stoc-scale", ""): (["--sizes", "smoke", "--seeds", "0", "--out", out, "--cache-dir", cache], True),
        ("stoc-regime", ""): ([*smoke, "--pt-seeds", "0"], None),
        ("bio-table", ""): ([*smoke, "--cells", "naive-full"], None),
        ("corpus-cpt", ""): (["--data", str(w["corpus"]), "--model", str(w["model"]), "--out", out, "--preset",
                              "smoke", "--no-progress"], True),
        ("knowedit", ""): (["--data", str(w["knowedit"]), "--model", str(w["model"]), "--out", out, "--preset",
                            "smoke", "--methods", "naive", "--no-progress"], True),
        ("taalm", "synthetic"): (["--preset", "smoke", "--out", out, "--no-progress"], True),
        ("taalm", "biography"): (["--biography", str(w["lama"]), "--preset", "smoke", "--out", out], None),
        ("taalm", "real"): (["--lama-ckl", str(w["lama"]), "--model", str(w["model"]), "--out", out, "--methods",
                             "Finetune", "--no-progress"], True),
        **{("geometry", name): ([name, "--scale", "smoke", "--out", out], None)
           for name in ("onestep", "coldstart", "attribution", "energy", "erosion", "crosslingual", "select",
                        "transmission", "lds", "loop")},
    }


def _studies(command: str):
    """(mode or subcommand, its Flags, the argv prefix that selects it) of a command."""
    flags, _ = cli.resolve(command)
    if hasattr(flags, "commands"):
        return [(name, sub) for name, sub in flags.commands.commands.items()]
    if hasattr(flags, "modes"):
        return [(mode, sub) for mode, (_, sub) in flags.modes.items()]
    return [("", flags)]


def _fields(flags):
    import dataclasses
    import typing

    hints = typing.get_type_hints(flags.config)
    for f in dataclasses.fields(flags.config):
        if f.name in flags.nested:
            yield from _fields(flags.nested[f.name])
        elif f.name not in flags.hidden and f.name not in flags.positional:
            yield f.name, hints[f.name], flags


def _bad_value(command: str, mode: str, name: str, tp, flags) -> tuple[str, str] | None:
    """(kind, an invalid value) of an option, or None where no value of its type is invalid as such (a flag, a free
    name, an output folder)."""
    from cfka_jax import cli_gen

    item, scalar = cli_gen._tuple_item(tp), cli_gen._scalar(tp)
    if (command, mode, name) in INPUT_PATHS:
        return "path", MISSING
    if name in flags.choices:
        return "choice", "no-such-choice"
    if item in (int, float):
        return f"{item.__name__}s", "0,-1" if item is int else "0.5,nan"
    if scalar in (int, float):
        return scalar.__name__, "-1" if scalar is int else "nan"
    if name == "mesh":
        return "mesh", "data=64"
    return None


def _spellings(flags, name: str) -> tuple[str, ...]:
    main = "--" + flags.names.get(name, name).replace("_", "-")
    return (main, *flags.aliases.get(name, ()))


def _cases(kinds_once: bool):
    cases = []
    for command in sorted(cli.COMMANDS):
        for mode, flags in _studies(command):
            seen = set()
            for name, tp, owner in _fields(flags):
                bad = _bad_value(command, mode, name, tp, owner)
                if bad is None or (command, mode, name) in SKIP or (kinds_once and (bad[0] in seen)):
                    continue
                seen.add(bad[0])
                cases.append(pytest.param(command, mode, _spellings(owner, name), bad[1],
                                          id=f"{command} {mode} {_spellings(owner, name)[0]} {bad[1]}".replace("  ", " ")))
    return cases


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from tests.reliability.inputs import write_world

    return write_world(tmp_path_factory.mktemp("cli-world"))


def _with(argv: list[str], spellings: tuple[str, ...], value: str) -> list[str]:
    """``argv`` with the option (any of its spellings) set to ``value``: replaced where given, else appended."""
    out, i, done = [], 0, False
    while i < len(argv):
        if argv[i] in spellings:
            out += [argv[i], value]
            i, done = i + 2, True
            continue
        out.append(argv[i])
        i += 1
    return out if done else [*out, spellings[0], value]


def _refused(argv: list[str], root, capsys) -> str:
    """Runs ``cfka argv`` under the tripwire of ``root``; asserts exit 2, one error line, nothing written."""
    from tests.reliability.inputs import refused

    return refused(argv, root, capsys)


def _walk(command, mode, spellings, value, world, tmp_path, capsys, monkeypatch, user_file: bool = False):
    """``cfka command <base> <option> <value>`` in an empty working folder (``--out`` absent, or, with ``user_file``,
    an existing folder holding a file of the user's)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    out = tmp_path / "out"
    if user_file:
        out.mkdir()
        (out / "notes.txt").write_bytes(b"the user's file\n")
    argv, _ = _bases(world, str(out), str(tmp_path / "cache"))[command, mode]
    argv = [command, *_with(argv, spellings, value)]
    last = _refused(argv, tmp_path, capsys)
    assert "error" in last, last
    if user_file:
        assert (out / "notes.txt").read_bytes() == b"the user's file\n" and os.listdir(out) == ["notes.txt"]
    else:
        assert any(s in last for s in spellings), (argv, last)
        assert os.listdir(tmp_path) == [], "a rejected command wrote files"


@pytest.mark.parametrize("command, mode, spellings, value", _cases(kinds_once=False))
def test_every_command_refuses_a_bad_value_of_each_option_before_writing(command, mode, spellings, value, world,
                                                                         tmp_path, capsys, monkeypatch):
    """Each command (each study of ``cfka taalm``, each ``cfka geometry`` subcommand) × each option whose type
    admits an invalid value (an integer, a number, a list of them, a choice, an input path, a mesh): exit 2, one line
    naming the option, the working folder still empty (:func:`tests.reliability.inputs.tripwire` fails the test at
    the first write, so an accepted value cannot start a run)."""
    _walk(command, mode, spellings, value, world, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("command, mode, spellings, value",
                         [c for c in _cases(kinds_once=True) if c.values[0] in ("corpus-cpt", "knowedit", "cpt", "stream",
                                                                                "taalm", "sweep", "stoc-table", "pt")
                          and c.values[3] != MISSING])
def test_a_refused_command_leaves_an_existing_out_folder_byte_identical(command, mode, spellings, value, world,
                                                                        tmp_path, capsys, monkeypatch):
    """The same refusals (one option of each kind per command) with ``--out`` an existing folder holding a file of
    the user's: the folder is byte-identical after."""
    _walk(command, mode, spellings, value, world, tmp_path, capsys, monkeypatch, user_file=True)


@pytest.mark.parametrize("command, mode", [k for k, (_, control) in _bases(collections.defaultdict(str), "", "").items()
                                           if control])
def test_every_walk_base_is_valid_and_reaches_its_first_write(command, mode, world, tmp_path, monkeypatch):
    """The control of the walk: the base command line of each command is accepted and stops at its first write
    (the tripwire), so what the walk refuses is the one bad value."""
    from tests.reliability.inputs import Wrote, tripwire

    monkeypatch.chdir(tmp_path)
    argv, _ = _bases(world, str(tmp_path / "out"), str(tmp_path / "cache"))[command, mode]
    with pytest.raises(Wrote), tripwire(tmp_path):
        cli.main([command, *argv])
