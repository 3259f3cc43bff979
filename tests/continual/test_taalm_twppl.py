"""TWPPL, L_solve, target masks and known-masking; TWPPL as a ``make_train_step`` loss."""

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfka_jax.continual.taalm import twppl as tw
from cfka_jax.models.qwen import QwenConfig, QwenModel
from cfka_jax.train.step import Loss, Placement, init_state, make_train_step
from tests.tolerances import F32, F64


def _case(key, dtype=jnp.float64):
    logits = jax.random.normal(key, (2, 5, 7), dtype)
    tokens = jnp.array([[0, 3, 1, 4, 2], [0, 6, 5, 0, 0]], jnp.int32)
    att = jnp.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], jnp.int32)
    w = jax.random.uniform(jax.random.fold_in(key, 1), (2, 5), dtype)
    return logits, tokens, att, w


def _nll(logits, tokens):
    logp = np.asarray(jax.nn.log_softmax(logits, -1))
    return np.array([[-logp[b, s - 1, tokens[b, s]] for s in range(1, tokens.shape[1])] for b in range(2)])


def test_twppl_is_the_mean_over_sequences_of_the_weighted_mean(x64, key):
    logits, tokens, att, w = _case(key)
    m = tw.target_mask(att)
    nll = _nll(logits, tokens)
    wm = np.asarray(w)[:, 1:] * np.asarray(m)[:, 1:]
    expected = np.mean((wm * nll).sum(1) / (wm.sum(1) + 1e-6))
    np.testing.assert_allclose(float(tw.twppl(logits, tokens, w, m)), expected, rtol=F64.exact_rtol)
    # not a token mean over the batch: the short row counts as much as the long one
    token_mean = (wm * nll).sum() / wm.sum()
    assert abs(expected - token_mean) > 1e-3


def test_target_masks_project_and_reference():
    att = jnp.array([[1, 1, 1, 0, 0]], jnp.int32)
    np.testing.assert_array_equal(np.asarray(tw.target_mask(att)), [[0, 1, 1, 0, 0]])
    # the reference's input-position mask keeps the first pad as a target
    np.testing.assert_array_equal(np.asarray(tw.target_mask(att, reference=True)), [[0, 1, 1, 1, 0]])


def test_zero_weights_give_zero_loss_and_zero_gradient(x64, key):
    logits, tokens, att, _ = _case(key)
    m = tw.target_mask(att)
    zero = jnp.zeros((2, 5), jnp.float64)
    assert float(tw.twppl(logits, tokens, zero, m)) == 0.0
    g = jax.grad(lambda lg: tw.twppl(lg, tokens, zero, m))(logits)
    assert float(jnp.max(jnp.abs(g))) == 0.0


def test_weights_are_not_normalised_and_scale_cancels_only_up_to_eps(x64, key):
    logits, tokens, att, w = _case(key)
    m = tw.target_mask(att)
    nll = _nll(logits, tokens)
    wm = np.asarray(w)[:, 1:] * np.asarray(m)[:, 1:]
    for c in (1.0, 3.0, 1e-7):  # scaling w cancels except through the 1e-6 in the denominator
        expected = np.mean((c * wm * nll).sum(1) / (c * wm.sum(1) + 1e-6))
        np.testing.assert_allclose(float(tw.twppl(logits, tokens, c * w, m)), expected, rtol=F64.exact_rtol)
    tiny = float(tw.twppl(logits, tokens, 1e-7 * w, m))
    assert tiny < 0.5 * float(tw.twppl(logits, tokens, w, m))  # near Σw ≈ 1e-6 the loss shrinks


def test_object_nll_is_l_solve(x64, key):
    logits, tokens, att, _ = _case(key)
    y = jnp.array([[0, 0, 0, 1, 1], [0, 1, 0, 0, 0]], jnp.float64)
    nll = _nll(logits, tokens)
    expected = np.mean([(nll[0, 2] + nll[0, 3]) / (2 + 1e-6), nll[1, 0] / (1 + 1e-6)])
    np.testing.assert_allclose(float(tw.object_nll(logits, tokens, y)), expected, rtol=F64.exact_rtol)


def test_known_mask_drops_tokens_predicted_right(x64):
    tokens = jnp.array([[0, 2, 1]], jnp.int32)
    logits = jnp.zeros((1, 3, 4), jnp.float64).at[0, 0, 2].set(5.0).at[0, 1, 3].set(5.0)
    m = jnp.array([[0, 1, 1]], jnp.float64)
    np.testing.assert_array_equal(np.asarray(tw.known_mask(logits, tokens, m)), [[0, 0, 1]])


def test_twppl_loss_in_the_shared_train_step(key):
    cfg = QwenConfig(model_type="qwen2", vocab_size=13, hidden_size=8, intermediate_size=12, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    graphdef, params, rest = nnx.split(QwenModel(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)
    tokens = jax.random.randint(key, (2, 6), 0, 13)
    att = jnp.array([[1] * 6, [1, 1, 1, 1, 0, 0]], jnp.int32)
    m = tw.target_mask(att)
    batch = {"tokens": tokens, "attention_mask": att, "target_mask": m, "token_weights": jnp.ones((2, 6))}
    tx = optax.sgd(0.1)
    step = make_train_step(graphdef, rest, tx, loss=Loss(loss_fn=tw.twppl_loss), placement=Placement(donate=False))
    state, metrics = step(init_state(params, tx), batch)
    logits = jax.jit(lambda p: nnx.merge(graphdef, p, rest)(tokens, attention_mask_BT=att).logits)(params)
    np.testing.assert_allclose(float(metrics["loss"]), float(tw.twppl(logits, tokens, jnp.ones((2, 6)), m)),
                               rtol=F32.exact_rtol)
    assert float(metrics["targets"]) == 8.0 and bool(metrics["finite"])
    # zero weights: zero gradient, so SGD leaves the parameters unchanged
    state0, _ = step(init_state(params, tx), dict(batch, token_weights=jnp.zeros((2, 6))))
    for a, b in zip(jax.tree.leaves(state0.params), jax.tree.leaves(params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
