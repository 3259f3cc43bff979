"""The TemporalWiki epochs study (experiments/taalm_twiki.py): bad --epochs exit 2 naming the flag before anything is
written; each (seed, epochs, method) is one run file, finished runs are skipped (a seed with none missing is not
even loaded), the seed folders' config.json is checked and never rewritten, and the record has one row per
(method, epochs, seed, period, probes) that the TemporalWiki verdict rule reads with an ``epochs`` selector.

The default tests replace θ0/φ and the training by stand-ins (seconds); the real smoke stages run in the slow test."""

import dataclasses
import json
import pathlib
import types

import pytest
from cfka_jax.experiments import taalm, taalm_twiki
from cfka_jax.experiments import taalm_stages as stages

from cfka_jax.claims.papers import taalm as taalm_claims
from cfka_jax.claims.results import load_records
from cfka_jax.runs.method import resolve_each

ROW_KEYS = {"method", "epochs", "seed", "period", "probes", "before", "after"}
"""The rows of ``taalm/twiki_<name>`` (experiments/taalm_record.twiki_rows) plus ``epochs``."""


def _argv(tmp_path, *extra, epochs="1,3", seeds="0,1", methods="Finetune,TAALM + K-Adapter"):
    return ["--preset", "smoke", "--epochs", epochs, "--seeds", seeds, "--methods", methods,
            "--base-dirs", str(tmp_path / "base-s{seed}"), "--out", str(tmp_path / "study"),
            "--results", str(tmp_path / "results"), *extra]


def test_taalm_plus_kadapter_is_a_temporalwiki_method():
    assert "TAALM + K-Adapter" in taalm.TWIKI_METHODS and set(taalm_twiki.METHODS) <= set(taalm.TWIKI_METHODS)
    assert [m.name for m in resolve_each(["TAALM + K-Adapter"], "ckl", flag="--methods")]  # the twiki stage's recipe
    assert taalm_twiki.FLAGS.parse([]).methods == taalm_twiki.METHODS


@pytest.mark.parametrize("value", ["0", "-1", "1,0", "3,3", ""])
def test_bad_epochs_exit_2_naming_the_flag_and_write_nothing(value, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    try:
        code = taalm_twiki.main(_argv(tmp_path, epochs=value))
    except SystemExit as e:  # a value the parser itself refuses
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and "--epochs" in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="--epochs"):
        taalm_twiki.Config(preset="smoke", epochs=(2, 0))


def _fake_run(name: str, twiki) -> list[dict]:
    """Three periods whose changed NLL falls with the epochs, more under TAALM (made-up numbers)."""
    drop = 0.1 * twiki.epochs + (0.2 if "TAALM" in name else 0.0)
    return [{"period": f"period{k}", "train_loss": 1.0,
             "before": {"changed/nll": 6.0, "changed/acc": 0.0, "unchanged/nll": 3.0, "unchanged/acc": 0.5},
             "after": {"changed/nll": 6.0 - drop, "changed/acc": 0.1, "unchanged/nll": 3.0 + 0.01 * k,
                       "unchanged/acc": 0.5}} for k in (1, 2, 3)]


@pytest.fixture
def stand_ins(monkeypatch):
    """θ0/φ and the training replaced; the seed folder's config check is the real one (``stages.check_config``
    with the ``write_config`` the study passes). Returns the log of calls."""
    calls = {"prepare": [], "runs": []}

    def prepare(cfg, *, write_config=True):
        stages.check_config(pathlib.Path(cfg.out), cfg, write=write_config)
        calls["prepare"].append((cfg.seed, write_config))
        return taalm.Prepared(world=None, tok=None, model=None, pt_record={}, sets=None, setup=None)

    def twiki_method(cfg, name, twiki, model, periods, review):
        calls["runs"].append((cfg.seed, twiki.epochs, name, twiki.lr))
        return _fake_run(name, twiki)

    period = types.SimpleNamespace(stream=types.SimpleNamespace(docs=range(6)))
    monkeypatch.setattr(taalm, "prepare", prepare)
    monkeypatch.setattr(stages, "twiki_streams", lambda cfg, tok, world, handle: ([period] * 3, None))
    monkeypatch.setattr(stages, "twiki_method", twiki_method)
    return calls


def _seed_folders(tmp_path, seeds) -> dict:
    """The seed folders' config.json as `cfka taalm --seed N` leaves them; {path: (bytes, mtime_ns)}."""
    out = {}
    for seed in seeds:
        base = tmp_path / f"base-s{seed}"
        stages.check_config(base, taalm.with_seed(taalm.preset("smoke", str(base)), seed))
        path = base / "config.json"
        out[path] = (path.read_bytes(), path.stat().st_mtime_ns)
    return out


def test_runs_resume_write_the_record_and_leave_the_seed_folders_config(tmp_path, stand_ins):
    configs = _seed_folders(tmp_path, (0, 1))
    assert taalm_twiki.main(_argv(tmp_path)) == 0
    lr = taalm.preset("smoke").twiki.lr
    assert sorted(stand_ins["runs"]) == sorted((s, e, m, lr) for s in (0, 1) for e in (1, 3)
                                               for m in ("Finetune", "TAALM + K-Adapter"))
    assert stand_ins["prepare"] == [(0, False), (1, False)]
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in configs} == configs  # never rewritten
    run = json.loads(taalm_twiki.run_path(tmp_path / "study", 1, 3, "TAALM + K-Adapter").read_text())
    assert (run["seed"], run["epochs"], run["method"], run["updates_per_epoch"]) == (1, 3, "TAALM + K-Adapter",
                                                                                      [2, 2, 2])

    rec = load_records(tmp_path / "results")["taalm/twiki_epochs_smoke"]
    assert len(rec.rows) == 2 * 2 * 2 * 3 * 2 and all(set(r) == ROW_KEYS for r in rec.rows)
    assert rec.provenance["unit"] == "run" and rec.provenance["seeds"] == [0, 1] and rec.seeds == 2
    assert rec.regime["grid"] == {"Finetune": [1, 3], "TAALM + K-Adapter": [1, 3]}
    assert rec.select(method="Finetune", epochs=3, seed=0, period=2, probes="changed")[0]["after"] == 5.7
    assert "--epochs 1,3 --seeds 0,1" in rec.provenance["command"]
    # the TemporalWiki rule reads it at one epoch count (the rows of one `epochs`)
    at3 = dataclasses.replace(rec, rows=tuple(r for r in rec.rows if r["epochs"] == 3))
    j = taalm_claims.twiki_lower(at3, "TAALM + K-Adapter", "Finetune", "changed")
    assert j.verdict == "holds", j

    # resume: only the missing run is made, and only its seed is loaded
    taalm_twiki.run_path(tmp_path / "study", 1, 1, "Finetune").unlink()
    stand_ins["runs"].clear(), stand_ins["prepare"].clear()
    assert taalm_twiki.main(_argv(tmp_path)) == 0
    assert stand_ins["runs"] == [(1, 1, "Finetune", lr)] and stand_ins["prepare"] == [(1, False)]
    stand_ins["runs"].clear(), stand_ins["prepare"].clear()
    assert taalm_twiki.main(_argv(tmp_path)) == 0
    assert stand_ins == {"runs": [], "prepare": []}
    # a later call adds an epoch count; the record keeps the earlier runs
    assert taalm_twiki.main(_argv(tmp_path, epochs="1,3,5", seeds="0", methods="Finetune")) == 0
    assert stand_ins["runs"] == [(0, 5, "Finetune", lr)]
    rec = load_records(tmp_path / "results")["taalm/twiki_epochs_smoke"]
    assert len(rec.rows) == (8 + 1) * 3 * 2 and rec.regime["grid"]["Finetune"] == [1, 3, 5]
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in configs} == configs


def test_other_settings_are_refused_naming_the_folder(tmp_path, stand_ins):
    _seed_folders(tmp_path, (0,))
    assert taalm_twiki.main(_argv(tmp_path, seeds="0", methods="Finetune")) == 0
    moved = dataclasses.replace(taalm_twiki.FLAGS.parse(_argv(tmp_path, seeds="0", methods="Finetune")),
                                base_dirs=str(tmp_path / "other-{seed}"))
    with pytest.raises(ValueError, match="--out .* base_dirs differ"):
        taalm_twiki.command(moved)
    # a seed folder made with other TemporalWiki settings (its twiki.lr): refused, its config untouched
    base = tmp_path / "base-s1"
    cfg = taalm.with_seed(taalm.preset("smoke", str(base)), 1)
    stages.check_config(base, dataclasses.replace(cfg, twiki=dataclasses.replace(cfg.twiki, lr=5e-2)))
    before = (base / "config.json").read_bytes()
    with pytest.raises(ValueError, match="other settings .*twiki"):
        taalm_twiki.command(taalm_twiki.FLAGS.parse(_argv(tmp_path, seeds="1", methods="Finetune")))
    assert (base / "config.json").read_bytes() == before


@pytest.fixture(scope="module")
def smoke_study(tmp_path_factory):
    """The real smoke stages once: θ0 and φ of seed 0 as `cfka taalm --seed 0` makes them, then the study at
    1 and 2 epochs per period for Finetune and TAALM + K-Adapter."""
    root = tmp_path_factory.mktemp("taalm-twiki")
    base = root / "base-s0"
    taalm.prepare(dataclasses.replace(taalm.preset("smoke", str(base)), progress=False))
    config = base / "config.json"
    snapshot = (config.read_bytes(), config.stat().st_mtime_ns)
    argv = _argv(root, epochs="1,2", seeds="0")
    assert taalm_twiki.main(argv) == 0
    return root, argv, config, snapshot


@pytest.mark.slow  # ≈ 3–5 min on the loaded 2 cores: the smoke θ0 and φ, then 4 TemporalWiki runs
def test_the_smoke_study_runs_records_and_resumes(smoke_study, monkeypatch):
    root, argv, config, snapshot = smoke_study
    assert (config.read_bytes(), config.stat().st_mtime_ns) == snapshot
    rec = load_records(root / "results")["taalm/twiki_epochs_smoke"]
    assert {(r["method"], r["epochs"], r["period"], r["probes"]) for r in rec.rows} == {
        (m, e, k, p) for m in ("Finetune", "TAALM + K-Adapter") for e in (1, 2) for k in (1, 2, 3)
        for p in ("changed", "unchanged")}
    runs = {(e, m): json.loads(taalm_twiki.run_path(root / "study", 0, e, m).read_text())
            for e in (1, 2) for m in ("Finetune", "TAALM + K-Adapter")}
    for m in ("Finetune", "TAALM + K-Adapter"):  # the same θ0 before period 1, another θ after 2 epochs than 1
        one, two = runs[1, m]["periods"][0], runs[2, m]["periods"][0]
        assert one["before"] == two["before"] and one["after"]["changed/nll"] != two["after"]["changed/nll"]

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run was made again")

    monkeypatch.setattr(taalm, "prepare", refuse)
    monkeypatch.setattr(stages, "twiki_method", refuse)
    assert taalm_twiki.main(argv) == 0
