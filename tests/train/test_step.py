import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.continual.ewc import ewc_anchor, ewc_penalty, fisher_batch_mean, fisher_per_example
from cfka_jax.train.optim import OptimConfig, decay_mask, lr_schedule, make_optimizer
from cfka_jax.train.step import Loss, Placement, Update, init_state, lm_loss, make_train_step
from tests.helpers import batch, split, tiny_model
from tests.tolerances import F32

CFG = OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=2, total_steps=10)


def _run(penalty=None, trainable=None, steps=3, data=None, penalty_args=None):
    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(CFG, trainable(params) if trainable else None)
    step = make_train_step(graphdef, rest, tx, loss=Loss(penalty=penalty))
    state = init_state(params, tx)
    for i in range(steps):
        state, metrics = step(state, data or batch(i), penalty_args)
    return state, metrics


def test_schedule_warmup_then_cosine_to_min():
    s = lr_schedule(CFG)
    np.testing.assert_allclose([s(0), s(1), s(2), s(10), s(50)], [0.0, 5e-3, 1e-2, 1e-3, 1e-3], rtol=F32.few_ulps)
    assert 1e-3 < float(s(6)) < 1e-2


def test_decay_mask_skips_vectors():
    graphdef, params, rest = split(tiny_model())
    mask = decay_mask(params)
    flat = jax.tree_util.tree_leaves_with_path(params)
    for (path, leaf), m in zip(flat, jax.tree.leaves(mask)):
        assert m == (leaf.ndim >= 2), path


def test_training_reduces_loss():
    graphdef, params, rest = split(tiny_model())
    b = batch(0)
    before = float(lm_loss(params, graphdef, rest, b)[0])
    state, _ = _run(steps=8, data=b)
    assert float(lm_loss(state.params, graphdef, rest, b)[0]) < before - 0.1


@pytest.mark.slow  # ~16 s; EWC at λ = 0 reducing to plain training is checked end to end by
#                     tests/experiments/test_corpus_cpt.py::test_ewc_and_rho1_run_and_reduce_to_naive
def test_ewc_lambda_zero_equals_plain_step():
    graphdef, params, rest = split(tiny_model())
    fisher = fisher_batch_mean(params, graphdef, rest, [batch(7)], total_chunks=3)
    plain, _ = _run()
    ewc0, _ = _run(penalty=ewc_penalty, penalty_args=ewc_anchor(fisher, params, 0.0))
    for a, b in zip(jax.tree.leaves(plain.params), jax.tree.leaves(ewc0.params)):
        np.testing.assert_array_equal(a, b)


def test_ewc_penalty_value_and_pull():
    graphdef, params, rest = split(tiny_model())
    fisher = jax.tree.map(lambda p: jnp.ones(p.shape, jnp.float32), params)
    moved = jax.tree.map(lambda p: p + 0.1, params)
    n = sum(p.size for p in jax.tree.leaves(params))
    np.testing.assert_allclose(ewc_penalty(moved, ewc_anchor(fisher, params, 4.0)), 0.5 * 4.0 * 0.01 * n,
                               rtol=F32.sum_rtol)


def test_fisher_forms_relate_for_single_row_batches():
    """With one example per batch, B·(mean grad)² = per-example grad², so the forms agree up to N/total."""
    graphdef, params, rest = split(tiny_model())
    batches = [batch(i, rows=1) for i in range(3)]
    fb = fisher_batch_mean(params, graphdef, rest, batches, total_chunks=3)
    fp = fisher_per_example(params, graphdef, rest, batches)
    for a, b in zip(jax.tree.leaves(fb), jax.tree.leaves(fp)):
        np.testing.assert_allclose(a, b, rtol=F32.model_rtol, atol=F32.grad_sq_atol)


def test_frozen_parameters_bit_identical():
    graphdef, params0, rest = split(tiny_model())
    trainable = lambda params: jax.tree_util.tree_map_with_path(
        lambda path, _: "embed_tokens" not in jax.tree_util.keystr(path), params)
    state, _ = _run(trainable=trainable)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(state.params), jax.tree.leaves(params0)):
        if "embed_tokens" in jax.tree_util.keystr(path):
            np.testing.assert_array_equal(a, b)
        else:
            assert not np.array_equal(a, b), jax.tree_util.keystr(path)


def test_non_finite_step_keeps_previous_state():
    graphdef, params, rest = split(tiny_model())
    tx = make_optimizer(CFG)
    step = make_train_step(graphdef, rest, tx, loss=Loss(penalty=lambda p, a: jnp.asarray(jnp.nan, jnp.float32)))
    state = init_state(params, tx)
    before = jax.tree.map(np.asarray, state.params)
    state, metrics = step(state, batch(0))
    assert not bool(metrics["finite"]) and int(state.step) == 0
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(before)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kw", [dict(min_lr=1.0, peak_lr=0.1), dict(warmup_steps=20, total_steps=10), dict(clip_norm=0)])
def test_optim_config_validation(kw):
    with pytest.raises(ValueError):
        OptimConfig(**kw)


def test_bf16_mixed_precision_keeps_f32_master_weights_and_learns():
    from flax import nnx

    from cfka_jax.train.step import master_params
    from cfka_jax.models.qwen import QwenConfig, QwenModel

    cfg = QwenConfig(model_type="qwen2", vocab_size=37, hidden_size=24, intermediate_size=29, num_hidden_layers=2,
                     num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True, initializer_range=0.2,
                     dtype=jnp.bfloat16)
    graphdef, params, rest = nnx.split(QwenModel(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)
    params = master_params(params)
    tx = make_optimizer(CFG)
    step = make_train_step(graphdef, rest, tx, loss=Loss(compute_dtype=jnp.bfloat16))
    state = init_state(params, tx)
    losses = []
    for _ in range(6):
        state, metrics = step(state, batch(0))
        losses.append(float(metrics["loss"]))
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(state.params))
    assert metrics["loss"].dtype == jnp.float32 and losses[-1] < losses[0] - 0.1


def test_step_hooks_reproduce_the_default_step_bit_for_bit():
    """The mask given to the step (``trainable``) equals the mask given to the optimiser, and the objective hook
    with the language-model objective equals the default step."""
    from cfka_jax.train.step import lm_objective

    graphdef, params, rest = split(tiny_model())
    mask = jax.tree_util.tree_map_with_path(lambda path, _: "embed_tokens" not in jax.tree_util.keystr(path), params)
    ref_tx = make_optimizer(CFG, mask)
    ref = make_train_step(graphdef, rest, ref_tx, placement=Placement(donate=False))
    hooked = make_train_step(None, None, make_optimizer(CFG), loss=Loss(objective=lm_objective(graphdef, rest)),
                             update=Update(trainable=mask), placement=Placement(donate=False))
    a, b = init_state(params, ref_tx), init_state(params, hooked.tx)
    for i in range(2):
        a, ma = ref(a, batch(i))
        b, mb = hooked(b, batch(i))
        assert float(ma["loss"]) == float(mb["loss"]) and bool(mb["finite"])
    jax.tree.map(np.testing.assert_array_equal, a.params, b.params)
    with pytest.raises(ValueError, match="objective"):
        make_train_step(None, None, ref_tx, loss=Loss(penalty=lambda p, x: 0.0, objective=lm_objective(graphdef, rest)))


@pytest.mark.parametrize("make, match", [
    (lambda: Loss(loss_fn=3), "Loss.loss_fn must be callable"),
    (lambda: Loss(penalty="ewc"), "Loss.penalty must be callable"),
    (lambda: Loss(objective=lambda p, b: (0.0, {}), compute_dtype=jnp.bfloat16), "Loss.compute_dtype"),
    (lambda: Update(guard="none"), "Update.guard must be one of"),
    (lambda: Update(accumulate=0), "--accumulate must be an integer >= 1"),
    (lambda: Update(update=lambda g, s, p: (p, s), trainable={}), "Update.trainable / Update.transform"),
    (lambda: Placement(ensemble="pmap"), "Placement.ensemble must be one of"),
    (lambda: Placement(donate=1), "Placement.donate must be a bool"),
])
def test_step_option_groups_refuse_bad_fields(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_the_step_builder_takes_the_model_the_optimiser_and_three_option_groups():
    import inspect

    assert list(inspect.signature(make_train_step).parameters) == ["graphdef", "rest", "tx", "loss", "update",
                                                                   "placement"]
    with pytest.raises(ValueError, match="an optax tx or an Update.update"):
        make_train_step(None, None, None)
