"""Smoke run of the KnowEdit CPT script (experiments/knowedit.py): naive, LAMOL and STOC on a tiny local model."""

import json

import pytest
from flax import nnx

from cfka_jax.data.tokenize import train_word_tokenizer
from cfka_jax.models import QwenConfig, QwenModel, save_pretrained
from cfka_jax.runs.presets import KNOWEDIT
from cfka_jax.experiments import knowedit as exp

NAMES = ["Anna", "Bob", "Carl", "Dana", "Eve", "Finn"]
CITIES = ["Paris", "Rome", "Oslo", "Lima", "Kyiv", "Cairo"]


def _records():
    return [{"subject": n, "prompt": f"Which city does {n} live in ?", "target_new": c, "ground_truth": [c],
             "rephrase_prompt": f"Where does {n} live ?",
             "locality": {"Relation_Specificity": [{"prompt": f"The friend of {n} is", "ground_truth": [m]}]}}
            for n, c, m in zip(NAMES, CITIES, NAMES[1:] + NAMES[:1])]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("knowedit")
    records = _records()
    (root / "test.json").write_text(json.dumps(records))
    words = [r[k] for r in records for k in ("prompt", "rephrase_prompt")]
    words += [" " + w for w in NAMES + CITIES] + [r["locality"]["Relation_Specificity"][0]["prompt"] for r in records]
    folder = root / "model"
    tok = train_word_tokenizer(words, folder)
    # qwen3, not qwen2: transformers 5 AutoTokenizer forces its Qwen2Tokenizer on a qwen2 config.json, which
    # drops this folder's word-level tokenizer.json (every text encodes to []); qwen3 folders keep tokenizer.json
    cfg = QwenConfig(model_type="qwen3", vocab_size=len(tok), hidden_size=16, intermediate_size=24,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                     tie_word_embeddings=True, max_position_embeddings=128)
    save_pretrained(QwenModel(cfg, rngs=nnx.Rngs(0)), folder)
    return root


def test_naive_lamol_stoc_end_to_end(setup):
    root = setup
    out = root / "runs"
    rc = exp.main(["--data", str(root / "test.json"), "--model", str(root / "model"), "--out", str(out),
                   "--preset", "smoke", "--methods", "naive,lamol,stoc", "--no-progress"])
    assert rc == 0
    results = json.loads((out / "table.json").read_text())
    assert set(results) == {"naive", "lamol-a0.5", "stoc-a0.5"}
    for name, final in results.items():
        assert final["step"] == KNOWEDIT["smoke"].cpt.steps
        for s in exp.SETS:
            assert 0.0 < final[f"{s}/fluency"] < 1.0 and final[f"{s}/n"] > 0, (name, s)
        records = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records if r["kind"] == "eval"] == [0, KNOWEDIT["smoke"].cpt.steps]
    mix = results["stoc-a0.5"]["mixture"]  # alpha 0.5: as many replay tokens as new ones, to the nearest document
    assert mix["rule"] == "token_share" and mix["replay_docs"] > 0
    assert abs(mix["replay_tokens"] - mix["new_tokens"]) <= 16  # replay documents: a question + 4 sampled tokens
    assert results["stoc-a0.5"]["train_docs"] == results["naive"]["train_docs"] + mix["replay_docs"]
    assert (out / "replay-stoc" / "config.json").exists() and (out / "replay-lamol" / "config.json").exists()
    md = (out / "table.md").read_text()
    assert "| naive |" in md and "34.58 | 63.28" in md  # the paper's ZsRE Naive row sits beside ours


def test_configs_validate():
    exp.KnowEditRun(data="d", model="m", out="o", methods=("stoc",), alpha=0.8, mixing="code_5050")
    for bad in ({"methods": ("kadapter",)}, {"methods": ("stoc + lamol",)}, {"methods": ("naive", "naive")},
                {"methods": ("ewc",), "ewc_lambda": -1.0}, {"methods": ("rho1",), "rho_k": 2.0}, {"alpha": 1.0}, {"mixing": "half"}, {"aug_align": "x"}, {"preset": "huge"},
                {"steps": 0}, {"fluency_mode": "chunks"}):
        with pytest.raises(ValueError):
            exp.KnowEditRun(data="d", model="m", out="o", **bad)
    assert exp.KnowEditRun(data="d", model="m", out="o", preset="paper", steps=100).scale.cpt.warmup == 100


def test_registry_methods_name_their_runs():
    """Any method of the one registry runs in KnowEdit (runs/method.py): replay methods carry α in the run name."""
    cfg = exp.KnowEditRun(data="d", model="m", out="o", methods=("naive", "stoc + ewc", "rho1", "ewc"))
    assert [cfg.run_name(m) for m in cfg.methods] == ["naive", "stoc+ewc-a0.5", "rho1", "ewc"]
    assert cfg.resolved("stoc + ewc").replay == "stoc" and cfg.resolved("rho1").token_loss == "rho1"


@pytest.mark.slow
def test_ewc_and_rho1_end_to_end(setup):
    """``--methods ewc,rho1`` train through the method hooks (EWC's Fisher on the first training batches, RHO-1's
    reference NLL of the base model) to the end of the smoke schedule."""
    root = setup
    out = root / "runs-hooks"
    assert exp.main(["--data", str(root / "test.json"), "--model", str(root / "model"), "--out", str(out),
                     "--preset", "smoke", "--methods", "ewc,rho1", "--no-progress"]) == 0
    results = json.loads((out / "table.json").read_text())
    assert set(results) == {"ewc", "rho1"}
    for name, final in results.items():
        assert final["step"] == KNOWEDIT["smoke"].cpt.steps and final["method"] == name and final["alpha"] is None
        for s in exp.SETS:
            assert 0.0 < final[f"{s}/fluency"] < 1.0, (name, s)


def test_freeze_update_on_a_mesh_names_its_runs(setup):
    """``--update freeze --mesh data=2``: one run per method named ``<method>-freeze``, trained to the end."""
    root = setup
    out = root / "runs-freeze"
    rc = exp.main(["--data", str(root / "test.json"), "--model", str(root / "model"), "--out", str(out),
                   "--preset", "smoke", "--methods", "naive", "--update", "freeze", "--freeze-layers", "1",
                   "--mesh", "data=2", "--no-progress"])
    assert rc == 0
    results = json.loads((out / "table.json").read_text())
    assert set(results) == {"naive-freeze"} and results["naive-freeze"]["update"] == "freeze"
    assert results["naive-freeze"]["step"] == KNOWEDIT["smoke"].cpt.steps
    for bad in ({"update": "adapter"}, {"lora_rank": 0}, {"update": "lora", "freeze_layers": 1}):
        with pytest.raises(ValueError):
            exp.KnowEditRun(data="d", model="m", out="o", **bad)
