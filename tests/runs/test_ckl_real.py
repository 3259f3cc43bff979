"""runs/ckl_real.py and runs/twiki_real.py (``cfka taalm --lama-ckl`` / ``--temporalwiki``) on fixtures in the real
files' layouts with a tiny random-init HF Qwen2 folder: flags, layouts, the tokenizer check, a smoke run, resume
after a kill (same history as an uninterrupted run), every method, update modes, the mesh, TemporalWiki."""

import json
import pathlib

import numpy as np
import pytest

from cfka_jax import cli
from cfka_jax.continual import ckl
from cfka_jax.continual.ckl import CKLConfig
from cfka_jax.runs import ckl_real, twiki_real
from cfka_jax.runs.ckl_real import RealCKLSpec
from cfka_jax.experiments import taalm_real
from tests.runs import ckl_fixtures as F
from tests.tolerances import F32

pytestmark = pytest.mark.torch

SMALL = ["--batch-size", "4", "--eval-batch", "8", "--lora-rank", "4", "--phi-epochs", "1", "--phi-meta-batch", "4",
         "--phi-val-size", "2", "--phi-max-steps", "2", "--no-progress"]


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("ckl_real")
    return {"lama": F.write_lama(root / "lama"), "twiki": F.write_twiki(root / "twiki"),
            "qwen": F.write_tiny_qwen(root / "qwen"), "root": root}


def _lama_args(fx, out, *extra):
    return ["--lama-ckl", str(fx["lama"]), "--model", str(fx["qwen"]), "--out", str(out), *SMALL, *extra]


def test_bad_flags_are_refused_naming_the_flag(fx, tmp_path, capsys):
    base = dict(model=str(fx["qwen"]), out=str(tmp_path / "o"), lama_ckl=str(fx["lama"]), methods=("Finetune",))
    with pytest.raises(ValueError, match="--phi-train FILE is required"):
        RealCKLSpec(**{**base, "methods": ("TAALM",)})
    with pytest.raises(ValueError, match="exactly one of --lama-ckl"):
        RealCKLSpec(**base, temporalwiki=str(fx["twiki"]))
    with pytest.raises(ValueError, match="--methods: .*EWC.* not available in the ckl recipe"):
        RealCKLSpec(**{**base, "methods": ("Finetune + EWC",)})
    with pytest.raises(ValueError, match="--update"):
        RealCKLSpec(**base, update="half")
    with pytest.raises(ValueError, match="--freeze-layers needs --update freeze"):
        RealCKLSpec(**base, freeze_layers=1)
    with pytest.raises(FileNotFoundError, match="--phi-model /nowhere"):
        RealCKLSpec(**base, phi_model="/nowhere")
    with pytest.raises(ValueError, match="--mesh"):
        RealCKLSpec(**base, mesh="rows=2")
    assert cli.main(["taalm", *_lama_args(fx, tmp_path / "o"), "--methods", "TAALM"]) == 2
    assert "--phi-train FILE is required" in capsys.readouterr().err
    tw = ["taalm", "--temporalwiki", str(fx["twiki"]), "--model", str(fx["qwen"]), "--out", str(tmp_path / "t")]
    assert cli.main([*tw, "--methods", "Oracle"]) == 2
    assert "needs object_mask" in capsys.readouterr().err  # diff-set documents carry no object
    assert cli.main([*tw, "--methods", "Mix-review"]) == 2
    assert "--review FILE" in capsys.readouterr().err


def test_pairs_of_both_layouts_and_a_bad_file(fx, tmp_path):
    from cfka_jax.data.lama_ckl import schematic_probe
    from cfka_jax.models import load_tokenizer

    tok = load_tokenizer(fx["qwen"])
    lama = ckl_real.read_pairs(str(fx["lama"] / "train_attention_traindata.jsonl"), tok)
    rows = [json.loads(x) for x in (fx["lama"] / "train_attention_traindata.jsonl").read_text().splitlines()]
    assert len(lama.d) == len(rows) and lama.t.empty == 0 and lama.d.empty == 0
    assert tok.decode(lama.t.ids[0][1:]) == rows[0]["task_schematic"]
    ta_path = fx["twiki"] / "train_TA" / "train_attention_traindata_0809.jsonl"
    tw = ckl_real.read_pairs(str(ta_path), tok, limit=3)
    first = json.loads(ta_path.read_text().splitlines()[0])
    assert len(tw.d) == 3 and tok.decode(tw.d.ids[0][1:]) == first["text"]
    assert tok.decode(tw.t.ids[0][1:]) == schematic_probe(first["subject"], first["relation"], first["object"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"sentence": "x"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl, line 1: neither a LAMA-CKL record"):
        ckl_real.read_pairs(str(bad), tok)


def test_tokenizer_fingerprint_compares_content_not_settings(fx, tmp_path):
    from cfka_jax.models import load_tokenizer
    from cfka_jax.provenance import tokenizer_fingerprint

    tok = load_tokenizer(fx["qwen"])
    same = F.write_tokenizer(tmp_path / "same")
    same.model_max_length = 7  # a setting, not content
    other = F.write_tokenizer(tmp_path / "other", extra="zebra quantum xylophone")
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(same)
    assert tokenizer_fingerprint(tok) != tokenizer_fingerprint(other)


def test_twiki_layouts_jsonl_and_csv(fx, tmp_path):
    files = twiki_real.twiki_files(str(fx["twiki"]))
    assert [f["name"] for f in files] == ["0910", "1011", "1112"]
    assert all(f["stream"].endswith("_filtered.jsonl") for f in files)
    csv_root = F.write_twiki(tmp_path / "csv", csv_streams=True)
    files = twiki_real.twiki_files(str(csv_root))
    texts = twiki_real.read_texts(files[0]["stream"])
    assert len(texts) == 4 and "too short" not in texts  # the reference's filter
    (csv_root / "eval" / "1001-1101_unchanged.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="no unchanged probes of 1001-1101"):
        twiki_real.twiki_files(str(csv_root))


def test_smoke_lama_finetune_writes_table_and_curves(fx, tmp_path):
    out = tmp_path / "run"
    assert taalm_real.main(_lama_args(fx, out, "--methods", "Finetune", "--epochs", "1")) == 0
    res = json.loads((out / "lama" / "finetune.json").read_text())
    assert [h["epoch"] for h in res["history"]] == [0, 1]
    assert np.isfinite(res["history"][1]["train_loss"]) and res["empty_object_masks"]["to_learn"] == 0
    assert "| Finetune |" in (out / "table.md").read_text() and (out / "accuracy.png").stat().st_size > 0
    assert not (out / "lama" / "finetune").exists()  # checkpoints removed once the result is written
    with pytest.raises(ValueError, match="other settings"):
        taalm_real.main(_lama_args(fx, out, "--methods", "Finetune", "--epochs", "1", "--lr", "1e-3"))


class _Killed(Exception):
    pass


def _kill_at(monkeypatch, epoch: int):
    real = ckl.Trainer.train_epoch

    def train_epoch(self, stream, review, e):
        if e == epoch:
            raise _Killed
        return real(self, stream, review, e)

    monkeypatch.setattr(ckl.Trainer, "train_epoch", train_epoch)


def _spec(fx, out, **kw):
    base = dict(model=str(fx["qwen"]), out=str(out), lama_ckl=str(fx["lama"]), methods=("Finetune",), lora_rank=4,
                lora_alpha=1.0, ckl=CKLConfig(epochs=3, batch_size=4, eval_batch=8, lr=1e-2), progress=False)
    return RealCKLSpec(**{**base, **kw})


@pytest.mark.slow
def test_lama_resumes_after_a_kill_with_the_uninterrupted_history(fx, tmp_path, monkeypatch):
    straight = ckl_real.run_lama(_spec(fx, tmp_path / "a"))["Finetune"]["history"]
    with monkeypatch.context() as m:
        _kill_at(m, 3)
        with pytest.raises(_Killed):
            ckl_real.run_lama(_spec(fx, tmp_path / "b"))
    assert [h["epoch"] for h in json.loads((tmp_path / "b/lama/finetune/history.json").read_text())] == [0, 1, 2]
    resumed = ckl_real.run_lama(_spec(fx, tmp_path / "b"))["Finetune"]["history"]
    keys = ("train_loss", "to_learn/nll", "not_to_forget/nll", "to_learn/acc")
    np.testing.assert_allclose([[h[k] for k in keys] for h in resumed[1:]],
                               [[h[k] for k in keys] for h in straight[1:]], rtol=F32.model_rtol,
                               atol=F32.model_atol)
    assert straight[3]["train_loss"] < straight[1]["train_loss"]  # lr 1e-2 on 6 documents: it learns


@pytest.mark.slow
def test_every_method_update_modes_and_phi_from_another_model(fx, tmp_path):
    phi_model = F.write_tiny_qwen(tmp_path / "phi_body", hidden=24, layers=1, seed=3)
    methods = ",".join(("Finetune", "Oracle", "RHO-1", "RHO-1 (taalm_code)", "Mix-review", "RecAdam", "K-Adapter",
                        "TAALM", "TAALM + K-Adapter + Mix-review + RecAdam"))
    out = tmp_path / "all"
    args = _lama_args(fx, out, "--methods", methods, "--epochs", "1", "--phi-model", str(phi_model),
                      "--phi-train", str(fx["lama"] / "train_attention_traindata.jsonl"))
    assert taalm_real.main(args) == 0
    table = (out / "table.md").read_text()
    assert all(f"| {m} |" in table for m in methods.split(","))
    assert json.loads((out / "phi" / "phi.json").read_text())["body"]["hidden_size"] == 24
    assert json.loads((out / "metatrain.json").read_text())["pairs"] == 10
    for update in ("full", "freeze"):
        assert taalm_real.main(_lama_args(fx, tmp_path / update, "--methods", "Finetune", "--epochs", "1",
                                          "--update", update)) == 0
    other = F.write_tiny_qwen(tmp_path / "other", tokenizer_extra="zebra quantum xylophone")
    with pytest.raises(ValueError, match=f"--phi-model {other}: its tokenizer differs"):
        taalm_real.main(_lama_args(fx, tmp_path / "refused", "--methods", "TAALM", "--phi-model", str(other),
                                   "--phi-train", str(fx["lama"] / "train_attention_traindata.jsonl")))


@pytest.mark.slow
def test_mesh_and_bfloat16_runs(fx, tmp_path):
    import jax

    one = ckl_real.run_lama(_spec(fx, tmp_path / "one", ckl=CKLConfig(epochs=1, batch_size=4, eval_batch=8)))
    if jax.device_count() >= 2:
        two = ckl_real.run_lama(_spec(fx, tmp_path / "two", mesh="data=2",
                                      ckl=CKLConfig(epochs=1, batch_size=4, eval_batch=8)))
        a, b = one["Finetune"]["history"][1], two["Finetune"]["history"][1]
        np.testing.assert_allclose([a["train_loss"], a["to_learn/nll"]], [b["train_loss"], b["to_learn/nll"]],
                                   rtol=F32.model_rtol, atol=F32.model_atol)
    bf = ckl_real.run_lama(_spec(fx, tmp_path / "bf", dtype="bfloat16", ckl=CKLConfig(epochs=1, batch_size=4,
                                                                                         eval_batch=8)))
    assert np.isfinite(bf["Finetune"]["history"][1]["to_learn/nll"])


@pytest.mark.slow
def test_twiki_smoke_csv_streams_taalm_and_resume(fx, tmp_path, monkeypatch):
    root = F.write_twiki(tmp_path / "tw", csv_streams=True)
    ta = root / "train_TA" / "train_attention_traindata_0809.jsonl"
    args = ["--temporalwiki", str(root), "--model", str(fx["qwen"]), "--methods", "Finetune,TAALM", "--phi-train",
            str(ta), *SMALL, "--lr", "1e-2"]
    calls = {"n": 0}
    real = ckl.Trainer.train_epoch

    def train_epoch(self, stream, review, e):  # killed in the second period of the first method
        calls["n"] += 1
        if calls["n"] == 2:
            raise _Killed
        return real(self, stream, review, e)

    with monkeypatch.context() as m:
        m.setattr(ckl.Trainer, "train_epoch", train_epoch)
        with pytest.raises(_Killed):
            taalm_real.main([*args, "--out", str(tmp_path / "b")])
    assert len(json.loads((tmp_path / "b/twiki/finetune/periods.json").read_text())) == 1
    assert taalm_real.main([*args, "--out", str(tmp_path / "b")]) == 0
    assert taalm_real.main([*args, "--out", str(tmp_path / "a")]) == 0
    a, b = (json.loads((tmp_path / x / "twiki/finetune.json").read_text()) for x in "ab")
    assert [r["period"] for r in b] == ["0910", "1011", "1112"]
    for ra, rb in zip(a, b):
        np.testing.assert_allclose(rb["after"]["changed/nll"], ra["after"]["changed/nll"], rtol=F32.model_rtol,
                                   atol=F32.model_atol)
    assert a[0]["after"]["changed/nll"] != a[0]["before"]["changed/nll"]
    table = (tmp_path / "a" / "table.md").read_text()
    assert "| TAALM |" in table and "unchanged" in table


@pytest.mark.slow
def test_llama_folder_runs_finetune_and_taalm(fx, tmp_path):
    pytest.importorskip("cfka_jax.models.llama")  # the Llama port (models/llama/) lands separately
    llama = F.write_tiny_llama(tmp_path / "llama")
    out = tmp_path / "run"
    args = ["--lama-ckl", str(fx["lama"]), "--model", str(llama), "--out", str(out), *SMALL, "--methods",
            "Finetune,TAALM", "--epochs", "1", "--phi-train", str(fx["lama"] / "train_attention_traindata.jsonl")]
    assert taalm_real.main(args) == 0
    table = (out / "table.md").read_text()
    assert "| TAALM |" in table and "| Finetune |" in table
    assert json.loads((out / "phi" / "phi.json").read_text())["body"]["model_type"] == "llama"
