"""The vocabulary-tiled head NLL (train/losses.head_nll_sum, the loss ``--loss-chunk`` trains with when the head is
one plain matrix): its value and every gradient equal the full-logits NLL's, for both weight layouts, any row chunk
and vocabulary tile (a clamped partial last tile included); inputs that are not differentiated get no products;
the compiled step holds no copy of the head's weight; bad settings are refused."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from cfka_jax.continual import peft
from cfka_jax.models import family
from cfka_jax.models.family import ModelSize
from cfka_jax.train.losses import head_nll_sum, masked_mean_nll, tiled_masked_mean_nll
from cfka_jax.train.step import (Loss, Update, cast_on_use, chunked_token_nll_loss, compute_params, init_state, lm_loss,
                                 make_train_step, master_params)
from tests.helpers import batch
from tests.tolerances import BF16, F32


def _data(seed=0, n=29, d=7, v=53):
    rng = np.random.default_rng(seed)
    h = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    w_vd = jnp.asarray(rng.normal(size=(v, d)) * 0.7, jnp.float32)
    y = jnp.asarray(rng.integers(0, v, size=n), jnp.int32)
    wt = jnp.asarray(rng.integers(0, 2, size=n) * rng.uniform(0.5, 2.0, size=n), jnp.float32)
    return h, w_vd, y, wt


def _reference(h, w_vd, y, wt):
    z = h @ w_vd.T
    return jnp.sum(wt * (jax.nn.logsumexp(z, axis=1) - jnp.take_along_axis(z, y[:, None], axis=1)[:, 0]))


@pytest.mark.parametrize("layout", ["VD", "DV"])
@pytest.mark.parametrize("rows,tile", [(1, 53), (8, 17), (29, 10), (100, 7), (4, 1000)])
def test_value_and_gradients_equal_the_full_logits_sum(layout, rows, tile):
    h, w_vd, y, wt = _data()
    w = w_vd if layout == "VD" else w_vd.T

    def tiled(h, w, wt):
        return head_nll_sum(h, w, y, wt, layout=layout, compute_dtype=jnp.float32, row_chunk=rows, vocab_tile=tile)

    want, (gh, gw, gwt) = jax.value_and_grad(_reference, argnums=(0, 1, 3))(h, w_vd, y, wt)
    got, (th, tw, twt) = jax.jit(jax.value_and_grad(tiled, argnums=(0, 1, 2)))(h, w, wt)
    np.testing.assert_allclose(got, want, rtol=F32.exact_rtol)
    np.testing.assert_allclose(th, gh, rtol=F32.exact_rtol, atol=F32.op_atol)
    np.testing.assert_allclose(tw if layout == "VD" else tw.T, gw, rtol=F32.exact_rtol, atol=F32.op_atol)
    np.testing.assert_allclose(twt, gwt, rtol=F32.exact_rtol, atol=F32.op_atol)


def test_an_undifferentiated_weight_gets_no_gradient_products():
    """A frozen head (LoRA, freeze): the backward pass computes ∂h only; the weight's product is not in the
    program at all (its [V, D] accumulator would be the largest buffer)."""
    h, w_vd, y, wt = _data(v=4099, d=64)

    def loss_h(h):
        return head_nll_sum(h, w_vd, y, wt, layout="VD", compute_dtype=jnp.float32, row_chunk=8, vocab_tile=512)

    np.testing.assert_allclose(jax.grad(loss_h)(h), jax.grad(_reference)(h, w_vd, y, wt), rtol=F32.exact_rtol,
                               atol=F32.op_atol)
    temp = jax.jit(jax.grad(loss_h)).lower(h).compile().memory_analysis().temp_size_in_bytes
    assert temp < w_vd.size * 4 / 4, temp


def test_bfloat16_compute_rounds_the_weight_tiles_and_accumulates_in_float32():
    h, w_vd, y, wt = _data()
    got = head_nll_sum(h, w_vd, y, wt, layout="VD", compute_dtype=jnp.bfloat16, row_chunk=8, vocab_tile=16)
    rounded = _reference(h.astype(jnp.bfloat16).astype(jnp.float32), w_vd.astype(jnp.bfloat16).astype(jnp.float32),
                         y, wt)
    np.testing.assert_allclose(got, rounded, rtol=F32.exact_rtol)
    assert abs(float(got) - float(_reference(h, w_vd, y, wt))) < BF16.model_atol * float(jnp.sum(wt))


@pytest.mark.parametrize("arch", ["qwen", "pythia"])  # tied head (VD) and untied Linear head (DV)
def test_the_model_loss_and_gradients_equal_the_full_logits_loss(arch):
    fam = family.get(arch)
    model = fam.build(fam.from_size(ModelSize(32, 2, 4, 2, 24), vocab_size=37, max_position_embeddings=64), 0)
    assert model.head_view().weight is not None
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    data = batch(1)
    loss = chunked_token_nll_loss(5, vocab_tile=11)

    def grads(fn):
        return jax.jit(jax.value_and_grad(lambda p: lm_loss(p, graphdef, rest, data, *fn)[0]))(params)

    (want, gw), (got, gg) = grads(()), grads((loss,))
    np.testing.assert_allclose(got, want, rtol=F32.exact_rtol)
    for a, e in zip(jax.tree.leaves(gg), jax.tree.leaves(gw)):
        np.testing.assert_allclose(a, e, rtol=F32.model_rtol, atol=F32.op_atol)


def test_an_adapted_head_falls_back_to_calling_the_head():
    """A LoRA-wrapped untied head is no plain matrix: its view has no weight and the loss calls the head."""
    fam = family.get("pythia")
    model = fam.build(fam.from_size(ModelSize(32, 2, 4, 2, 24), vocab_size=37, max_position_embeddings=64), 0)
    model = peft.apply_lora(model, peft.LoRAConfig(rank=2, alpha=4.0, dropout=0.0, target_modules=("embed_out",)),
                            rngs=nnx.Rngs(1))
    view = model.head_view()
    assert view.weight is None and "embed_out" not in model.cast_on_use()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    data = batch(2)
    np.testing.assert_allclose(lm_loss(params, graphdef, rest, data, chunked_token_nll_loss(4))[0],
                               lm_loss(params, graphdef, rest, data)[0], rtol=F32.exact_rtol)


def test_cast_on_use_gives_the_numbers_of_casting_everything_up_front():
    """A bf16 model trained from float32 masters: leaving the blocks, the embedding (gathered, then cast) and a
    plain head as masters gives bit for bit the loss and every gradient of casting each leaf first, except the
    tied embedding's, whose two parts (lookup and head) are now summed in float32 rather than bf16."""
    fam = family.get("qwen")
    cfg = fam.from_size(ModelSize(32, 2, 4, 2, 24), vocab_size=37, max_position_embeddings=64)
    model = fam.build(dataclasses.replace(cfg, dtype=jnp.bfloat16), 0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    masters = master_params(params)
    keep = cast_on_use(graphdef, masters, rest)
    assert set(keep) == {"layers", "embed_tokens"}
    data = batch(3)

    def loss(p, keep):
        return lm_loss(compute_params(p, jnp.bfloat16, keep), graphdef, rest, data)[0]

    (want, g_up), (got, g_use) = (jax.jit(jax.value_and_grad(lambda p, k=k: loss(p, k)))(masters) for k in ((), keep))
    np.testing.assert_array_equal(got, want)
    flat_up, flat_use = nnx.to_flat_state(g_up), nnx.to_flat_state(g_use)
    assert [p for p, _ in flat_use] == [p for p, _ in flat_up]
    for (path, a), (_, e) in zip(flat_use, flat_up):
        if path[0] == "embed_tokens":
            np.testing.assert_allclose(a[...], e[...], rtol=0, atol=BF16.model_atol * float(np.max(np.abs(e[...]))))
        else:
            np.testing.assert_array_equal(a[...], e[...])


def test_the_lookup_equals_the_embedding_module(key):
    fam = family.get("qwen")
    model = fam.build(fam.from_size(ModelSize(32, 2, 4, 2, 24), vocab_size=37, max_position_embeddings=64), 0)
    tokens = jax.random.randint(key, (3, 9), 0, 37)
    np.testing.assert_array_equal(model._lookup(tokens), model._embed()(tokens))


def test_the_compiled_step_holds_no_copy_of_the_head():
    """Tied head, V = 8192, D = 32, bf16 compute from float32 masters: the step's temporaries hold the float32
    gradient and less than one more [V, D] float32 buffer (before: the bf16 cast of the table, its float32 upcast
    and per-chunk float32 gradients, ≥ 3 such buffers)."""
    fam = family.get("qwen")
    cfg = fam.from_size(ModelSize(32, 1, 2, 1, 16), vocab_size=8192, max_position_embeddings=64)
    model = fam.build(dataclasses.replace(cfg, dtype=jnp.bfloat16), 0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = master_params(params)
    rng = np.random.default_rng(0)
    data = {"tokens": jnp.asarray(rng.integers(0, 8192, size=(2, 64)), jnp.int32),
            "target_mask": jnp.ones((2, 64), jnp.float32)}
    tx = optax.sgd(0.1)
    step = make_train_step(graphdef, rest, tx, update=Update(guard="gradient"),
                           loss=Loss(loss_fn=chunked_token_nll_loss(32, vocab_tile=1024), compute_dtype=jnp.bfloat16))
    temp = step.lower(init_state(params, tx), data).compile().memory_analysis().temp_size_in_bytes
    table = 8192 * 32 * 4
    grads = sum(x.size * 4 for x in jax.tree.leaves(params))
    assert temp < grads + table, (temp, grads, table)


def test_tiled_mean_counts_targets():
    h, w_vd, y, wt = _data()
    mask = jnp.ones((1, 30), jnp.float32)
    final = h.reshape(1, 29, 7)
    final = jnp.concatenate([final, final[:, :1]], axis=1)
    tokens = jnp.concatenate([jnp.zeros((1, 1), jnp.int32), y[None]], axis=1)
    mean, count = tiled_masked_mean_nll(final, w_vd, tokens, mask, layout="VD", compute_dtype=jnp.float32,
                                        row_chunk=8, vocab_tile=16)
    want, want_count = masked_mean_nll(final @ w_vd.T, tokens, mask)
    assert float(count) == float(want_count) == 29.0
    np.testing.assert_allclose(mean, want, rtol=F32.exact_rtol)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_settings_are_refused(bad):
    h, w_vd, y, wt = _data()
    with pytest.raises(ValueError, match="vocab_tile"):
        head_nll_sum(h, w_vd, y, wt, layout="VD", compute_dtype=jnp.float32, row_chunk=4, vocab_tile=bad)
    with pytest.raises(ValueError, match="vocab tile"):
        chunked_token_nll_loss(4, vocab_tile=bad)
    with pytest.raises(ValueError, match="layout"):
        head_nll_sum(h, w_vd, y, wt, layout="VV", compute_dtype=jnp.float32, row_chunk=4, vocab_tile=8)
