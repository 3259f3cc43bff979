"""Smoke runs of the Biography PT → CPT recipe (cfka_jax/runs/biography.py) on the smoke preset."""

import dataclasses
import json
import re

import pytest

from cfka_jax.runs import biography as bio
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import CPTSpec, PTSpec


@pytest.fixture(scope="module")
def pt_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bio")
    cfg = PTSpec(preset="smoke", out=str(root / "pt-smoke-qwen"), cache_dir=str(root / "cache"), progress=False)
    return root, bio.pretrain(cfg).final


def test_pt_writes_run_folder(pt_run):
    root, final = pt_run
    out = root / "pt-smoke-qwen"
    assert final["step"] == BIOGRAPHY["smoke"].pt.steps
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
    cfg = CPTSpec(preset="smoke", method=method, out=str(root / f"cpt-{method}"), cache_dir=str(root / "cache"),
                        progress=False)
    final = bio.continual(cfg).final
    assert final["step"] == BIOGRAPHY["smoke"].cpt.steps
    assert final["Continual/n"] > 0 and final["Original/n"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("method", ["replay-all + lwf(T=2 weight=0.5)", "nullspace(tol=1e-3)"])
def test_lwf_and_nullspace_run_in_biography_cpt(pt_run, method):
    """The components added as one file each run in the Biography recipe: LwF composed with replay (its token
    objective against θ0), null-space updates on the PT data's keys (their protected share recorded)."""
    root, _ = pt_run
    name = method.split("(")[0].replace(" ", "")
    cfg = CPTSpec(preset="smoke", method=method, out=str(root / f"cpt-{name}"), cache_dir=str(root / "cache"),
                  progress=False)
    final = bio.continual(cfg).final
    assert final["step"] == BIOGRAPHY["smoke"].cpt.steps and final["Continual/n"] > 0
    if cfg.resolved.state is not None:
        assert 0.0 < final["nullspace/protected_fraction"] <= 1.0


def test_generative_replay_cpt_builds_and_reuses_its_corpus(pt_run):
    root, _ = pt_run
    cfg = CPTSpec(preset="smoke", method="stoc", alpha=0.67, out=str(root / "cpt-stoc"),
                        cache_dir=str(root / "cache"), progress=False)
    final = bio.continual(cfg).final
    folder = root / "replay-stoc"
    assert cfg.replay_folder == folder and (folder / "config.json").exists() and (folder / "prompts.jsonl").exists()
    stats = json.loads((folder / "stats.json").read_text())
    assert final["replay/num_sequences"] == stats["num_sequences"] > 0
    assert final["replay/num_candidates"] == 3 * stats["num_prompts"]
    lamol = CPTSpec(preset="smoke", method="lamol", out=str(root / "cpt-lamol"), cache_dir=str(root / "cache"),
                          progress=False, replay_dir=str(folder))
    with pytest.raises(ValueError, match="another config"):  # a STOC corpus is not reused for LAMOL
        bio.continual(lamol)
    record = json.loads((folder / "config.json").read_text())  # what the corpus was sampled from (#24)
    assert set(record["made_from"]) == {"tokenizer", "world", "parent_run", "parent_step"}
    record["made_from"]["parent_step"] += 1  # as if sampled from another checkpoint of the PT run
    (folder / "config.json").write_text(json.dumps(record))
    again = dataclasses.replace(cfg, out=str(root / "cpt-stoc-again"), replay_dir=str(folder))
    with pytest.raises(ValueError, match="^" + re.escape(f"--replay-dir {folder} was made from something else: parent_step")):
        bio.continual(again)
    assert not (root / "cpt-stoc-again").exists()


@pytest.mark.parametrize("update", ["freeze", pytest.param("lora", marks=pytest.mark.slow)])  # LoRA CPT: the EWC test
def test_cpt_update_modes(pt_run, update):
    root, _ = pt_run
    cfg = CPTSpec(preset="smoke", update=update, out=str(root / f"cpt-{update}"), cache_dir=str(root / "cache"),
                        progress=False)
    final = bio.continual(cfg).final
    assert final["step"] == BIOGRAPHY["smoke"].cpt.steps


def test_shipped_presets_and_configs_parse():
    for name in BIOGRAPHY:
        PTSpec(preset=name)
        p = BIOGRAPHY[name]
        if p.freeze_layers < p.model.layers:
            CPTSpec(preset=name, method="replay-all", alpha=0.9, update="freeze")
        else:  # a 1-block world: freezing its one block leaves nothing to train
            with pytest.raises(ValueError, match="leaving none to train"):
                CPTSpec(preset=name, method="replay-all", alpha=0.9, update="freeze")
            CPTSpec(preset=name, method="replay-all", alpha=0.9, update="freeze", freeze_layers=0)
    with pytest.raises(ValueError):
        CPTSpec(method="replay-all", alpha=1.0)
    with pytest.raises(ValueError):
        PTSpec(preset="huge")


@pytest.mark.slow  # the bf16 train step is tested in tests/train/test_step.py
def test_bf16_pt_smoke(tmp_path):
    cfg = PTSpec(preset="smoke", out=str(tmp_path / "pt-bf16"), cache_dir=str(tmp_path / "cache"),
                       progress=False, dtype="bfloat16")
    final = bio.pretrain(cfg).final
    assert final["step"] == BIOGRAPHY["smoke"].pt.steps and 0.0 <= final["Original/sFTA"] <= 1.0


@pytest.mark.slow  # ~25 s; tests/runs/test_method.py checks the EWC hook under LoRA in the default run
def test_ewc_under_lora_penalises_the_effective_weights(pt_run):
    root, _ = pt_run
    spec = CPTSpec(preset="smoke", method="ewc", update="lora", ewc_lambda=1e6, out=str(root / "cpt-ewc-lora"),
                   cache_dir=str(root / "cache"), progress=False)
    result = bio.continual(spec)
    train = [r for r in result.history if r["kind"] == "train"]
    assert train[-1]["penalty"] > 0.0  # B ≠ 0 after the first steps: W + (α/r)·A·B has moved from θ*
    assert result.final["step"] == BIOGRAPHY["smoke"].cpt.steps


def test_cli_refuses_to_reuse_another_runs_folder(pt_run, capsys):
    from cfka_jax import cli

    root, _ = pt_run
    pt_dir, cache = str(root / "pt-smoke-qwen"), str(root / "cache")
    before = (root / "pt-smoke-qwen" / "config.json").read_text()
    assert cli.main(["pt", "--preset", "smoke", "--seed", "1", "--out", pt_dir, "--cache-dir", cache,
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "holds another run" in err and "run.seed: folder has 0, this run has 1" in err
    assert (root / "pt-smoke-qwen" / "config.json").read_text() == before
    naive = str(root / "cpt-naive-reuse")
    naive_spec = CPTSpec(preset="smoke", out=naive, pt_dir=pt_dir, cache_dir=cache, progress=False)
    RunFolder(naive).start(naive_spec, naive_spec.scale)  # a started naive run (what CPT writes before training)
    assert cli.main(["cpt", "--preset", "smoke", "--method", "replay-all", "--out", naive, "--pt-dir", pt_dir,
                     "--cache-dir", cache, "--no-progress"]) == 2
    assert "run.method: folder has 'naive', this run has 'replay-all'" in capsys.readouterr().err


def test_ckpt_every_overrides_the_preset_interval():
    assert PTSpec(preset="small", ckpt_every=7).scale.pt.ckpt_every == 7
    assert PTSpec(preset="small").scale.pt.ckpt_every == BIOGRAPHY["small"].pt.ckpt_every
    spec = CPTSpec(preset="small", ckpt_every=0, eval_every=5)
    assert (spec.scale.cpt.ckpt_every, spec.scale.cpt.eval_every) == (0, 5)


def test_cpt_spec_groups_map_to_and_from_the_flat_record():
    """The option groups are views of the flat fields (the command line's options and config.json's record, whose
    layout stays as it was): every field lands in one group or among the run's own fields, and ``from_groups``
    inverts the mapping."""
    from cfka_jax.runs.replay import ReplaySwitches
    from cfka_jax.runs.specs import CPTSchedule, MemoryOptions, MethodOptions, TokenObjective, UpdateMode

    spec = CPTSpec(preset="small", method="stoc + ewc", alpha=0.3, ewc_lambda=5.0, update="lora", lora_rank=3,
                   lr=1e-3, warmup=2, eval_every=4, dtype="bfloat16", accumulate=2, energy_tau=1.5,
                   replay=ReplaySwitches(minhash=False), seed=2)
    groups = {"schedule": spec.schedule, "update_mode": spec.update_mode, "memory": spec.memory,
              "method": spec.method_options, "objective": spec.objective}
    assert groups == {"schedule": CPTSchedule(lr=1e-3, warmup=2, eval_every=4),
                      "update_mode": UpdateMode("lora", lora_rank=3),
                      "memory": MemoryOptions(dtype="bfloat16", accumulate=2),
                      "method": MethodOptions("stoc + ewc", alpha=0.3, ewc_lambda=5.0,
                                              replay=ReplaySwitches(minhash=False)),
                      "objective": TokenObjective(energy_tau=1.5)}
    grouped = {f.name for g in groups.values() for f in dataclasses.fields(g)}
    own = {"preset", "out", "arch", "seed", "pt_dir", "cache_dir", "progress", "replay_dir", "bpe_vocab"}
    assert grouped | own == {f.name for f in dataclasses.fields(CPTSpec)} and not grouped & own
    rest = {k: getattr(spec, k) for k in own}
    assert CPTSpec.from_groups(**groups, **rest) == spec
    with pytest.raises(ValueError, match=r"\['lr'\] belong to the option groups"):
        CPTSpec.from_groups(lr=1e-3)


@pytest.mark.parametrize("fields, match", [
    (dict(update="some"), "update must be in"), (dict(lora_rank=2), "--lora-rank 2 applies to --update lora only"),
    (dict(lr=-1.0), "lr must be a finite number >= 0"), (dict(eval_every=-1), "eval_every must be an integer"),
    (dict(dtype="float16"), "dtype must be one of"), (dict(accumulate=0), "--accumulate must be an integer"),
    (dict(alpha=1.5), r"alpha \(the new-data fraction\) must be in \[0, 1\]"),
    (dict(method="stoc", alpha=1.0), "replay needs 0 < alpha < 1"), (dict(method="nope"), r"method \(--method\)"),
    (dict(ewc_fisher="exact"), "ewc_fisher must be"), (dict(energy_normalize="kept"), "needs energy_tau"),
    (dict(method="rho1", energy_tau=1.0), "sets the token loss"),
])
def test_cpt_spec_checks_name_the_field(fields, match):
    with pytest.raises(ValueError, match=match):
        CPTSpec(**fields)


def test_cpt_with_phi_token_weights_and_replay(pt_run):
    """TAALM's φ weights every token of the packed CPT batches (replay mixed in); the run finishes and says so."""
    from cfka_jax.continual.peft import LoRAConfig
    from cfka_jax.continual.taalm import phi as phimod
    from cfka_jax.continual.taalm.weights import save_phi
    from cfka_jax.data.pipeline import build_data
    from cfka_jax.runs.biography import build_model

    root, _ = pt_run
    p = BIOGRAPHY["smoke"]
    from cfka_jax.provenance import tokenizer_fingerprint

    tok = build_data(p.data_config(), str(root / "cache")).tokenizer
    cfg = phimod.PhiConfig(lora=LoRAConfig(rank=2, alpha=4.0, dropout=0.0))
    phi_dir = save_phi(root / "phi", phimod.build_phi(build_model(p, "qwen", len(tok), 7, "float32"), cfg), cfg,
                       step=0, made_from={"tokenizer": tokenizer_fingerprint(tok)})
    spec = CPTSpec(preset="smoke", method="replay-all", out=str(root / "cpt-taalm"), cache_dir=str(root / "cache"),
                   progress=False, token_weights=str(phi_dir))
    result = bio.continual(spec)
    assert result.final["step"] == p.cpt.steps
    assert all(r["loss"] > 0 for r in result.history if r["kind"] == "train")
    assert json.loads((root / "cpt-taalm" / "config.json").read_text())["run"]["token_weights"] == str(phi_dir)


@pytest.mark.slow  # the loss: tests/runs/test_objectives.py; the evaluator: tests/geometry/test_energy.py
def test_cpt_with_energy_masking_logs_the_masked_fraction(pt_run):
    root, _ = pt_run
    spec = CPTSpec(preset="smoke", out=str(root / "cpt-energy"), cache_dir=str(root / "cache"), progress=False,
                   energy_tau=0.999, energy_normalize="kept")
    final = bio.continual(spec).final
    assert 0.0 < final["cpt_train/masked_fraction"] < 1.0  # the smoke model is near uniform: E ≈ 1 − 1/V ± noise
    assert {"cpt_train/energy_mean", "pt_train/energy_mean", "cpt_train/band_forking"} <= set(final)
