"""Smoke tests of experiments/corpus_cpt.py (bring-your-own corpus CPT with replay and MC evaluation), on a tiny
Qwen3 folder and word-level tokenizer written to tmp_path."""

import csv
import json

import jax

import numpy as np
import pytest
from flax import nnx

from cfka_jax.data import mmlu
from cfka_jax.eval import multiple_choice as mc
from cfka_jax.data.corpus import CorpusConfig, tokenize_texts
from cfka_jax.data.tokenize import train_word_tokenizer
from cfka_jax.models import save_pretrained
from cfka_jax.models.qwen import QwenConfig, QwenModel
from cfka_jax.data.mmlu import question_sets
from cfka_jax.runs.presets import CORPUS as SCALES
from cfka_jax.experiments import corpus_cpt as cc
from tests.tolerances import F32

CORPUS = [f"the court of {place} ruled that the {thing} was void under the statute of {year} ."
          for place in ("york", "kent", "essex", "wales") for thing, year in (("contract", 1990), ("lease", 2001),
                                                                                ("will", 1875))]
MATH = [("What is two plus two?", ["three", "four", "five", "six"], "B"),
        ("Which number is prime?", ["four", "six", "seven", "eight"], "C")]
LAW = [("Who may hear an appeal?", ["a judge", "a clerk", "a juror", "a bailiff"], "A"),
       ("What binds two parties?", ["a statute", "a contract", "a verdict", "a motion"], "B"),
       ("Which court is highest?", ["district", "appeals", "supreme", "county"], "C")]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A corpus folder (jsonl + txt), MC files (Original CSV, Domain JSONL) and a tiny HF model folder.

    The model is a Qwen3 config: for ``model_type`` qwen2, transformers 5's AutoTokenizer ignores the saved
    word-level tokenizer class and builds a Qwen2Tokenizer from its vocabulary, which encodes this text wrongly.
    """
    root = tmp_path_factory.mktemp("corpus-cpt")
    (root / "corpus").mkdir()
    (root / "corpus" / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS[:8]))
    (root / "corpus" / "b.txt").write_text("\n\n".join(CORPUS[8:]))
    with open(root / "elementary_mathematics_test.csv", "w", newline="") as f:
        csv.writer(f).writerows([[q, *c, a] for q, c, a in MATH])
    (root / "law.jsonl").write_text("".join(json.dumps({"question": q, "choices": c, "answer": a,
                                                        "subject": "professional_law"}) + "\n" for q, c, a in LAW))
    prompts = [mc.build_prompt(q) for q in mmlu.read_mc([root / "elementary_mathematics_test.csv", root / "law.jsonl"])]
    model_dir = root / "model"
    tok = train_word_tokenizer(CORPUS + prompts + ["Answer: A B C D"], model_dir)
    cfg = QwenConfig(model_type="qwen3", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     tie_word_embeddings=True, max_position_embeddings=2048)
    save_pretrained(QwenModel(cfg, rngs=nnx.Rngs(0)), model_dir)
    smoke = SCALES["smoke"].seq_len
    expected = tokenize_texts(CORPUS, tok, CorpusConfig(max_length=smoke, overflow="split"))
    return root, expected


def test_stoc_smoke_run_writes_metrics_and_resumes(world, tmp_path):
    world, expected = world
    out = tmp_path / "run"
    argv = ["--data", str(world / "corpus"), "--model", str(world / "model"), "--out", str(out), "--method", "stoc",
            "--alpha", "0.8", "--preset", "smoke", "--mc-original", str(world / "elementary_mathematics_test.csv"),
            "--mc-domain", str(world / "law.jsonl"), "--heldout", "0.2", "--no-progress"]
    assert cc.main(argv) == 0
    final = json.loads((out / "final.json").read_text())
    assert final["step"] == SCALES["smoke"].cpt.steps and final["method"] == "stoc"
    assert final["Original/n"] == 2 and final["Domain/n"] == 3 and final["All/n"] == 5
    assert 0.0 <= final["Domain/acc/professional_law"] <= 1.0
    assert np.isfinite(final["Heldout/ppl"]) and final["Heldout/ppl"] > 1.0 and final["Heldout/tokens"] > 0
    corpus = final["corpus"]  # 12 texts, each cut by the word-level tokenizer into pieces of <= seq_len tokens
    assert corpus["texts"] == 12 and corpus["heldout_texts"] == 2 and corpus["tokens"] == sum(map(len, expected))
    assert corpus["train_docs"] + corpus["heldout_docs"] == len(expected) and corpus["heldout_docs"] >= 2
    assert 0 < final["mixture"]["new_tokens"] < corpus["tokens"]  # the held-out pieces are not trained on
    assert final["replay"]["num_prompts"] > 0 and final["mixture"]["replay_docs"] > 0
    assert abs(final["mixture"]["replay_share"] - 0.2) < 0.1
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in records if r["kind"] == "eval") == [0, final["step"]]
    assert (out / "replay" / "config.json").exists()
    summary = (out / "summary.md").read_text()
    assert "| Heldout/ppl |" in summary and "| Domain/acc |" in summary
    assert cc.main(argv) == 0  # complete: restored from the checkpoint, replay reused, same numbers
    assert json.loads((out / "final.json").read_text()) == final


def test_configs_and_flags_parse(world):
    world, _ = world
    mc = str(world / "elementary_mathematics_test.csv")  # input options name files that exist (Flags.inputs)
    base = ["--data", str(world / "corpus"), "--model", str(world / "model"), "--out", "o"]
    cfg = cc.config_from_args(base + ["--steps", "7", "--seq-len", "32", "--lr", "1e-4", "--mc", mc,
                                      "--domain-subjects", "law"])
    assert cfg.scale.cpt.steps == 7 and cfg.scale.seq_len == 32 and cfg.scale.cpt.peak_lr == 1e-4
    assert cfg.scale.cpt.batch == SCALES["paper"].cpt.batch and cfg.domain_subjects == ("law",)
    sets = question_sets(mc=(str(world / "elementary_mathematics_test.csv"), str(world / "law.jsonl")),
                         domain_subjects=("professional_law",))
    assert [len(sets["Original"]), len(sets["Domain"])] == [2, 3]
    bad = [{"method": "kadapter"}, {"method": "stoc + lamol"}, {"method": "ewc", "ewc_lambda": -1.0},
           {"method": "rho1", "rho_k": 0.0}, {"method": "stoc", "alpha": 1.0}, {"mc": ("a",), "mc_original": ("b",)},
           {"domain_subjects": ("law",)}, {"mc_shots": 2}, {"heldout": 0.0}, {"overrides": (("steps", 0),)}, {"overrides": (("stepz", 3),)},
           {"data": ()}]
    for kw in bad:
        with pytest.raises(ValueError):
            cc.CorpusCPTConfig(**({"data": ("x",), "model": "m", "out": "o"} | kw))


def test_ewc_and_rho1_run_and_reduce_to_naive(world, tmp_path):
    """``--method "rho1 + ewc"`` trains through both hooks (RHO-1's ``ref_nll`` from the base model, EWC's Fisher
    on the first training batches); at k = 1 (every target kept) and λ = 0 (no pull) the run is the naive one up
    to float32 rounding, and λ > 0 changes it."""
    world, _ = world
    base = ["--data", str(world / "corpus"), "--model", str(world / "model"), "--preset", "smoke",
            "--mc-original", str(world / "elementary_mathematics_test.csv"), "--heldout", "0.2", "--no-progress"]
    finals = {}
    for name, flags in {"naive": [], "reduced": ["--method", "rho1 + ewc", "--rho-k", "1", "--ewc-lambda", "0"],
                        "ewc": ["--method", "ewc", "--ewc-lambda", "1e6", "--ewc-batches", "1"]}.items():
        assert cc.main(base + ["--out", str(tmp_path / name), *flags]) == 0
        finals[name] = json.loads((tmp_path / name / "final.json").read_text())
    assert finals["reduced"]["method"] == "rho1 + ewc" and finals["reduced"]["alpha"] is None
    np.testing.assert_allclose(finals["reduced"]["Heldout/ppl"], finals["naive"]["Heldout/ppl"], rtol=F32.exact_rtol)
    assert finals["ewc"]["Heldout/ppl"] != finals["naive"]["Heldout/ppl"]


@pytest.mark.parametrize("update, scan", [("lora", False), ("lora", True),
                                          pytest.param("freeze", False, marks=pytest.mark.slow)])
def test_update_modes_train_only_their_weights(world, tmp_path, update, scan):
    """``--update lora|freeze`` (on a 2-device ``--mesh``; LoRA also on scanned blocks, whose adapters are stacked):
    the checkpointed parameters keep every frozen weight of the base model bit for bit and move the trainable ones
    (LoRA adapters; the unfrozen block)."""
    from cfka_jax.models import from_pretrained
    from cfka_jax.runs.folder import RunFolder
    from cfka_jax.experiments.update_flags import updated_model

    world, _ = world
    out = tmp_path / update
    flags = ["--update", "lora", "--lora-rank", "2"] if update == "lora" else ["--update", "freeze",
                                                                               "--freeze-layers", "0"]
    argv = ["--data", str(world / "corpus"), "--model", str(world / "model"), "--out", str(out), "--preset", "smoke",
            "--heldout", "0.2", "--no-progress", "--mesh", "data=2", *flags, "--scan-layers" if scan else "--no-scan-layers"]
    assert cc.main(argv) == 0
    assert json.loads((out / "final.json").read_text())["update"] == update
    model, _ = updated_model(from_pretrained(str(world / "model"), scan_layers=scan), update,
                             0 if update == "freeze" else None, 2, 0)
    _, init, _ = nnx.split(model, nnx.Param, ...)
    trained, _ = RunFolder(out).checkpoint_params(init)
    flat_init, flat_trained = nnx.to_flat_state(init), dict(nnx.to_flat_state(trained))
    moved = {path for path, v in flat_init if not np.array_equal(np.asarray(v[...]), np.asarray(flat_trained[path][...]))}
    names = ["/".join(map(str, p)) for p in moved]
    if update == "lora":
        assert names and all("lora" in n for n in names), names
    else:  # embedding (tied head) frozen; the one block trains
        assert names and not any("embed" in n for n in names) and any("layers" in n for n in names), names


def test_update_flags_refused(world):
    world, _ = world
    base = {"data": ("x",), "model": "m", "out": "o"}
    for kw in ({"update": "adapter"}, {"lora_rank": 0}, {"freeze_layers": -1}, {"freeze_layers": 2},
               {"mesh": "dat=2"}):
        with pytest.raises(ValueError):
            cc.CorpusCPTConfig(**(base | kw))
    out = world / "refused"
    with pytest.raises(ValueError, match="--freeze-layers 5 with --update freeze leaves none of the 1 blocks"):
        cc.run(cc.CorpusCPTConfig(data=(str(world / "corpus"),), model=str(world / "model"), out=str(out),
                                  preset="smoke", update="freeze", freeze_layers=5, progress=False))
    assert not out.exists()  # refused before anything is written


def test_an_interrupted_lean_default_run_resumes_bit_exactly(world, tmp_path):
    """Under the default lean path (scanned, rematerialised blocks, the tiled head loss, the in-place guard): a run
    stopped after its step-2 checkpoint (its final.json and later checkpoint gone, as a kill leaves it) resumes to
    the uninterrupted run's final parameters bit for bit and to the same final metrics."""
    import shutil

    from cfka_jax.models import from_pretrained
    from cfka_jax.runs.folder import RunFolder

    world, _ = world
    runs = {}
    for name in ("whole", "cut"):
        out = tmp_path / name
        argv = ["--data", str(world / "corpus"), "--model", str(world / "model"), "--out", str(out), "--preset",
                "smoke", "--steps", "4", "--ckpt-every", "2", "--heldout", "0.2", "--no-progress"]
        assert cc.main(argv) == 0
        final = json.loads((out / "final.json").read_text())
        assert final["memory"] == {"remat": True, "scan_layers": True, "loss_chunk": 256, "guard": "gradient"}
        if name == "cut":
            steps = sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
            assert steps[-1] == 4 and 2 in steps
            shutil.rmtree(out / "checkpoints" / "4")
            (out / "final.json").unlink()
            assert cc.main(argv) == 0  # resumes from step 2
        _, init, _ = nnx.split(from_pretrained(str(world / "model"), scan_layers=True), nnx.Param, ...)
        runs[name] = (json.loads((out / "final.json").read_text()), RunFolder(out).checkpoint_params(init)[0])
    time_free = lambda f: {k: v for k, v in f.items() if "time" not in k}  # noqa: E731
    assert time_free(runs["cut"][0]) == time_free(runs["whole"][0])
    for a, b in zip(jax.tree.leaves(runs["whole"][1]), jax.tree.leaves(runs["cut"][1]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
