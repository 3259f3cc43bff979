"""experiments/biography_table.py: the generated command line, replicates over PT seeds × CPT seeds (resumed,
refused when a folder holds another run), the record the claims read, and (slow) a smoke table end to end."""

import dataclasses
import json
import pathlib
import types

import pytest

from cfka_jax.claims.results import load_records
from cfka_jax.claims.verdicts import gap, paired
from cfka_jax.experiments import biography_table as table
from cfka_jax.runs.folder import RunFolder, RunFolderError


def test_table_variants_parse_and_cover_the_issue_rows():
    names = {(m, u) for m, u, _ in table.VARIANTS}
    assert {("naive", "full"), ("ewc", "full"), ("replay-all", "full"), ("replay-half", "full"), ("naive", "freeze"),
            ("naive", "lora")} <= names
    assert table.TableConfig().preset == "small" and table.TableConfig().folder.as_posix() == "runs/table-small"
    rows = [{"kind": "pt", "update": "full", "pt": "s0", "original_sfta": 50.0}]
    line = table.markdown(rows).splitlines()[-1]
    assert line.startswith("| PT | 50.0 (n=1) |") and line.count("–") == len(table.COLUMNS) - 1


def test_every_earlier_flag_parses_with_its_meaning_and_the_new_ones_too():
    cfg = table.parse(["--preset", "smoke", "--out", "o", "--arch", "pythia", "--ewc-lambda", "1e6", "--cache-dir",
                       "c"])
    assert (cfg.preset, cfg.out, cfg.arch, cfg.ewc_lambda, cfg.cache_dir) == ("smoke", "o", "pythia", 1e6, "c")
    assert (cfg.seeds, cfg.pt_seeds, cfg.cells, cfg.record) == ((0,), (0,), table.DEFAULT_CELLS, None)
    assert table.DEFAULT_CELLS == ("naive-full", "ewc-full", "replay-all-full", "replay-half-full", "naive-freeze",
                                   "naive-lora")  # the paper's six; the other methods only when named
    assert table.parse(["--preset", "small"]).folder.as_posix() == "runs/table-small"  # --out's old default
    cfg = table.parse(["--seeds", "0,1,2", "--pt-seeds", "0,1", "--cells", "naive-full,naive-lora", "--no-progress",
                       "--record", "cfka/biography_small"])
    assert (cfg.seeds, cfg.pt_seeds, cfg.cells, cfg.progress) == ((0, 1, 2), (0, 1), ("naive-full", "naive-lora"),
                                                                  False)


def test_bpe_vocab_reaches_every_pt_replicate_and_every_cpt_cell():
    cfg = table.parse(["--preset", "smoke", "--arch", "pythia", "--bpe-vocab", "1024", "--pt-seeds", "0,1",
                       "--out", "o"])
    assert [table.pt_spec(cfg, k).bpe_vocab for k in cfg.pt_seeds] == [1024, 1024]
    assert table.pt_spec(table.parse(["--preset", "smoke"]), 0).bpe_vocab is None  # the preset's word-level one
    cpt = table.cell_spec(cfg, "naive-freeze", 1, 2)
    assert (cpt.pt_dir, cpt.bpe_vocab) == (str(pathlib.Path("o", "pt-seed1")), 1024)


def test_the_other_methods_of_the_registry_are_cells_with_their_record_kinds():
    cfg = table.parse(["--preset", "smoke", "--cells", "lwf-full,nullspace-full,stoc+lwf-full", "--out", "o"])
    specs = [table.cell_spec(cfg, cell, 0, 0) for cell in cfg.cells]
    assert [(s.method, s.update, s.alpha) for s in specs] == [("lwf", "full", 0.5), ("nullspace", "full", 0.5),
                                                             ("stoc + lwf", "full", 0.5)]
    assert [table.RECORD_KIND[table.CELLS[c][0]] for c in cfg.cells] == ["lwf", "nullspace", "stoc_lwf"]
    assert [pathlib.Path(s.out).parent.name for s in specs] == ["cpt-lwf-full", "cpt-nullspace-full",
                                                                "cpt-stoc+lwf-full"]


@pytest.mark.parametrize("argv, words", [(["--seeds", "0,0"], "--seeds"), (["--pt-seeds", "1,1"], "--pt-seeds"),
                                         (["--seeds", "-1"], "--seeds"), (["--cells", "bogus"], "--cells"),
                                         (["--ewc-lambda", "-1"], "--ewc-lambda"), (["--preset", "tiny"], "--preset"),
                                         (["--record", "../x"], "--record"), (["--ewc-sweep", "1,-2"], "--ewc-sweep"),
                                         (["--bpe-vocab", "3"], "--bpe-vocab"),
                                         (["--lora-lr-scales", "0"], "--lora-lr-scales"),
                                         (["--lora-lr-scales", "-3"], "--lora-lr-scales"),
                                         (["--lora-lr-scales", "three"], "--lora-lr-scales"),
                                         (["--lora-lr-scales", "3,3"], "--lora-lr-scales"),
                                         (["--lora-lr-scales", "3", "--cells", "naive-full"], "--lora-lr-scales")])
def test_a_bad_value_is_one_line_naming_the_option(argv, words, capsys, tmp_path):
    with pytest.raises(SystemExit) as err:
        table.main([*argv, "--out", str(tmp_path / "t")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.value.code == 2 and words in last, last
    assert not (tmp_path / "t").exists()


def test_lora_lr_scales_scale_the_lora_cells_cpt_learning_rates_and_nothing_else():
    cfg = table.parse(["--preset", "smoke", "--cells", "naive-full,naive-lora", "--lora-lr-scales", "1,3,10",
                       "--pt-root", "p", "--out", "o"])
    assert table.cell_runs(cfg) == [("naive-full", None, 1.0), ("naive-lora", None, 1.0), ("naive-lora", None, 3.0),
                                    ("naive-lora", None, 10.0)]
    base, x3, x10 = (table.cell_spec(cfg, "naive-lora", 1, 2, None, x) for x in (1.0, 3.0, 10.0))
    assert (base.lr, base.min_lr, pathlib.Path(base.out).parent.name) == (None, None, "cpt-naive-lora")
    cpt = table.BIOGRAPHY["smoke"].cpt  # peak 1e-3, floor 1e-4
    assert (x3.lr, x3.min_lr, x10.lr, x10.min_lr) == (3e-3, 3e-4, 1e-2, 1e-3)
    assert (x3.scale.cpt.peak_lr, x3.scale.cpt.min_lr) == (3 * cpt.peak_lr, 3e-4)  # what the run trains with
    assert (x3.scale.cpt.steps, x3.scale.cpt.warmup) == (cpt.steps, cpt.warmup)
    assert pathlib.Path(x3.out).parent.name == "cpt-naive-lora-lr3" and x3.pt_dir == str(pathlib.Path("p", "pt-seed1"))
    assert table.cell_spec(cfg, "naive-full", 0, 0).lr is None and table.pt_spec(cfg, 0).out == str(
        pathlib.Path("p", "pt-seed0"))
    assert table.parse(["--preset", "smoke"]).lora_lr_scales == (1.0,)
    for bad in ((0.0,), (-1.0,), (float("nan"),), ("3",), (True,), ()):
        with pytest.raises(ValueError, match="--lora-lr-scales"):
            table.TableConfig(preset="smoke", cells=("naive-lora",), lora_lr_scales=bad)


def _fake_runs(monkeypatch, calls):
    """pretrain / continual that start the run folder and return made-up metrics (seeded by the spec)."""

    def finish(spec, final):
        RunFolder(spec.out).start(spec, spec.scale)
        RunFolder(spec.out).write_final(final)
        calls.append(spec.out)
        return types.SimpleNamespace(final=final)

    def pretrain(spec, data):
        return finish(spec, {"step": 12, "Original/sFTA": 0.8 + 0.01 * spec.seed, "Train/sFTA": 0.9})

    def continual(spec, pt, data):
        base = {"naive": 0.2, "replay-all": 0.6, "replay-half": 0.5}.get(spec.method, 0.3)
        sfta = base + 0.01 * spec.seed + 0.02 * int(spec.pt_dir[-1])
        return finish(spec, {"step": 6, "Original/sFTA": sfta, "Original/EM": 0.1, "Continual/sFTA": 0.7})

    monkeypatch.setattr(table, "pretrain", pretrain)
    monkeypatch.setattr(table, "continual", continual)
    monkeypatch.setattr(table, "build_data", lambda *a: None)


def test_replicates_run_per_pair_resume_and_make_a_record_the_rules_read(tmp_path, monkeypatch):
    calls = []
    _fake_runs(monkeypatch, calls)
    cfg = table.TableConfig(preset="smoke", out=str(tmp_path / "t"), seeds=(0, 1, 2), pt_seeds=(0, 1),
                            cells=("replay-all-full", "replay-half-full"), progress=False, record="cfka/bio",
                            results=str(tmp_path / "results"))
    rows = table.main_cfg(cfg)
    assert len(calls) == 2 + 2 * 3 * 2 and (tmp_path / "t" / "pt-seed1" / "replicate.json").exists()
    assert (tmp_path / "t" / "cpt-replay-half-full" / "pt1-seed2" / "replicate.json").exists()
    rec = load_records(tmp_path / "results")["cfka/bio"]
    assert rec.origin == "produced" and rec.provenance["seeds"] == [0, 1, 2]
    assert rec.provenance["pt_replicates"] == ["s0", "s1"] and list(rec.rows) == rows
    assert rec.select(kind="real_all", pt="s1", seed=2) == [{"kind": "real_all", "update": "full", "pt": "s1",
                                                             "seed": 2, "original_sfta": 64.0, "original_em": 10.0,
                                                             "continual_sfta": 70.0, "alpha": 0.5}]
    g = gap(rec.values("original_sfta", kind="real_all"), rec.values("original_sfta", kind="real_half"))
    assert g.a.n == g.b.n == 6 and g.apart and abs(g.diff - 10.0) < 1e-9
    assert paired(rec.rows, "original_sfta", {"kind": "real_all"}, {"kind": "real_half"}).diffs.n == 6
    entry = next(e for e in rec.provenance["summary"] if e["kind"] == "real_all" and e["metric"] == "original_sfta")
    assert (entry["n"], entry["pts"], entry["seeds"], entry["lo"], entry["hi"]) == (6, 2, 3, 60.0, 64.0)
    assert (entry["pt_mean_lo"], entry["pt_mean_hi"], entry["seed_range"]) == (61.0, 63.0, 2.0)
    assert "62.0 (60.0–64.0, n=6)" in (tmp_path / "t" / "table.md").read_text()
    assert json.loads((tmp_path / "t" / "table.json").read_text())["rows"] == rows

    calls.clear()
    assert table.main_cfg(cfg) == rows and calls == []  # every replicate's result is there: nothing runs again
    (tmp_path / "t" / "cpt-replay-all-full" / "pt0-seed1" / "replicate.json").unlink()
    assert table.main_cfg(cfg) == rows and calls == [str(tmp_path / "t" / "cpt-replay-all-full" / "pt0-seed1")]

    calls.clear()
    sweep = dataclasses.replace(cfg, cells=("ewc-full",), ewc_sweep=(1e4, 1e8), seeds=(0,), pt_seeds=(0,),
                                record="cfka/ewc")
    table.main_cfg(sweep)
    assert calls == [str(tmp_path / "t" / name / "pt0-seed0") for name in
                     ("cpt-ewc-full", "cpt-ewc-full-lambda10000", "cpt-ewc-full-lambda1e+08")]
    ewc = load_records(tmp_path / "results")["cfka/ewc"]
    assert sorted(r["ewc_lambda"] for r in ewc.select(kind="ewc")) == [1e3, 1e4, 1e8]
    assert "ewc full λ=1e+08" in (tmp_path / "t" / "table.md").read_text()
    with pytest.raises(ValueError, match="--ewc-sweep"):
        dataclasses.replace(sweep, ewc_sweep=(1e3,))
    with pytest.raises(ValueError, match="--ewc-sweep"):
        dataclasses.replace(sweep, cells=("naive-full",))

    other = table.TableConfig(preset="smoke", out=str(tmp_path / "t"), seeds=(0,), pt_seeds=(0,),
                              cells=("replay-all-full",), ewc_lambda=5.0, arch="pythia", progress=False)
    with pytest.raises(RunFolderError, match="pt-seed0"):  # another run's folder, refused before anything runs
        table.main_cfg(other)


def test_lora_lr_cells_start_from_another_studys_pt_models_and_run_alone(tmp_path, monkeypatch):
    calls = []
    _fake_runs(monkeypatch, calls)
    first = table.TableConfig(preset="smoke", out=str(tmp_path / "a"), seeds=(0, 1), pt_seeds=(0,),
                              cells=("naive-freeze", "naive-lora"), progress=False)
    table.main_cfg(first)
    calls.clear()
    cfg = table.TableConfig(preset="smoke", out=str(tmp_path / "b"), pt_root=str(tmp_path / "a"), seeds=(0, 1),
                            pt_seeds=(0,), cells=("naive-lora",), lora_lr_scales=(3.0, 10.0), progress=False,
                            record="cfka/lr", results=str(tmp_path / "results"))
    rows = table.main_cfg(cfg)
    assert calls == [str(tmp_path / "b" / f"cpt-naive-lora-lr{x}" / f"pt0-seed{s}") for s in (0, 1) for x in (3, 10)]
    run = RunFolder(tmp_path / "b" / "cpt-naive-lora-lr3" / "pt0-seed1").read_json("config.json")["run"]
    assert (run["lr"], run["min_lr"], run["update"], run["pt_dir"]) == (3e-3, 3e-4, "lora",
                                                                        str(tmp_path / "a" / "pt-seed0"))
    assert not (tmp_path / "b" / "pt-seed0").exists() and not (tmp_path / "b" / "cpt-naive-lora").exists()
    rec = load_records(tmp_path / "results")["cfka/lr"]
    assert [(r["kind"], r.get("lr_scale"), r.get("seed")) for r in rec.rows] == [
        ("pt", None, None), ("naive", 3.0, 0), ("naive", 10.0, 0), ("naive", 3.0, 1), ("naive", 10.0, 1)]
    assert "lr (peak 0.001, floor 0.0001) × 3, 10" in rec.regime["dose"]
    assert "naive lora lr×10" in (tmp_path / "b" / "table.md").read_text()
    calls.clear()
    assert table.main_cfg(cfg) == rows and calls == []  # resumed: nothing runs again
    with pytest.raises(ValueError, match="--pt-root"):
        table.check_inputs(dataclasses.replace(cfg, pt_root=str(tmp_path / "results" / "cfka" / "lr.json")))


@pytest.mark.slow
def test_smoke_table_end_to_end(tmp_path):
    cfg = table.TableConfig(preset="smoke", out=str(tmp_path / "t"), seeds=(0, 1), pt_seeds=(0, 1),
                            cells=("naive-full",), cache_dir=str(tmp_path / "cache"), progress=False,
                            record="cfka/bio", results=str(tmp_path / "results"))
    rows = table.main_cfg(cfg)
    assert [(r["kind"], r["pt"], r.get("seed")) for r in rows] == [
        ("pt", "s0", None), ("naive", "s0", 0), ("naive", "s0", 1), ("pt", "s1", None), ("naive", "s1", 0),
        ("naive", "s1", 1)]
    rec = load_records(tmp_path / "results")["cfka/bio"]
    assert len(rec.values("continual_sfta", kind="naive")) == 4 and set(rec.provenance["replicate_seconds"]) == {
        "pt0", "pt1", "naive-full/pt0-seed0", "naive-full/pt0-seed1", "naive-full/pt1-seed0", "naive-full/pt1-seed1"}
