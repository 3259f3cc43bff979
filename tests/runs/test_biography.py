"""Smoke runs of the Biography PT → CPT script (experiments/biography.py) on the smoke preset."""

import json

import pytest

from cfka_jax.runs import biography as bio


@pytest.fixture(scope="module")
def pt_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bio")
    cfg = bio.PTConfig(preset="smoke", out=str(root / "pt-smoke-qwen"), cache_dir=str(root / "cache"), progress=False)
    return root, bio.main_pt(cfg)


def test_pt_writes_run_folder(pt_run):
    root, final = pt_run
    out = root / "pt-smoke-qwen"
    assert final["step"] == bio.PRESETS["smoke"].pt_steps
    for name in ("config.json", "metrics.jsonl", "final.json"):
        assert (out / name).exists(), name
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} == {"train", "eval"}
    assert 0.0 <= final["Original/sFTA"] <= 1.0 and final["Original/n"] > 0
    best = final["best[Original/hFTA]/Original/hFTA"]
    assert best == max(r["Original/hFTA"] for r in records if r["kind"] == "eval")


@pytest.mark.parametrize("method", ["naive", pytest.param("ewc", marks=pytest.mark.slow),
                                    pytest.param("replay-half", marks=pytest.mark.slow)])
def test_cpt_methods_run_from_the_pt_checkpoint(pt_run, method):
    root, _ = pt_run
    cfg = bio.CPTConfig(preset="smoke", method=method, out=str(root / f"cpt-{method}"), cache_dir=str(root / "cache"),
                        progress=False)
    final = bio.main_cpt(cfg)
    assert final["step"] == bio.PRESETS["smoke"].cpt_steps
    assert final["Continual/n"] > 0 and final["Original/n"] > 0


def test_generative_replay_cpt_builds_and_reuses_its_corpus(pt_run):
    root, _ = pt_run
    cfg = bio.CPTConfig(preset="smoke", method="stoc", alpha=0.67, out=str(root / "cpt-stoc"),
                        cache_dir=str(root / "cache"), progress=False)
    final = bio.main_cpt(cfg)
    folder = root / "replay-stoc"
    assert cfg.replay_folder == folder and (folder / "config.json").exists() and (folder / "prompts.jsonl").exists()
    stats = json.loads((folder / "stats.json").read_text())
    assert final["replay/num_sequences"] == stats["num_sequences"] > 0
    assert final["replay/num_candidates"] == 3 * stats["num_prompts"]
    lamol = bio.CPTConfig(preset="smoke", method="lamol", out=str(root / "cpt-lamol"), cache_dir=str(root / "cache"),
                          progress=False, replay_dir=str(folder))
    with pytest.raises(ValueError, match="another config"):  # a STOC corpus is not reused for LAMOL
        bio.main_cpt(lamol)


@pytest.mark.parametrize("update", ["freeze", "lora"])
def test_cpt_update_modes(pt_run, update):
    root, _ = pt_run
    cfg = bio.CPTConfig(preset="smoke", update=update, out=str(root / f"cpt-{update}"), cache_dir=str(root / "cache"),
                        progress=False)
    final = bio.main_cpt(cfg)
    assert final["step"] == bio.PRESETS["smoke"].cpt_steps


def test_shipped_presets_and_configs_parse():
    for name in bio.PRESETS:
        bio.PTConfig(preset=name)
        bio.CPTConfig(preset=name, method="replay-all", alpha=0.9, update="freeze")
    with pytest.raises(ValueError):
        bio.CPTConfig(method="replay-all", alpha=1.0)
    with pytest.raises(ValueError):
        bio.PTConfig(preset="huge")


def test_bf16_pt_smoke(tmp_path):
    cfg = bio.PTConfig(preset="smoke", out=str(tmp_path / "pt-bf16"), cache_dir=str(tmp_path / "cache"),
                       progress=False, dtype="bfloat16")
    final = bio.main_pt(cfg)
    assert final["step"] == bio.PRESETS["smoke"].pt_steps and 0.0 <= final["Original/sFTA"] <= 1.0
