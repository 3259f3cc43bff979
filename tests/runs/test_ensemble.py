"""Seed ensembles of the Biography ports: member e trains like the lone PT run of its seed; folders round-trip."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.pipeline import build_data
from cfka_jax.runs import ensemble as re
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.engine import RunUpdate, train_lm
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.train.ensemble import member
from tests.tolerances import F32


def test_spec_validation_and_scaled_schedule():
    for bad in (dict(attention="cosine"), dict(streams="one"), dict(seeds=()), dict(seeds=(1, 1)),
                dict(seeds=(-1,)), dict(pt_steps=0), dict(mode="pmap"), dict(arch="gpt2")):
        with pytest.raises(ValueError):
            re.EnsembleSpec(**bad)
    spec = re.EnsembleSpec(preset="smoke", pt_steps=6, cpt_steps=3)
    assert spec.scale.pt.steps == 6 and spec.scale.pt.warmup == 1  # 12 steps, warm-up 2, halved
    assert spec.scale.cpt.steps == 3 and spec.scale.pt.peak_lr == BIOGRAPHY["smoke"].pt.peak_lr
    assert re.EnsembleSpec().scale == BIOGRAPHY["smoke"]
    assert re.EnsembleSpec(mode="auto").step_mode == ("map" if jax.default_backend() == "cpu" else "vmap")


def test_linear_members_start_from_the_softmax_initialisation():
    soft = re.ensemble_models(re.EnsembleSpec(seeds=(4,)), 50)[0]
    lin = re.ensemble_models(re.EnsembleSpec(seeds=(4,), attention="linear"), 50)[0]
    assert lin.cfg == dataclasses.replace(soft.cfg, attention_kind="linear")
    jax.tree.map(np.testing.assert_array_equal, nnx.state(lin, nnx.Param), nnx.state(soft, nnx.Param))


@pytest.mark.slow  # ~30 s on an idle 2-core machine: data, the ensemble and two lone runs compile
def test_members_match_lone_pt_runs_and_round_trip(tmp_path):
    spec = re.EnsembleSpec(preset="smoke", seeds=(0, 2), pt_steps=3, cpt_steps=1)
    bundle = build_data(spec.scale.data_config(), tmp_path / "data")
    pt = re.pretrain_ensemble(spec, bundle, log=lambda _: None)
    assert pt.losses.shape == (1, 2) and pt.nonfinite.tolist() == [0, 0]
    p = spec.scale
    for e, seed in enumerate(spec.seeds):  # the lone run of pretrain(): same init, batches, optimiser and loop
        batcher = EpochBatcher(bundle.splits["pt_train"].docs(), seq_len=bundle.config.seq_len,
                               eos_id=bundle.eos_id, batch_size=p.pt.batch, seed=seed)
        lone = train_lm(build_model(p, "qwen", len(bundle.tokenizer), seed), batcher,
                        update=RunUpdate(opt=p.pt.optim()), loop=p.pt.loop(progress=False),
                        folder=RunFolder(tmp_path / f"lone{seed}"))
        for x, y in zip(jax.tree.leaves(member(pt.params_E, e)), jax.tree.leaves(lone.params)):
            assert np.max(np.abs(np.asarray(x) - y)) <= F32.adam_batched_rtol * np.max(np.abs(y))
    re.save_ensemble(tmp_path / "pt", pt)
    loaded = re.load_ensemble(tmp_path / "pt", spec, bundle)
    jax.tree.map(np.testing.assert_array_equal, loaded.params_E, pt.params_E)
    np.testing.assert_array_equal(loaded.losses, pt.losses)
    with pytest.raises(ValueError, match="holds the ensemble"):
        re.load_ensemble(tmp_path / "pt", dataclasses.replace(spec, seeds=(0, 3)), bundle)
    cpt = re.continual_ensemble(spec, pt, bundle, log=lambda _: None)
    assert cpt.phase == "cpt" and cpt.steps.tolist() == [1]
    jax.tree.map(np.testing.assert_array_equal, loaded.params_E, pt.params_E)  # PT arrays survive (no donation)


@pytest.mark.slow  # ~1 min on an idle 2-core machine: two smoke ensembles of 12 steps compile
def test_a_killed_ensemble_resumes_to_the_uninterrupted_result(tmp_path):
    spec = re.EnsembleSpec(preset="smoke", seeds=(0, 1), log_every=2)
    bundle = build_data(spec.scale.data_config(), tmp_path / "data")
    whole = re.pretrain_ensemble(spec, bundle, log=lambda _: None)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(ValueError, match="no pt checkpoint"):
        re.load_checkpoint(ckpt, spec, bundle)
    graphdef, params_E, rest = re.split_members(re.ensemble_models(spec, len(bundle.tokenizer)))
    re.train_members(spec, bundle, "pt", graphdef, rest, params_E, log=lambda _: None, ckpt_dir=ckpt, ckpt_every=5,
                     made_from=re.ensemble_made_from(bundle, "pt"))  # what pretrain_ensemble records and checks
    mid = re.load_checkpoint(ckpt, spec, bundle)  # the run left its step-10 checkpoint, as a killed run would
    assert int(mid.steps[-1]) == 10 and sorted(p.name for p in ckpt.iterdir()) == ["10", "progress-10.json"]
    resumed = re.pretrain_ensemble(spec, bundle, log=lambda _: None, ckpt_dir=ckpt)
    jax.tree.map(np.testing.assert_array_equal, resumed.params_E, whole.params_E)
    np.testing.assert_array_equal(resumed.losses, whole.losses)
    np.testing.assert_array_equal(resumed.steps, whole.steps)
