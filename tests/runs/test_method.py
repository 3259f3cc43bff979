"""The one method registry (runs/method.py) and the hooks it resolves to (continual/components.py, called by
runs/methods.py): names compose, every recipe refuses what it cannot run (derived from the hooks it calls), the CKL
table's names resolve, and the EWC / RHO-1 hooks compute what their formulas say on a tiny model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.continual.ewc import ewc_penalty
from cfka_jax.experiments.taalm import LAMA_METHODS, TWIKI_METHODS
from cfka_jax.runs import methods
from cfka_jax.runs.method import COMPONENTS, MethodOptions, recipe_components, resolve
from cfka_jax.runs.specs import METHODS, CPTSpec
from cfka_jax.train.losses import next_token_nll
from cfka_jax.train.step import make_eval_logits, token_nll_loss
from tests.helpers import batch, split, tiny_model
from tests.tolerances import F32


def test_names_resolve_to_one_value_per_hook():
    m = resolve("stoc + ewc", "biography")
    assert (m.replay, m.penalty, m.token_loss, m.optimizer, m.mixes) == ("stoc", "ewc", "nll", "adamw", True)
    assert m.hooks.filled() == ("documents", "penalty") and m.needs == {"generative_replay:stoc", "old_batches"}
    f = resolve("Finetune", "corpus")  # an alias, no hook
    assert [c.name for c in f.components] == ["naive"] and f.hooks.filled() == ()
    assert resolve("rho1", "corpus", MethodOptions(rho_k=0.3)).options.rho_k == 0.3
    assert resolve("replay-half", "biography").needs == {"real_replay:half"}
    assert set(METHODS) == set(recipe_components("biography")) and "rho1" in METHODS and "lamol" in METHODS
    assert set(recipe_components("corpus")) == {"naive", "ewc", "stoc", "random", "lamol", "rho1", "recadam",
                                                "lwf", "gpm", "nullspace"}
    assert set(recipe_components("knowedit")) == {"naive", "ewc", "stoc", "random", "lamol", "rho1", "recadam",
                                                  "lwf"}


@pytest.mark.parametrize("name, recipe, match", [
    ("stoc + replay-all", "biography", "both set the documents hook"),
    ("rho1 + taalm", "ckl", "both set the token_objective hook"),
    ("rho1 + lwf", "biography", "both set the token_objective hook"),
    ("gpm + nullspace", "stream", "both set the transform hook"),
    ("kadapter", "biography", "fills the update hook, which the biography recipe does not call"),
    ("oracle", "temporalwiki", "needs object_mask, which the temporalwiki recipe's context does not provide"),
    ("lwf(T=0)", "biography", "temperature T must be a finite number > 0"),
    ("lwf(T=2 depth=3)", "biography", "lwf options are T and weight"),
    ("lwf(T)", "biography", "options must read key=value"),
    ("nullspace(tol=1)", "stream", "tol"),
    ("ewc(lam=1)", "biography", "takes no options"),
    ("ewcc", "corpus", "unknown method component 'ewcc'"),
    ("kadapter", "corpus", "not available in the corpus recipe"),
    ("ewc", "ckl", "not available in the ckl recipe"),
    ("replay-all", "knowedit", "not available in the knowedit recipe"),
    ("naive", "cooking", "unknown recipe"),
    ("", "corpus", "non-empty"),
])
def test_bad_names_and_unavailable_methods_are_refused(name, recipe, match):
    with pytest.raises(ValueError, match=match):
        resolve(name, recipe)


def test_every_component_runs_somewhere():
    recipes = ("biography", "corpus", "knowedit", "ckl", "temporalwiki", "stream")
    assert all(any(k in recipe_components(r) for r in recipes) for k in COMPONENTS)


def test_component_options_in_the_name():
    m = resolve("stoc + lwf(T=3 weight=0.5)", "stream")
    assert [c.name for c in m.components] == ["stoc", "lwf"] and m.hooks.filled() == ("documents", "token_objective")
    assert resolve("lwf(T=3, weight=0.5)", "biography").components[0].name == "lwf"  # commas and ; separate too
    assert resolve("gpm(threshold=0.99)", "stream").state == "gpm"
    assert resolve("nullspace(tol=1e-3)", "corpus").state == "nullspace"


@pytest.mark.parametrize("name", sorted(set(LAMA_METHODS) | set(TWIKI_METHODS) | {"Uniform", "RHO-1 + Mix-review"}))
def test_ckl_names_resolve_in_the_ckl_recipe_only_where_it_runs_them(name):
    m = resolve(name, "ckl")
    assert m.penalty is None and m.replay in (None, "mix-review") and m.update in (None, "kadapter")
    if m.token_loss in ("nll", "rho1") and m.update is None and m.replay is None:
        resolve(name, "corpus")  # Finetune, RHO-1, RecAdam: the train_lm recipes run them too
    else:
        with pytest.raises(ValueError, match="not available in the corpus recipe"):
            resolve(name, "corpus")


def test_options_are_validated():
    for kw in ({"ewc_lambda": -1.0}, {"ewc_lambda": float("nan")}, {"ewc_fisher": "diag"}, {"ewc_batches": 0},
               {"rho_k": 0.0}, {"rho_k": 1.5}, {"rho_mode": "top"}):
        with pytest.raises(ValueError):
            MethodOptions(**kw)


def test_biography_spec_resolves_its_method():
    spec = CPTSpec(method="stoc + ewc", ewc_lambda=5.0, out="runs/x/cpt")
    assert spec.uses_alpha and spec.resolved.options.ewc_lambda == 5.0
    assert spec.replay_folder.name == "replay-stoc"  # the corpus is the replay kind's, shared with plain stoc
    assert not CPTSpec(method="rho1").uses_alpha
    with pytest.raises(ValueError, match="choose one"):
        CPTSpec(method="rho1", energy_tau=2.5)
    with pytest.raises(ValueError, match="not available in the biography recipe"):
        CPTSpec(method="K-Adapter")


def test_rho1_hook_adds_theta0_nll_and_keeps_all_tokens_at_k1():
    """k = 1 keeps every target: the RHO-1 loss is the mean NLL; θ0's ref_nll is the model's own NLL, so the
    excess loss of the starting point is zero everywhere."""
    model, b = tiny_model(2), batch(4)
    hooks = methods.train_hooks(resolve("rho1", "corpus", MethodOptions(rho_k=1.0)), model, lambda t: b)
    bt = hooks.batch_at(0)
    logits = make_eval_logits(*split(model)[::2])(split(model)[1], b)
    want, count = token_nll_loss(logits, b)
    got, got_count = hooks.loss_fn(logits, bt)
    np.testing.assert_allclose(got, want, rtol=F32.exact_rtol)
    assert float(got_count) == float(count)
    np.testing.assert_allclose(bt["ref_nll"][:, 1:], next_token_nll(logits, b["tokens"]), atol=F32.op_atol)
    assert np.all(np.asarray(bt["ref_nll"][:, 0]) == 0.0)
    half = methods.train_hooks(resolve("rho1", "corpus", MethodOptions(rho_k=0.5)), model, lambda t: b)
    assert float(half.loss_fn(logits, half.batch_at(0))[0]) != pytest.approx(float(want))  # k < 1 selects


def test_ewc_hook_is_anchored_at_the_base_model_and_follows_lora():
    model = tiny_model(3)
    stream = lambda t: batch(5 + t)  # noqa: E731
    hooks = methods.train_hooks(resolve("ewc", "knowedit", MethodOptions(ewc_lambda=2.0, ewc_batches=2)), model,
                                stream)
    assert hooks.loss_fn is token_nll_loss and hooks.batch_at is stream
    _, params, _ = split(model)
    penalty = jax.jit(hooks.penalty)
    assert float(penalty(params, hooks.penalty_args)) == 0.0
    moved = jax.tree.map(lambda p: p + 0.1, params)
    fisher = hooks.penalty_args.fisher
    want = 0.5 * 2.0 * sum(float(jnp.sum(f * 0.01)) for f in jax.tree.leaves(fisher))
    np.testing.assert_allclose(float(jax.jit(ewc_penalty)(moved, hooks.penalty_args)), want, rtol=F32.sum_rtol)
    assert want > 0.0
    lora_model, _ = methods.apply_update(model, "lora", freeze_layers=0, lora_rank=2, seed=0)
    wrapped = methods.with_update(hooks, lora_model, "lora")
    assert wrapped.penalty is not hooks.penalty and methods.with_update(hooks, model, "full") is hooks
    _, lora_params, _ = nnx.split(lora_model, nnx.Param, ...)
    assert float(jax.jit(wrapped.penalty)(lora_params, hooks.penalty_args)) == 0.0  # B = 0: effective = θ*


def test_stream_names_are_the_registry_stream_recipe():
    from cfka_jax.runs.replay import GENERATIVE
    from cfka_jax.runs.stream import STREAM_METHODS

    assert {"naive", "replay", "ewc", "gpm", *GENERATIVE} <= set(STREAM_METHODS)  # the names streams ran before
    assert {"lwf", "nullspace", "rho1", "recadam"} <= set(STREAM_METHODS)  # derived from the hooks a stage calls
    assert resolve("replay", "stream").mixes and resolve("gpm", "stream").state == "gpm"
    assert resolve("stoc + ewc", "stream").hooks.filled() == ("documents", "penalty")
    for name, recipe in (("kadapter", "stream"), ("replay", "biography"), ("gpm", "knowedit")):
        with pytest.raises(ValueError, match=f"not available in the {recipe} recipe"):
            resolve(name, recipe)
