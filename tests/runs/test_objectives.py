"""The token objective of a Biography CPT run (runs/methods.token_objective): plain NLL, φ-weighted TWPPL
(TAALM's Train-Attention weights, ``--token-weights``) and update-energy masking (``--energy-tau``)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.continual.peft import LoRAConfig
from cfka_jax.continual.taalm import phi as phimod
from cfka_jax.continual.taalm.twppl import twppl
from cfka_jax.continual.taalm.weights import save_phi
from cfka_jax.runs import methods
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.specs import CPTSpec, TokenObjective
from cfka_jax.train.step import token_nll_loss
from tests.helpers import VOCAB, batch, tiny_model
from tests.tolerances import F32


@pytest.fixture(scope="module")
def phi_dir(tmp_path_factory):
    """A φ over the tiny model's vocabulary with a random head (weights far from uniform)."""
    cfg = phimod.PhiConfig(lora=LoRAConfig(rank=2, alpha=4.0, dropout=0.0), bias_init=0.0, seed=3)
    return save_phi(tmp_path_factory.mktemp("phi") / "phi", phimod.build_phi(tiny_model(5), cfg), cfg, step=0)


def _logits(b: dict) -> jax.Array:
    return tiny_model(1)(b["tokens"]).logits


def test_plain_spec_trains_on_the_mean_nll():
    loss_fn, add = methods.token_objective(TokenObjective(), VOCAB)
    b = batch()
    assert loss_fn is token_nll_loss and add(b) is b


def test_token_weights_are_phi_on_the_targets_and_the_loss_is_twppl(phi_dir):
    loss_fn, add = methods.token_objective(TokenObjective(token_weights=str(phi_dir)), VOCAB)
    b = batch(rows=4)
    b["target_mask"] = b["target_mask"].at[1, 5:].set(0.0)
    weighted = add(b)
    w = np.asarray(weighted["token_weights"])
    assert w.shape == b["tokens"].shape and np.all(w[1, 5:] == 0.0)
    assert np.all((w[np.asarray(b["target_mask"]) > 0] > 0) & (w[np.asarray(b["target_mask"]) > 0] < 1))
    assert np.std(w[np.asarray(b["target_mask"]) > 0]) > 1e-3  # not uniform: the test can tell weights apart
    logits = _logits(b)
    loss, count = loss_fn(logits, weighted)
    want = twppl(logits, b["tokens"], weighted["token_weights"], b["target_mask"])
    np.testing.assert_allclose(loss, want, rtol=F32.exact_rtol)
    assert float(count) == float(jnp.sum(b["target_mask"][:, 1:]))
    plain, _ = token_nll_loss(logits, b)
    assert abs(float(loss) - float(plain)) > 1e-4  # the weights change the objective


def test_token_weights_of_another_vocabulary_or_folder_are_refused(phi_dir, tmp_path):
    with pytest.raises(ValueError, match="vocabulary"):
        methods.token_objective(TokenObjective(token_weights=str(phi_dir)), VOCAB + 1)
    with pytest.raises(ValueError, match=r"--token-weights .*phi\.json"):
        methods.check_token_weights(TokenObjective(token_weights=str(tmp_path)))
    methods.check_token_weights(TokenObjective(token_weights=str(phi_dir)))


@pytest.mark.parametrize("normalize", ["all", "kept"])
def test_energy_masking_above_the_energy_range_is_the_mean_nll(normalize):
    """E = ‖e_y − π‖² ≤ 2, so τ = 2.5 keeps every token through the masking path: the plain loss (float32 sums)."""
    loss_fn, add = methods.token_objective(TokenObjective(energy_tau=2.5, energy_normalize=normalize), VOCAB)
    b = batch(rows=4)
    logits = _logits(b)
    np.testing.assert_allclose(loss_fn(logits, add(b))[0], token_nll_loss(logits, b)[0], rtol=F32.exact_rtol)


def test_energy_masking_drops_high_energy_tokens():
    b = batch(rows=4)
    logits = _logits(b)
    lp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    pi = jnp.exp(lp)
    onehot = jax.nn.one_hot(b["tokens"][:, 1:], VOCAB)
    e = np.asarray(jnp.sum((onehot - pi) ** 2, axis=-1))
    nll = -np.asarray(jnp.sum(onehot * lp, axis=-1))
    tau = float(np.median(e))
    keep = e < tau
    for normalize, denom in (("all", e.size), ("kept", keep.sum())):
        loss_fn, _ = methods.token_objective(TokenObjective(energy_tau=tau, energy_normalize=normalize), VOCAB)
        loss, count = loss_fn(logits, b)
        np.testing.assert_allclose(loss, (nll * keep).sum() / denom, rtol=F32.exact_rtol)
        assert float(count) == denom


@pytest.mark.parametrize("fields, match", [
    (dict(token_weights="x", energy_tau=1.0), "choose one"),
    (dict(energy_normalize="kept"), "needs energy_tau"),
    (dict(energy_tau=0.0), "tau must be positive"),
    (dict(energy_tau=-math.inf), "tau must be positive"),
    (dict(energy_tau=1.0, energy_normalize="some"), "normalize must be one of"),
])
def test_bad_objective_fields_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        CPTSpec(**fields)


def test_a_run_made_before_the_objective_fields_still_resumes(tmp_path):
    spec = CPTSpec(out=str(tmp_path / "run"))
    folder = RunFolder(spec.out)
    folder.start(spec, spec.scale)
    stored = folder.read_json("config.json")
    for name in ("token_weights", "energy_tau", "energy_normalize"):
        del stored["run"][name]
    (folder.path / "config.json").write_text(__import__("json").dumps(stored))
    assert folder.check(spec, spec.scale)
    with pytest.raises(ValueError, match="energy_tau"):
        folder.check(dataclasses.replace(spec, energy_tau=1.0), spec.scale)
