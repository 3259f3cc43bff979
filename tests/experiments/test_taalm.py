"""experiments/taalm.py and taalm_biography.py: shipped presets parse, the report tables, the CLI arguments, and
(slow) smoke runs."""

import dataclasses
import json
import pathlib
import re

import pytest
from cfka_jax.experiments import taalm, taalm_biography, taalm_command
from cfka_jax.experiments import taalm_report as report


@pytest.mark.parametrize("name", sorted(taalm.PRESETS))
def test_every_preset_parses(name, tmp_path):
    cfg = taalm.preset(name, str(tmp_path))
    assert cfg.preset == name and cfg.out == str(tmp_path)
    assert set(cfg.methods) >= {"Finetune", "Oracle", "TAALM"} and cfg.metatrain.meta.inner_form == "adamw2_ref"
    json.dumps(dataclasses.asdict(cfg))  # config.json is writable
    assert set(report.PAPER_LAMA) <= set(taalm.LAMA_METHODS)


def test_bad_settings_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="--methods: .*EWC.* not available in the ckl recipe"):
        dataclasses.replace(taalm.preset("smoke", str(tmp_path)), methods=("TAALM + EWC",))
    with pytest.raises(ValueError, match="unknown preset"):
        taalm.preset("huge")
    with pytest.raises(SystemExit):
        taalm_command.main(["--preset", "huge"])


def test_tables_put_the_paper_beside_ours():
    hist = [{"epoch": 0, "to_learn/acc": 0.0, "not_to_forget/acc": 1.0},
            {"epoch": 1, "to_learn/acc": 0.3, "not_to_forget/acc": 0.9}]
    lama = {"TAALM": {"summary": {"top_acc": 0.3, "epoch": 1, "nf_acc": 0.9, "total_knowledge": 1.2},
                      "history": hist}}
    text = report.lama_markdown(lama)
    assert "| TAALM | 0.3000 | 1 | 0.9000 | 1.2000 | 0.4290 | 4 | 0.8983 | 1.3273 |" in text
    assert "| θ0 (before training) | 0.0000 | 0 | 1.0000 |" in text
    rec = {"period": "period1", "before": {"changed/nll": 5.0, "unchanged/nll": 2.0},
           "after": {"changed/nll": 4.0, "unchanged/nll": 2.5}}
    tw = report.twiki_markdown({"Finetune": [rec]})
    assert "| Finetune | 5.000 → 4.000 | 10.057 / 9.531 / 9.632 |" in tw
    assert "| Finetune | 2.000 → 2.500 | 9.999 / 9.554 / 9.737 |" in tw


@pytest.mark.slow
def test_smoke_run_writes_tables_plot_and_heatmap(tmp_path):
    out = tmp_path / "taalm-smoke-s0"
    argv = ["--preset", "smoke", "--out", str(out), "--methods", "Finetune,TAALM", "--twiki-methods", "Finetune",
            "--no-progress"]
    assert taalm_command.main(argv) == 0
    table = (out / "table.md").read_text()
    assert "| TAALM |" in table and "| Finetune |" in table and "TemporalWiki" in table
    assert (out / "accuracy.png").stat().st_size > 0 and (out / "phi_heatmap.png").stat().st_size > 0
    summary = json.loads((out / "table.json").read_text())
    assert set(summary["lama"]) == {"Finetune", "TAALM"} and summary["phi_best_step"] is not None
    assert (out / "phi" / "phi.json").exists() and (out / "lama_ckl" / "variant.jsonl").exists()
    # a second call resumes every stage from the folder
    assert taalm_command.main(argv) == 0
    with pytest.raises(ValueError, match="other settings"):
        taalm.run(dataclasses.replace(taalm.preset("smoke", str(out)), pt=dataclasses.replace(
            taalm.preset("smoke").pt, epochs=3)))
    # φ's weights record, read from the finished folder without writing in it
    before = sorted((p, p.stat().st_mtime_ns) for p in out.rglob("*"))
    argv = ["--preset", "smoke", "--record", "smoke", "--record-dirs", str(tmp_path / "taalm-{preset}-s{seed}"),
            "--record-seeds", "0,1", "--phi-record-only", "--results", str(tmp_path / "results")]
    assert taalm_command.main(argv) == 0
    assert sorted((p, p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    from cfka_jax.claims.results import load_records

    rec = load_records(tmp_path / "results")["taalm/phi_weights_smoke"]
    assert rec.provenance["seeds"] == [0] and rec.provenance["pt_replicates"] == ["θ0-s0"]
    obj, other = (rec.values("mean_weight", kind="evidence", tokens=t)[0] for t in ("object", "other"))
    assert abs(obj - summary["phi_weights"]["w_object_mean"]) <= 1e-3 * obj  # table.json's, 4 digits
    share = rec.select(kind="object_share")[0]
    docs = len((out / "lama_ckl" / "variant.jsonl").read_text().splitlines())  # the TO-LEARN evidence
    assert 0.0 <= share["min"] <= share["median"] <= 1.0 and share["docs"] == docs
    steps = {h["step"] for h in json.loads((out / "metatrain.json").read_text())["history"]}
    rows = rec.select(kind="metabatch")
    assert rows and all(r["step"] in steps and r["selected"] == (r["step"] == summary["phi_best_step"]) for r in rows)


@pytest.mark.parametrize("name", sorted(taalm_biography.PRESETS))
def test_biography_presets_parse_and_the_mode_dispatches(name, tmp_path):
    cfg = taalm_biography.PRESETS[name]()
    assert cfg.preset == name and cfg.method == "replay-all" and cfg.metatrain.meta.inner_form == "adamw2_ref"
    json.dumps(dataclasses.asdict(cfg))
    with pytest.raises(ValueError, match="not available in the biography recipe"):
        dataclasses.replace(cfg, method="taalm")
    with pytest.raises(SystemExit):  # `cfka taalm --biography ...` goes to taalm_biography's parser
        taalm_command.main(["--biography", str(tmp_path), "--preset", "paper"])


def test_biography_replicates_move_phi_seeds_and_name_their_folders(tmp_path):
    base = taalm_biography.PRESETS["small"]()
    assert taalm_biography.with_seed(base, 0) == base
    argv = ["--biography", str(tmp_path), "--pt-seeds", "0,1", "--seeds", "0,2", "--out", str(tmp_path / "bio"),
            "--plain-dirs", "x/pt{pt}-seed{seed}/cpt", "--record", "taalm/x"]
    reps = taalm_biography.FLAGS.parse(argv).replicates()
    assert [(r.pt, r.seed) for r in reps] == [("s0", 0), ("s0", 2), ("s1", 0), ("s1", 2)]
    last = reps[-1].cfg
    assert last.out == str(tmp_path / "bio" / "pt1-seed2") and last.pt_dir == str(tmp_path / "pt-seed1")
    assert last.plain_dir == "x/pt1-seed2/cpt" and last.seed == 2
    for path in taalm_biography.SEED_FIELDS:
        assert taalm.get_field(last, path) == taalm.get_field(base, path) + 2000, path
    assert last.pair_seed == base.pair_seed  # the made-up people are the same for every seed
    (tmp_path / "pt").mkdir()
    one = taalm_biography.FLAGS.parse(["--biography", str(tmp_path / "pt"), "--seeds", "1"]).replicates()
    assert [(r.pt, r.seed, pathlib.Path(r.cfg.out).name) for r in one] == [("pt", 1, "seed1")]
    for bad, match in ((["--plain-dirs", "x/seed{seed}"], "must name"), (["--plain-dirs", "x/{run}"], "only"),
                       (["--seeds", "1,1"], "--seeds"), (["--record", "../x"], "--record")):
        with pytest.raises((ValueError, SystemExit)) as exc:
            taalm_biography.FLAGS.parse(argv[:4] + bad)
        assert exc.type is SystemExit or re.search(match, str(exc.value)), exc.value


def test_biography_record_rows_take_em_from_the_final_record():
    from cfka_jax.experiments import taalm_bio_record as tbr

    run = {"Continual/hFTA": 0.75, "Continual/EM": 0.7, "Original/EM": 0.8,
           "evaluations": {"0": {"Continual/hFTA": 0.06}, "250": {"Continual/hFTA": 0.7}, "400": {"Continual/hFTA": 0.75}}}
    table = {"runs": {"replay-all": run}, "phi_best_step": 2,
             "phi_weights": {"w_value_mean": 0.9, "w_other_mean": 0.3, "w_other_p90": 0.99, "value_fraction_median": 0.125,
                             "value_share_median": 0.3},
             "metabatch": [{"step": s, "w_other": 1.0 - 0.1 * s, "w_object": 1.0} for s in (1, 2, 3)]}
    rows = tbr.replicate_rows("s0", 1, table)
    cpt = {(r["run"], r["step"]): r for r in rows if r["kind"] == "cpt"}
    assert cpt[("replay-all", 400)]["continual_em"] == 0.7 and "continual_em" not in cpt[("replay-all", 250)]
    assert cpt[(tbr.PT_ROW, 0)]["continual_hfta"] == 0.06 and all(r["pt"] == "s0" and r["seed"] == 1 for r in rows)
    assert [(r["step"], r["selected"]) for r in rows if r["kind"] == "metabatch"] == [(1, False), (2, True), (3, False)]


@pytest.mark.slow
def test_biography_study_over_seeds_writes_tables_and_the_record(tmp_path):
    """Two study seeds from one smoke PT replicate: each replicate's φ, CPT runs and table; the record after each;
    a second call runs nothing; a plain run read from another folder must be the same run."""
    from cfka_jax.claims.results import load_records
    from cfka_jax.runs.biography import pretrain
    from cfka_jax.runs.folder import RunFolderError
    from cfka_jax.runs.specs import CPTSpec, PTSpec

    cache, root = str(tmp_path / "cache"), tmp_path / "pts"
    pretrain(PTSpec(preset="smoke", out=str(root / "pt-seed0"), cache_dir=cache, progress=False))
    out, results = tmp_path / "bio", tmp_path / "results"
    argv = ["--biography", str(root), "--pt-seeds", "0", "--seeds", "0,1", "--preset", "smoke", "--out", str(out),
            "--cache-dir", cache, "--no-progress", "--record", "taalm/bio_smoke", "--results", str(results)]
    assert taalm_command.main(argv) == 0
    for s in (0, 1):
        summary = json.loads((out / f"pt0-seed{s}" / "table.json").read_text())
        assert set(summary["runs"]) == {"replay-all", "replay-all + TAALM φ"} and summary["seed"] == s
        assert all(r["Continual/sFTA"] is not None for r in summary["runs"].values())
        assert 0.0 < summary["phi_weights"]["w_value_mean"] <= 1.0
        assert 0.0 < summary["phi_weights"]["value_fraction_median"] < 1.0
        meta = json.loads((out / f"pt0-seed{s}" / "metatrain.json").read_text())
        assert meta["pairs"]["empty_object_masks"] == 0 and meta["pairs"]["dropped_unk"] == 0
    phis = [json.loads((out / f"pt0-seed{s}" / "phi" / "phi.json").read_text()) for s in (0, 1)]
    assert phis[0]["phi"]["seed"] + 1000 == phis[1]["phi"]["seed"]
    rec = load_records(results)["taalm/bio_smoke"]
    assert rec.origin == "produced" and rec.provenance["seeds"] == [0, 1] and rec.provenance["pt_replicates"] == ["s0"]
    assert {(r["pt"], r["seed"]) for r in rec.select(kind="phi_weights")} == {("s0", 0), ("s0", 1)}
    assert len(rec.values("continual_hfta", kind="cpt", run="replay-all + TAALM φ", step=6)) == 2
    assert rec.select(kind="metabatch") and rec.provenance["wall_s"] > 0
    stamp = (out / "pt0-seed1" / "table.json").stat().st_mtime_ns
    assert taalm_command.main(argv) == 0  # every replicate finished: nothing runs again
    assert (out / "pt0-seed1" / "table.json").stat().st_mtime_ns == stamp
    # the plain run of seed 0 is not seed 1's: refused, naming the differing field
    cfg = taalm_biography.FLAGS.parse(argv).replicates()[1].cfg
    reused = dataclasses.replace(cfg, plain_dir=str(out / "pt0-seed0" / "cpt-replay-all"))
    spec = CPTSpec(preset="smoke", out=str(tmp_path / "x"), method="replay-all", pt_dir=cfg.pt_dir, cache_dir=cache,
                   seed=1)
    with pytest.raises(RunFolderError, match="run.seed"):
        taalm_biography.plain_run(reused, spec)
    same = dataclasses.replace(cfg, plain_dir=str(out / "pt0-seed1" / "cpt-replay-all"))
    assert taalm_biography.plain_run(same, spec)["step"] == 6


def test_seed_zero_is_the_preset_and_every_stage_moves_with_the_seed(tmp_path):
    from cfka_jax.experiments.taalm_command import SYNTHETIC

    for name in taalm.PRESETS:
        base = taalm.preset(name, str(tmp_path))
        assert taalm.with_seed(base, 0) == base
        assert SYNTHETIC.parse(["--preset", name, "--out", str(tmp_path), "--seed", "0"]).taalm() == base
    base = taalm.preset("small")
    assert taalm.stage_seeds(base) == {"pt.seed": 0, "lora_seed": 0, "ckl.seed": 42, "ckl.kadapter.seed": 0,
                                       "twiki.seed": 42, "twiki.kadapter.seed": 0, "phi.seed": 42,
                                       "metatrain.seed": 0, "metatrain.split_seed": 42, "metatrain.order_seed": 1}
    one = SYNTHETIC.parse(["--preset", "small", "--seed", "1"]).taalm()
    two = taalm.with_seed(base, 2)
    s1, s2 = taalm.stage_seeds(one), taalm.stage_seeds(two)
    assert one.seed == 1 and two.seed == 2 and all(s1[k] != s2[k] for k in taalm.SEED_FIELDS)
    assert all(s1[k] == v + 1000 for k, v in taalm.stage_seeds(base).items())
    assert taalm.with_seed(one, 0) == base and taalm.with_seed(one, 2) == two  # the shift is replaced, not added
    assert len(set(s1.values()) & set(s2.values())) == 0
    # every field named *seed in the config tree is either a study seed or the world's (fixed on purpose)
    def walk(obj, prefix=""):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if dataclasses.is_dataclass(v):
                yield from walk(v, f"{prefix}{f.name}.")
            elif f.name.endswith("seed") and f"{prefix}{f.name}" != "seed":
                yield f"{prefix}{f.name}"
    assert set(walk(base)) == set(taalm.SEED_FIELDS) | {"data.seed"}
    assert two.data == base.data and two.model == base.model
    with pytest.raises(ValueError, match="--seed"):
        taalm.with_seed(base, -1)


def test_record_options_are_checked(tmp_path):
    from cfka_jax.experiments.taalm_command import SYNTHETIC

    ok = ["--preset", "smoke", "--seed", "1", "--out", "runs/taalm-smoke-s1", "--record", "smoke"]
    assert SYNTHETIC.parse(ok + ["--record-seeds", "0,1,2"]).record_seeds == (0, 1, 2)
    with pytest.raises(ValueError, match="--record-seeds 0,2 lacks --seed 1"):
        SYNTHETIC.parse(ok + ["--record-seeds", "0,2"])
    with pytest.raises(ValueError, match="--out runs/x is not --record-dirs's folder of seed 1"):
        SYNTHETIC.parse(["--preset", "smoke", "--seed", "1", "--out", "runs/x", "--record", "smoke"])
    with pytest.raises(ValueError, match="--record-dirs .* must contain"):
        SYNTHETIC.parse(ok[:-4] + ["--out", "runs/y", "--record", "smoke", "--record-dirs", "runs/y"])
    with pytest.raises(ValueError, match="--record"):
        SYNTHETIC.parse(ok[:-1] + ["../x"])
    with pytest.raises(ValueError, match="--phi-record-only needs --record"):
        SYNTHETIC.parse(["--preset", "smoke", "--phi-record-only"])
    only = SYNTHETIC.parse(["--preset", "smoke", "--record", "smoke", "--record-seeds", "0,1", "--phi-record-only"])
    assert only.phi_record_only  # --out need not be a seed's folder: nothing runs


def _fixture_folder(root, seed, methods, twiki_methods, *, finished=True):
    """A seed folder as `cfka taalm` leaves it (config, per-method result files, clock), with made-up numbers."""
    from cfka_jax.experiments.taalm_stages import slug

    out = root / f"taalm-smoke-s{seed}"
    cfg = dataclasses.replace(taalm.with_seed(taalm.preset("smoke", str(out)), seed), methods=methods,
                              twiki_methods=twiki_methods)
    (out / "lama").mkdir(parents=True)
    (out / "twiki").mkdir()
    (out / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
    (out / "clock.json").write_text(json.dumps({"stage": "twiki", "wall_s": 100.0 + seed, "cpu_s": 150.0}))
    (out / "metatrain.json").write_text(json.dumps({"best_step": 3, "wall_s": 1.0}))
    for i, m in enumerate(methods if finished else methods[:1]):
        hist = [{"epoch": 0, "to_learn/acc": 0.0, "not_to_forget/acc": 1.0 - 0.01 * seed},
                {"epoch": 1, "to_learn/acc": 0.1 * (i + 1), "not_to_forget/acc": 0.9}]
        res = {"summary": {"top_acc": 0.1 * (i + 1) + 0.01 * seed, "epoch": 1, "nf_acc": 0.9,
                           "total_knowledge": 1.0 + 0.1 * i}, "history": hist}
        (out / "lama" / f"{slug(m)}.json").write_text(json.dumps(res))
    for i, m in enumerate(twiki_methods):
        periods = [{"period": f"period{k}", "before": {"changed/nll": 6.0, "unchanged/nll": 2.5},
                    "after": {"changed/nll": 5.0 - 0.1 * i - 0.01 * seed, "unchanged/nll": 2.5}}
                   for k in (1, 2, 3)]
        (out / "twiki" / f"{slug(m)}.json").write_text(json.dumps(periods))


def test_the_record_merges_the_finished_seed_folders(tmp_path):
    from cfka_jax.experiments import taalm_record

    from cfka_jax.claims.results import load_records

    methods, tw = ("Finetune", "TAALM"), ("Finetune", "TAALM")
    for seed in (0, 1):
        _fixture_folder(tmp_path / "runs", seed, methods, tw)
    _fixture_folder(tmp_path / "runs", 2, methods, tw, finished=False)  # LAMA-CKL mid-stage: left out there
    results, template = tmp_path / "results", str(tmp_path / "runs" / "taalm-{preset}-s{seed}")
    for stage in ("lama", "twiki"):
        taalm_record.write_stage_record(stage, name="smoke", results=str(results), template=template,
                                        seeds=(0, 1, 2, 3), preset="smoke")
    recs = load_records(results)
    lama, twiki = recs["taalm/lama_ckl_smoke"], recs["taalm/twiki_smoke"]
    assert lama.origin == "produced" and lama.provenance["seeds"] == [0, 1] and lama.seeds == 2
    assert lama.provenance["pt_replicates"] == ["θ0-s0", "θ0-s1"] and lama.provenance["wall_s"] == 201.0
    assert lama.values("top_acc", method="TAALM") == [0.2, 0.21]
    assert lama.select(method="Finetune", seed=1)[0] == {"method": "Finetune", "seed": 1, "top_acc": 0.11,
                                                         "epoch": 1, "nf_acc": 0.9, "total": 1.0, "lr": 1e-3}
    assert "chosen before the table" in lama.regime["lr_selection"]  # the preset's lr: no flag changed it
    assert lama.select(method=taalm_record.THETA0, seed=1)[0]["nf_acc"] == 0.99
    assert len(lama.rows) == 2 * 3 and set(lama.provenance) >= {"commit", "command", "config", "machine", "date"}
    assert "--seed 1 --out" in lama.provenance["command"] and lama.regime["seeds"] == [0, 1]
    assert twiki.provenance["seeds"] == [0, 1, 2] and len(twiki.rows) == 3 * 2 * 2 * 3
    assert twiki.select(method="TAALM", seed=2, period=3, probes="changed")[0]["after"] == 4.88
    assert {r["period"] for r in twiki.rows} == {1, 2, 3}
    # a folder made with another seed is an error naming the option
    with pytest.raises(ValueError, match="--record-dirs: .* is seed 1"):
        taalm_record.write_stage_record("lama", name="smoke", results=str(results),
                                        template=str(tmp_path / "runs" / "taalm-{preset}-s1"), seeds=(0,),
                                        preset="smoke")
    assert taalm_record.write_stage_record("lama", name="x", results=str(results), template=template, seeds=(7,),
                                           preset="smoke") is None
