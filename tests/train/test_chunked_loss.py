"""The chunked next-token NLL (train/losses.chunked_masked_mean_nll, train/step.chunked_token_nll_loss): the same
loss and gradients as the full-logits NLL, and a train step whose temporaries no longer hold B x S x V buffers."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from cfka_jax.models import family
from cfka_jax.models.family import ModelSize
from cfka_jax.train.losses import chunked_masked_mean_nll, masked_mean_nll
from cfka_jax.train.step import Loss, Placement, chunked_token_nll_loss, init_state, lm_loss, make_train_step
from tests.helpers import batch, split, tiny_model
from tests.tolerances import F32


@pytest.mark.parametrize("chunk", [1, 7, 30, 10_000])
def test_value_and_gradients_equal_the_full_logits_nll(chunk):
    rng = np.random.default_rng(0)
    b, s, d, v = 3, 11, 5, 13
    h = jnp.asarray(rng.normal(size=(b, s, d)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(d, v)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, v, size=(b, s)), jnp.int32)
    mask = jnp.asarray(rng.integers(0, 2, size=(b, s)), jnp.float32)

    def full(h, w):
        return masked_mean_nll(h @ w, tokens, mask)[0]

    def chunked(h, w):
        return chunked_masked_mean_nll(h, lambda x: x @ w, tokens, mask, chunk)[0]

    want, want_g = jax.value_and_grad(full, argnums=(0, 1))(h, w)
    got, got_g = jax.value_and_grad(chunked, argnums=(0, 1))(h, w)
    np.testing.assert_allclose(got, want, rtol=F32.exact_rtol)
    for g, e in zip(got_g, want_g):
        np.testing.assert_allclose(g, e, rtol=F32.exact_rtol, atol=F32.op_atol)
    assert float(chunked_masked_mean_nll(h, lambda x: x @ w, tokens, mask, chunk)[1]) == float(mask[:, 1:].sum())


@pytest.mark.parametrize("arch", ["qwen", "pythia"])  # tied head (embedding.attend) and untied head (a Linear)
def test_train_step_with_the_chunked_loss_matches_the_default(arch):
    fam = family.get(arch)
    model = fam.build(fam.from_size(ModelSize(32, 2, 4, 2, 24), vocab_size=37, max_position_embeddings=64), 0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    data = batch(1)
    loss = chunked_token_nll_loss(4)
    np.testing.assert_allclose(lm_loss(params, graphdef, rest, data, loss)[0], lm_loss(params, graphdef, rest, data)[0],
                               rtol=F32.exact_rtol)
    tx = optax.sgd(0.1)
    out = []
    for loss_fn in (chunked_token_nll_loss(4), None):
        step = make_train_step(graphdef, rest, tx, loss=Loss(loss_fn=loss_fn) if loss_fn else Loss(),
                               placement=Placement(donate=False))
        state, metrics = step(init_state(params, tx), data)
        out.append((state, metrics))
    np.testing.assert_allclose(out[0][1]["loss"], out[1][1]["loss"], rtol=F32.exact_rtol)
    for a, e in zip(jax.tree.leaves(out[0][0].params), jax.tree.leaves(out[1][0].params)):
        np.testing.assert_allclose(a, e, rtol=F32.model_rtol, atol=F32.op_atol)


def test_the_compiled_step_holds_far_less_than_the_logits_buffers():
    """At a vocabulary-dominated shape (V = 4096, 4 x 64 tokens, D = 16) the default step's temporaries hold several
    B x S x V float32 buffers (1 MiB each); the chunked step's stay below one of them."""
    fam = family.get("qwen")
    model = fam.build(fam.from_size(ModelSize(16, 1, 2, 1, 16), vocab_size=4096, max_position_embeddings=64), 0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    rng = np.random.default_rng(0)
    data = {"tokens": jnp.asarray(rng.integers(0, 4096, size=(4, 64)), jnp.int32),
            "target_mask": jnp.ones((4, 64), jnp.float32)}
    tx = optax.sgd(0.1)
    state = init_state(params, tx)
    temp = {}
    for name, kw in (("default", {}), ("chunked", {"loss_fn": chunked_token_nll_loss(32)})):
        step = make_train_step(graphdef, rest, tx, loss=Loss(**kw), placement=Placement(donate=False))
        temp[name] = step.lower(state, data).compile().memory_analysis().temp_size_in_bytes
    logits_bytes = 4 * 64 * 4096 * 4
    assert temp["default"] > 3 * logits_bytes and temp["chunked"] < logits_bytes, temp


def test_a_bad_chunk_is_refused():
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="loss chunk"):
            chunked_token_nll_loss(bad)
