"""``cfka taalm --lr / --method-lr / --epochs / --method-epochs`` and the lr-selection study (experiments/taalm_lr.py):
the flags reach the config and the optimiser, bad values exit 2 before anything is written, the one selection rule
picks the argmax of the held-out metric, the record and the verdict of ``taalm.lr-selection``."""

import json

import flax.nnx as nnx
import jax
import numpy as np
import pytest
from cfka_jax.experiments import taalm_lr
from cfka_jax.experiments import taalm_stages as stages
from cfka_jax.experiments.taalm_command import SYNTHETIC

from cfka_jax import cli
from cfka_jax.claims.papers import taalm as taalm_claims
from cfka_jax.claims.papers.taalm_rules import LRChoice, at_chosen, select_lr
from cfka_jax.claims.results import load_records
from cfka_jax.continual.ckl import Stream
from cfka_jax.data.ckl_encode import Encoded
from cfka_jax.models.qwen import QwenConfig, QwenModel

V = 17


def _encoded(key, n, length, obj_at):
    ids = [np.asarray(jax.random.randint(jax.random.fold_in(key, i), (length,), 1, V), np.int32) for i in range(n)]
    mask = np.zeros(length, np.float32)
    mask[obj_at] = 1.0
    return Encoded(tuple(ids), tuple(mask.copy() for _ in range(n)), 0)


def test_lr_flags_reach_the_config_and_the_optimiser(tmp_path):
    """≈ 15–25 s on the loaded 2 cores: two one-epoch runs, each compiling its own step (the lr must be seen
    changing the update)."""
    argv = ["--preset", "smoke", "--out", str(tmp_path), "--lr", "2e-2", "--method-lr", "TAALM=5e-3",
            "--method-epochs", "K-Adapter=3", "--epochs", "1"]
    cfg = SYNTHETIC.parse(argv).taalm()
    assert cfg.ckl.lr == cfg.twiki.lr == 2e-2 and cfg.ckl_for("Finetune").lr == 2e-2
    assert cfg.ckl_for("TAALM").lr == cfg.twiki_for("TAALM").lr == 5e-3
    assert cfg.ckl_for("K-Adapter").epochs == 3 and cfg.ckl_for("Finetune").epochs == cfg.ckl.epochs == 1
    stages.check_config(tmp_path, cfg)  # the run folder's config.json records them
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["ckl"]["lr"] == 2e-2 and written["method_lr"] == [["TAALM", 5e-3]]
    assert written["method_epochs"] == [["K-Adapter", 3]]

    key = jax.random.key(0)
    model = QwenModel(QwenConfig(model_type="qwen2", vocab_size=V, hidden_size=12, intermediate_size=20,
                                 num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                 tie_word_embeddings=True), rngs=nnx.Rngs(0))
    docs = _encoded(key, 6, 9, [6, 7])
    probes = {"to_learn": _encoded(jax.random.fold_in(key, 1), 4, 5, [3, 4]),
              "not_to_forget": _encoded(jax.random.fold_in(key, 2), 4, 5, [4])}
    runs = {}
    for lr in (2e-2, 4e-2):
        at = SYNTHETIC.parse([*argv[:4], "--lr", str(lr), "--epochs", "1"]).taalm()
        runs[lr] = stages.lama_method(at, "Finetune", at.ckl_for("Finetune"), model, Stream(docs), probes, None)
    assert runs[2e-2]["lr"] == 2e-2 and runs[4e-2]["lr"] == 4e-2 and runs[2e-2]["epochs"] == 1
    before = [r["history"][0]["to_learn/nll"] for r in runs.values()]
    after = [r["history"][-1]["to_learn/nll"] for r in runs.values()]
    assert before[0] == before[1] and after[0] != after[1]  # same θ0, a different optimiser step


@pytest.mark.parametrize("option, value", [("--lr", "0"), ("--lr", "-1e-3"), ("--lr", "nan"),
                                           ("--method-lr", "Finetune=0"), ("--method-lr", "NoSuch=1e-3"),
                                           ("--method-lr", "Finetune"), ("--method-epochs", "K-Adapter=-1"),
                                           ("--method-epochs", "TAALM=2.5")])
def test_a_bad_lr_or_budget_exits_2_naming_the_option_and_writes_nothing(option, value, tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    try:
        code = cli.main(["taalm", "--preset", "smoke", "--out", str(tmp_path / "out"), option, value])
    except SystemExit as e:  # a value the parser itself refuses
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and option in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_at_another_budget_has_its_own_folder_record_and_epochs(monkeypatch, tmp_path):
    """``--epochs N``: every run of the sweep trains N epochs; the folder and record name carry the budget, so a
    sweep at the preset's budget is never mixed with it; ``--epochs 0`` is refused naming the option."""
    cfg = taalm_lr.FLAGS.parse(["--preset", "smoke", "--epochs", "7", "--seeds", "0", "--methods", "K-Adapter"])
    assert cfg.out_dir().name == "taalm-lr-smoke-e7" and cfg.record_name() == "taalm/lr_selection_smoke_e7"
    plain = taalm_lr.FLAGS.parse(["--preset", "smoke"])
    assert plain.out_dir().name == "taalm-lr-smoke" and plain.record_name() == "taalm/lr_selection_smoke"
    with pytest.raises(SystemExit) as err:
        taalm_lr.main(["--preset", "smoke", "--epochs", "0", "--out", str(tmp_path / "x")])
    assert err.value.code == 2 and not (tmp_path / "x").exists()

    class Prepared:  # the shared stages, stubbed: only the budget each run is given matters here
        sets = type("Sets", (), {"to_learn": tuple(range(6)), "not_to_forget": tuple(range(6))})()
        tok = model = setup = world = None

    seen = []
    monkeypatch.setattr(taalm_lr.taalm, "prepare", lambda tcfg, write_config: Prepared)
    monkeypatch.setattr(stages, "descriptive_probes", lambda *a, **k: None)
    monkeypatch.setattr(stages, "lama_streams", lambda *a, **k: (None, None))

    def method(tcfg, name, ckl, *a):
        seen.append((name, ckl.lr, ckl.epochs))
        return {"history": [{"sel_to_learn/acc": 0.0, "sel_not_to_forget/acc": 1.0}], "summary": {
            "top_acc": 0.0, "epoch": 0, "nf_acc": 1.0, "total_knowledge": 1.0}, "wall_s": 0.0}

    monkeypatch.setattr(stages, "lama_method", method)
    cfg = taalm_lr.FLAGS.parse(["--preset", "smoke", "--epochs", "7", "--lrs", "1e-3", "--seeds", "0", "--methods",
                                "K-Adapter", "--out", str(tmp_path / "sweep")])
    taalm_lr.run_seed(cfg, 0, tmp_path / "sweep", lambda: None)
    assert seen == [("K-Adapter", 1e-3, 7)]


def _rows(table: dict, split: str = "selection") -> list[dict]:
    """``{method: {lr: [per-seed Total]}}`` → record rows of one split."""
    return [{"method": m, "lr": lr, "seed": s, "split": split, "total": v}
            for m, by_lr in table.items() for lr, vals in by_lr.items() for s, v in enumerate(vals)]


def test_the_selection_rule_picks_the_argmax_of_the_held_out_metric():
    rows = _rows({"Finetune": {1e-3: [0.5, 0.7], 3e-3: [0.9, 0.6], 1e-2: [1.0, 0.9]},
                  "TAALM": {1e-3: [1.2, 1.0], 3e-3: [0.4, 1.9], 1e-2: [1.1, 1.2]},
                  "Oracle": {1e-3: [0.8, 0.8], 3e-3: [0.9, 0.7]}})  # a tie: the smaller lr
    rows += _rows({"Finetune": {1e-3: [9.0, 9.0]}}, split="test")  # the test split never selects
    chosen = select_lr(rows)
    assert {m: c.lr for m, c in chosen.items()} == {"Finetune": 1e-2, "TAALM": 3e-3, "Oracle": 1e-3}
    assert chosen["TAALM"].means == pytest.approx({1e-3: 1.1, 3e-3: 1.15, 1e-2: 1.15})
    # an lr run on fewer seeds: only the seeds every lr has count
    rows = _rows({"Finetune": {1e-3: [0.5, 3.0], 3e-3: [0.9]}})
    assert select_lr(rows)["Finetune"] == LRChoice(3e-3, {1e-3: 0.5, 3e-3: 0.9}, (0,))
    with pytest.raises(ValueError, match="two selection rows"):
        select_lr(rows + rows)
    test = _rows({"Finetune": {1e-3: [0.1, 0.2], 3e-3: [0.3, 0.4]}}, split="test")
    assert [r["total"] for r in at_chosen(test, select_lr(rows))] == [0.3]


def _cell(name, top_sel, top_test, nf=0.8, lr=1e-3):
    summ = lambda t: {"top_acc": t, "epoch": 2, "nf_acc": nf, "total_knowledge": t + nf}
    return {"method": name, "selection_summary": summ(top_sel), "summary": summ(top_test), "wall_s": 1.5, "lr": lr,
            "split_sizes": {"selection": {"n_to_learn": 3, "n_not_to_forget": 3},
                            "test": {"n_to_learn": 6, "n_not_to_forget": 6}}}


def test_the_record_and_the_lr_selection_verdict(tmp_path):
    """Hand-made runs (no training): the record's rows and the claim's verdict at each method's chosen lr."""
    cfg = taalm_lr.Config(preset="smoke", lrs=(1e-3, 1e-2), seeds=(0, 1), methods=("Finetune", "TAALM"),
                          out=str(tmp_path / "sweep"), results=str(tmp_path / "results"))
    out = cfg.out_dir()
    tops = {("Finetune", 1e-3): (0.1, 0.1), ("Finetune", 1e-2): (0.3, 0.2),  # Finetune chooses 1e-2
            ("TAALM", 1e-3): (0.9, 0.8), ("TAALM", 1e-2): (0.5, 0.9)}      # TAALM chooses 1e-3 (not test's best)
    for (name, lr), (sel, test) in tops.items():
        for seed in (0, 1):
            path = taalm_lr.cell_path(out, seed, lr, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_cell(name, sel + 0.01 * seed, test + 0.01 * seed, lr=lr)))
    path = taalm_lr.write_lr_record(cfg, out)
    rec = load_records(tmp_path / "results")["taalm/lr_selection_smoke"]
    assert path.exists() and len(rec.rows) == 16 and rec.provenance["seeds"] == [0, 1]
    assert {r["split"] for r in rec.rows} == {"selection", "test"} and rec.regime["n_to_learn"] == 6
    assert {m: c.lr for m, c in select_lr(rec.rows).items()} == {"Finetune": 1e-2, "TAALM": 1e-3}
    j = taalm_claims.lr_selection({taalm_claims.LR_SEL: rec})
    assert j.verdict == "holds", j  # TAALM 0.8 vs Finetune 0.2 test Top Acc on both seeds
    assert "Finetune 1e-02" in j.reason and "TAALM 1e-03" in j.reason
    note = taalm_claims.lr_note({taalm_claims.LR_SEL: rec}, ("TAALM", "Finetune", "RHO-1"))
    assert "TAALM 1e-03" in note and "Finetune 1e-02" in note and "RHO-1" not in note


@pytest.mark.slow  # ≈ 3 min on the loaded 2 cores: the smoke θ0 and φ, then 2 lrs × 2 methods, twice
def test_the_sweep_runs_resumes_and_records(tmp_path):
    base = str(tmp_path / "base-{seed}")
    argv = ["--preset", "smoke", "--lrs", "1e-3,2e-3", "--seeds", "0", "--methods", "Finetune,TAALM",
            "--base-dirs", base, "--out", str(tmp_path / "sweep"), "--results", str(tmp_path / "results")]
    assert taalm_lr.main(argv) == 0
    rec = load_records(tmp_path / "results")["taalm/lr_selection_smoke"]
    assert {(r["method"], r["lr"], r["split"]) for r in rec.rows} == {
        (m, lr, s) for m in ("Finetune", "TAALM") for lr in (1e-3, 2e-3) for s in ("selection", "test")}
    cell = json.loads(taalm_lr.cell_path(tmp_path / "sweep", 0, 2e-3, "TAALM").read_text())
    assert cell["lr"] == 2e-3 and "sel_to_learn/acc" in cell["history"][-1]
    assert taalm_lr.main(argv) == 0  # every run resumed from the folder
