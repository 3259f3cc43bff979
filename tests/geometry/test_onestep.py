"""Token factors, per-token gradients, scopes and the one-step change on the tiny ports (spec §3.1–§3.2).

The float64 versions of the identities (≤ 1e-10) and the η² order test are proof checks
(``proofs_check/check_geometry_readout.py``, ``check_geometry_tied.py``); here they run in float32.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry import channels, onestep
from cfka_jax.geometry.net import param_roles
from cfka_jax.geometry.resets import functionally_untied
from tests.tolerances import F32

ROWS = jnp.asarray([0, 0, 1, 2, 2], jnp.int32)
POS = jnp.asarray([2, 7, 5, 1, 8], jnp.int32)


@pytest.fixture(scope="module")
def pythia_factors(pythia, tokens):
    _, net, params = pythia
    ts = onestep.TokenSet(tokens, ROWS, POS)
    feats = onestep.jitted(onestep.token_features, net)(params, ts)
    grads = onestep.jitted(onestep.token_grads, net)(params, ts)
    return net, params, ts, feats, grads


def _normwise(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


def test_token_set_targets_and_logprobs(pythia, pythia_factors, tokens):
    model, net, params = pythia
    _, _, ts, feats, _ = pythia_factors
    np.testing.assert_array_equal(ts.targets, tokens[ROWS, POS])
    lp = jax.nn.log_softmax(model(tokens).logits, axis=-1)[ROWS, POS - 1, tokens[ROWS, POS]]
    np.testing.assert_allclose(feats.logp, lp, rtol=F32.exact_rtol, atol=F32.op_atol)
    np.testing.assert_allclose(onestep.jitted(onestep.token_logprobs, net)(params, ts), lp, rtol=F32.exact_rtol,
                               atol=F32.op_atol)
    np.testing.assert_allclose(feats.h, model(tokens).final_hidden[ROWS, POS - 1], rtol=F32.exact_rtol,
                               atol=F32.op_atol)


def test_readout_block_lemma_and_scope_partition_float32(pythia_factors):
    net, params, _, feats, grads = pythia_factors
    grams = onestep.block_grams(grads, grads)
    roles = param_roles(params, net.cfg)
    ch1 = channels.ch1(feats, feats)
    assert _normwise(onestep.scope_sum(grams, roles, "readout_only"), ch1) <= F32.exact_rtol
    emb = sum(g for p, g in grams.items() if roles[p] == "embedding")
    whole = onestep.scope_sum(grams, roles, "readout_only") + emb + onestep.scope_sum(grams, roles, "backbone")
    assert _normwise(whole, onestep.scope_sum(grams, roles, "all")) <= F32.exact_rtol
    modeled = [p for p in grams if roles[p] in onestep.SCOPE_ROLES["modeled"]]
    assert ("embed_out", "kernel") in modeled and ("embed_in", "embedding") not in modeled
    assert all(len(p) > 1 and (p[0] == "embed_out" or p[-1] == "kernel") for p in modeled)
    np.testing.assert_allclose(onestep.first_order_exact(grams, roles, "all", 1e-3),
                               1e-3 * onestep.scope_sum(grams, roles, "all"), rtol=F32.exact_rtol)
    with pytest.raises(ValueError, match="unknown scope"):
        onestep.scope_sum(grams, roles, "head")


@pytest.mark.slow
def test_tied_decomposition_recombines_into_the_shared_tensor_block(qwen, tokens):
    model, net, params = qwen
    ts = onestep.TokenSet(tokens, ROWS, POS)
    untied = functionally_untied(model)
    from cfka_jax.geometry.net import Net

    unet, uparams = Net.split(untied)
    np.testing.assert_allclose(untied(tokens).logits, model(tokens).logits, rtol=F32.exact_rtol, atol=F32.op_atol)
    terms = onestep.tied_decomposition(*(onestep.jitted(onestep.token_grads, unet)(uparams, ts),) * 2, unet.cfg)
    literal_grads = onestep.jitted(onestep.token_grads, net)(params, ts)
    literal = onestep.scope_sum(onestep.block_grams(literal_grads, literal_grads), param_roles(params, net.cfg),
                                "readout_only")
    assert _normwise(terms["literal"], literal) <= F32.exact_rtol
    feats = onestep.jitted(onestep.token_features, unet)(uparams, ts)
    assert _normwise(terms["ch1"], channels.ch1(feats, feats)) <= F32.exact_rtol
    extras = terms["tied_in_in"] + terms["tied_out_in"] + terms["tied_in_out"]
    assert float(jnp.max(jnp.abs(extras))) > 0.1 * float(jnp.max(jnp.abs(terms["ch1"])))  # never zero: pitfall 7


@pytest.mark.slow  # the actual one-step change is also a proof check (check_geometry_onestep, A rows)
def test_one_step_change_is_the_sgd_step_and_its_zero_step_floor(pythia_factors):
    net, params, ts, _, grads = pythia_factors
    change = onestep.jitted(onestep.one_step_change, net)
    out = change(params, ts, grads, 1e-3)
    assert out["delta_logp"].shape == (5, 5)
    moved = jax.tree.map(lambda p, g: p + 1e-3 * g[2], params, grads)  # the step on update token 2, by hand
    after = onestep.jitted(onestep.token_logprobs, net)(moved, ts)
    np.testing.assert_allclose(out["delta_logp"][:, 2], after - out["logp"], rtol=F32.exact_rtol,
                               atol=F32.op_atol)
    np.testing.assert_allclose(out["delta_p"], jnp.exp(out["logp"][:, None] + out["delta_logp"])
                               - jnp.exp(out["logp"])[:, None], rtol=F32.exact_rtol, atol=F32.op_atol)
    assert float(jnp.max(jnp.abs(out["noise"]))) <= F32.op_atol
    grams = onestep.block_grams(grads, grads)
    fo = onestep.first_order_exact(grams, param_roles(params, net.cfg), "all", 1e-3)
    assert np.mean(np.sign(np.asarray(fo)) == np.sign(np.asarray(out["delta_logp"]))) == 1.0
    diag = np.diag(np.asarray(out["delta_logp"]))
    assert bool(np.all(diag > 0))  # a step on log p_u raises log p_u
