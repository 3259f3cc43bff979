"""experiments/taalm_phi_size.py: a φ whose base has another size than θ0 (same tokenizer) builds, meta-trains
against θ0 and weights θ0's batches; another tokenizer is refused; finished runs are skipped; the record's rows."""

import dataclasses
import json
import tempfile

import numpy as np
import pytest
from cfka_jax.experiments import taalm, taalm_phi_size
from cfka_jax.experiments import taalm_stages as stages
from flax import nnx

from cfka_jax.claims.results import load_records
from cfka_jax.continual.ckl_setup import PTConfig, build_lm
from cfka_jax.data.ckl_encode import encode
from cfka_jax.data.ckl_world import build_synthetic_world
from cfka_jax.data.lama_ckl import select_ckl
from cfka_jax.data.tokenize import train_word_tokenizer
from cfka_jax.models.family import ModelSize
from cfka_jax.provenance import tokenizer_fingerprint
from cfka_jax.train.throughput import param_count

SMALL = taalm.preset("small").model


def test_a_base_keeps_theta0s_head_width_and_mlp_ratio():
    assert taalm_phi_size.phi_size(SMALL, 32) == ModelSize(hidden=32, layers=3, heads=2, kv_heads=1, intermediate=96)
    assert taalm_phi_size.phi_size(SMALL, 16, 1) == ModelSize(hidden=16, layers=1, heads=1, kv_heads=1,
                                                              intermediate=48)
    assert taalm_phi_size.phi_size(SMALL, 48).heads % taalm_phi_size.phi_size(SMALL, 48).kv_heads == 0
    with pytest.raises(ValueError, match="--phi-widths: 40 is not a positive multiple of θ0's head width 16"):
        taalm_phi_size.phi_size(SMALL, 40)
    cfg = taalm_phi_size.Config(preset="small", phi_widths=(32, 64), phi_layers=(2, 3), seeds=(0,))
    assert list(cfg.bases()) == ["d32-l2", "d32", "d64-l2"]  # θ0's own size (d64, 3 layers) is the 'same' row
    with pytest.raises(ValueError, match="every size is θ0's own"):
        taalm_phi_size.Config(preset="small", phi_widths=(64,), seeds=(0,))
    with pytest.raises(ValueError, match="none reads φ's weights"):
        taalm_phi_size.Config(preset="small", methods=("Finetune",), seeds=(0,))


@pytest.fixture(scope="module")
def smoke():
    """The smoke world, its word-level tokenizer, an untrained θ0 and sets chosen on zero scores (≈ 5 s)."""
    cfg = taalm.preset("smoke")
    world = build_synthetic_world(cfg.data)
    with tempfile.TemporaryDirectory() as tmp:
        tok = train_word_tokenizer(world.tokenizer_texts(), tmp)
    model = build_lm(cfg.model, len(tok), seed=cfg.pt.seed)
    zero = {"descriptive": 0.0, "schematic": 0.0}
    sets = select_ckl(world, {r.uuid: zero for r in world.all_records()}, strict=False)
    return cfg, world, tok, model, sets


def test_a_narrower_phi_meta_trains_against_theta0_and_weights_its_batches(smoke, tmp_path):
    """≈ 55 s on the loaded 2 cores: one PT step and one meta-step (their compiles), no validation."""
    cfg, world, tok, model, sets = smoke
    cfg = dataclasses.replace(cfg, progress=False, metatrain=dataclasses.replace(cfg.metatrain, max_steps=1,
                                                                                  val_size=0))
    size = taalm_phi_size.phi_size(cfg.model, 16)
    base = taalm_phi_size.phi_base(tmp_path, size, PTConfig(epochs=1, batch_size=2, seq_len=64), tok,
                                   world.pt_texts[:8], world=cfg.data)
    assert base.model.cfg.hidden_size == 16 != model.cfg.hidden_size
    assert base.info["params"] < param_count(nnx.state(model, nnx.Param))
    assert np.isfinite(base.info["pt_loss"])
    phi, handle = stages.phi_stage(tmp_path, cfg, model, tok, sets, body=base.model, body_made_from=base.made_from)
    assert phi.body.cfg.hidden_size == 16 and phi.score.kernel[...].shape == (16, 1)
    saved = json.loads((tmp_path / "phi" / "phi.json").read_text())
    assert saved["body"]["hidden_size"] == 16 and "phi_body" in saved["made_from"]
    enc = encode(tok, [r.evidence for r in sets.to_learn], [r.object for r in sets.to_learn])  # θ0's batches
    ws = handle.docs(enc)
    assert [w.shape for w in ws] == [ids.shape for ids in enc.ids]
    assert all(((w > 0) & (w < 1)).all() for w in ws)
    # resumed: the saved φ is read back, the same weights
    _, again = stages.phi_stage(tmp_path, cfg, model, tok, sets, body=base.model, body_made_from=base.made_from)
    np.testing.assert_allclose(np.concatenate(again.docs(enc)), np.concatenate(ws), rtol=1e-6)


def test_a_base_over_another_tokenizer_is_refused(smoke, tmp_path):
    cfg, world, tok, model, sets = smoke
    other = train_word_tokenizer(["completely different words here", *world.pt_texts[:5]], tmp_path / "other")
    assert tokenizer_fingerprint(other) != tokenizer_fingerprint(tok)
    size = taalm_phi_size.phi_size(cfg.model, 16)
    pt = PTConfig(epochs=1, batch_size=2, seq_len=64)
    folder = tmp_path / "d16"
    taalm_phi_size.phi_base(folder, size, pt, other, world.pt_texts[:8], world=cfg.data)
    with pytest.raises(ValueError, match=r"--out .*d16 was made from something else: tokenizer sha256:"):
        taalm_phi_size.phi_base(folder, size, pt, tok, world.pt_texts[:8], world=cfg.data)
    # φ's meta-training refuses a base whose recorded tokenizer, or vocabulary, is not θ0's, before any step
    body = build_lm(size, len(other))
    made = {"tokenizer": tokenizer_fingerprint(other)}
    with pytest.raises(ValueError, match="φ's base .* made from something else: tokenizer"):
        stages.phi_stage(tmp_path, cfg, model, tok, sets, body=body, body_made_from=made)
    with pytest.raises(ValueError, match="token ids, θ0 .* must share a tokenizer"):
        stages.phi_stage(tmp_path, cfg, model, tok, sets, body=body,
                         body_made_from={"tokenizer": tokenizer_fingerprint(tok)})
    assert not (tmp_path / "phi").exists()


def _run(seed, phi, method, top):
    summary = {"top_acc": top, "epoch": 3, "nf_acc": 0.5, "total_knowledge": top + 0.5}
    return {"seed": seed, "phi": phi, "method": method, "summary": summary, "wall_s": 2.0, "lr": 3e-3, "epochs": 30,
            "n_to_learn": 45, "n_not_to_forget": 50, "history": []}


def _finished(cfg, seeds):
    """Hand-made result files of every run of ``seeds`` and each base's ``base.json`` (no training)."""
    out = cfg.out_dir()
    for seed in seeds:
        runs = [(None, "Finetune", 0.1), ("same", "TAALM", 0.3), ("d32", "TAALM", 0.2 + 0.01 * seed)]
        for phi, method, top in runs:
            path = taalm_phi_size.run_path(out, seed, phi, method)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_run(seed, phi, method, top)))
        for phi, params in (("same", 270000), ("d32", 90000)):
            (out / f"s{seed}" / phi / "base.json").write_text(json.dumps({
                "made_from": {"tokenizer": "sha256:x"}, "size": {"hidden": 32 if phi == "d32" else 64, "layers": 3},
                "params": params, "pt_loss": 0.4}))
    return out


def test_finished_runs_are_skipped_and_the_record_holds_the_rows(tmp_path, monkeypatch):
    cfg = taalm_phi_size.Config(preset="small", seeds=(0, 1), base_dirs=str(tmp_path / "absent-{seed}"),
                                out=str(tmp_path / "study"), results=str(tmp_path / "results"))
    out = _finished(cfg, (0, 1))
    monkeypatch.setattr(taalm, "prepare", lambda *a, **k: pytest.fail("a finished seed was prepared again"))
    assert taalm_phi_size.command(cfg) == 0  # every run of both seeds resumed: nothing is built or trained
    assert not (tmp_path / "results").exists()  # nothing ran, so the record is not rewritten
    path = taalm_phi_size.write_phi_size_record(cfg, out)
    rec = load_records(tmp_path / "results")["taalm/phi_size_small"]
    assert path.exists() and rec.unit == "run" and rec.provenance["seeds"] == [0, 1]
    assert [(r["seed"], r["phi"], r["method"]) for r in rec.rows] == [
        (s, phi, m) for s in (0, 1) for phi, m in ((None, "Finetune"), ("same", "TAALM"), ("d32", "TAALM"))]
    assert rec.values("top_acc", phi="d32") == [0.2, 0.21] and rec.rows[0]["total"] == 0.6
    assert rec.provenance["phi_bases"]["s1"]["d32"]["params"] == 90000
    assert rec.provenance["phi_bases"]["s0"]["same"]["pt_loss"] == 0.4 and "made_from" not in \
        rec.provenance["phi_bases"]["s0"]["d32"]
    assert "--phi-widths 32 --seeds 0,1" in rec.provenance["command"] and "--phi-layers" not in \
        rec.provenance["command"]
    # a seed with a run missing is prepared again (here: refused at once)
    taalm_phi_size.run_path(out, 1, "d32", "TAALM").unlink()
    monkeypatch.setattr(taalm, "prepare", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("prepared s1")))
    with pytest.raises(RuntimeError, match="prepared s1"):
        taalm_phi_size.command(cfg)


def test_a_folder_made_with_other_settings_is_refused(tmp_path):
    cfg = taalm_phi_size.Config(preset="smoke", phi_widths=(16,), seeds=(0,), out=str(tmp_path))
    taalm_phi_size.check_folder(cfg, tmp_path)
    taalm_phi_size.check_folder(dataclasses.replace(cfg, seeds=(0, 1)), tmp_path)  # seeds may grow
    with pytest.raises(ValueError, match="pt_epochs differ"):
        taalm_phi_size.check_folder(dataclasses.replace(cfg, pt_epochs=3), tmp_path)


@pytest.mark.slow  # ≈ 2–3 min on the loaded 2 cores: the smoke θ0 and φ, a d16 base's PT and φ, 3 LAMA-CKL runs
def test_the_smoke_study_runs_resumes_and_records(tmp_path):
    argv = ["--preset", "smoke", "--phi-widths", "16", "--seeds", "0", "--base-dirs", str(tmp_path / "base-{seed}"),
            "--out", str(tmp_path / "study"), "--results", str(tmp_path / "results")]
    assert taalm_phi_size.main(argv) == 0
    rec = load_records(tmp_path / "results")["taalm/phi_size_smoke"]
    assert {(r["phi"], r["method"]) for r in rec.rows} == {(None, "Finetune"), ("same", "TAALM"), ("d16", "TAALM")}
    assert rec.provenance["phi_bases"]["s0"]["d16"]["params"] < rec.provenance["phi_bases"]["s0"]["same"]["params"]
    assert taalm_phi_size.main(argv) == 0  # every run resumed from the folder
