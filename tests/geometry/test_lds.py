"""The linear datamodeling score (``geometry/lds.py``): ranks and Spearman, the LDS against a ground truth built to
match a method (≈ 1), its negation (≈ −1) and random scores (≈ 0), the subset design, retraining in one program
(member u equals a lone run on its subset) and the per-test forms of LESS and HyperINF."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from cfka_jax.geometry import lds, selection
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.synthetic import ModelConfig, TaskConfig, make_task, optim_config
from cfka_jax.train.ensemble import max_rel_diff, member
from cfka_jax.train.optim import make_optimizer
from cfka_jax.train.step import init_state, make_train_step
from tests.tolerances import F32


def test_ranks_and_spearman_match_scipy():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 5, size=(7, 11)).astype(np.float32)  # many ties
    b = rng.normal(size=(7, 11)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(lds.ranks(jnp.asarray(a))),
                                  np.stack([scipy.stats.rankdata(r) for r in a]))
    want = [scipy.stats.spearmanr(x, y).statistic for x, y in zip(a, b)]
    np.testing.assert_allclose(np.asarray(lds.spearman_rows(jnp.asarray(a), jnp.asarray(b))), want,
                               rtol=F32.exact_rtol, atol=F32.exact_rtol)
    const = np.ones((1, 11), np.float32)
    assert float(lds.spearman_rows(jnp.asarray(const), jnp.asarray(b[:1]))[0]) == 0.0


def test_lds_of_matched_truth_is_one_of_negated_minus_one_and_of_random_near_zero():
    """A ground truth built to match a method's additive prediction scores LDS ≈ 1; the same scores with the sign
    flipped ≈ −1 (the loss is negated: a similarity predicts lower loss); independent random scores ≈ 0."""
    rng = np.random.default_rng(1)
    q, z, u = 200, 40, 32
    tau = rng.normal(size=(q, z)).astype(np.float32)
    masks = lds.subset_masks(3, z, u, 0.5)
    loss = -np.asarray(lds.predicted(tau, masks)).T + 1e-3 * rng.normal(size=(u, q)).astype(np.float32)
    matched = np.asarray(lds.lds(tau, masks, loss))
    assert matched.shape == (q,) and matched.min() > 0.99
    assert np.asarray(lds.lds(-tau, masks, loss)).max() < -0.99
    rand = np.asarray(lds.lds(rng.normal(size=(q, z)).astype(np.float32), masks, loss))
    # per item ρ under independence has std ≈ 1/√(U−1) = 0.18; over 200 items the mean's std ≈ 0.013
    assert abs(rand.mean()) < 0.05 and rand.std() > 0.1


def test_subset_design_and_its_errors():
    masks = lds.subset_masks(0, 10, 5, 0.3)
    assert masks.shape == (5, 10) and set(np.unique(masks)) == {0.0, 1.0} and (masks.sum(1) == 3).all()
    np.testing.assert_array_equal(masks, lds.subset_masks(0, 10, 5, 0.3))
    assert not np.array_equal(masks, lds.subset_masks(1, 10, 5, 0.3))
    for args, word in (((10, 5, 0.0), "fraction"), ((10, 5, 1.0), "fraction"), ((10, 2, 0.5), "at least 3"),
                       ((10, 5, 0.01), "keeps 0")):
        with pytest.raises(ValueError, match=word):
            lds.subset_masks(0, *args)


TASK = TaskConfig(num_classes=2, train_per_class=3, test_per_class=2, pretrain_classes=1, pretrain_per_class=2,
                  template_len=2, input_len=2, content_tokens=5, rule="map")
STEPS, LR = 3, 1e-2


@functools.cache
def _world():
    task = make_task(TASK)
    net, params = Net.split(ModelConfig(hidden=8, layers=1, heads=2, kv_heads=1, intermediate=12)
                            .build(TASK.vocab_size))
    return task, net, params


@functools.cache
def _lone_step():
    _, net, _ = _world()
    tx = make_optimizer(optim_config(STEPS, LR))
    return make_train_step(net.graphdef, net.rest, tx), tx


def _lone(params, tokens):
    """A run alone on ``tokens``: the engine's plain step (compiled once), full batch, the trainer's optimiser."""
    step, tx = _lone_step()
    state = init_state(jax.tree.map(jnp.copy, params), tx)
    batch = {"tokens": jnp.asarray(tokens), "target_mask": jnp.ones(tokens.shape, jnp.float32)}
    for _ in range(STEPS):
        state, _ = step(state, batch)
    return state.params


@pytest.mark.parametrize("mode", ["vmap", pytest.param("map", marks=pytest.mark.slow)])
def test_member_equals_a_lone_run_on_its_subset(mode):
    """~15 s on a quiet machine: three compiles (the ensemble step, the lone step, the members' losses) of a
    one-block model; ``map`` compiles its loop body slowly on XLA:CPU and is marked slow."""
    task, net, params = _world()
    z = len(task.train_tokens)
    masks = lds.subset_masks(0, z, 3, 0.5)
    train = lds.make_subset_trainer(net.graphdef, net.rest, steps=STEPS, lr=LR, mode=mode)
    params_u, final, nonfinite = train(params, task.train_tokens, np.ones(task.train_tokens.shape, np.float32),
                                       masks)
    assert final.shape == (3,) and nonfinite.sum() == 0
    losses = np.asarray(lds.member_losses(net.graphdef, params_u, net.rest, task.test_tokens,
                                          np.ones(task.test_tokens.shape, np.float32)))
    for u in range(3):
        lone = _lone(params, task.train_tokens[masks[u] > 0])
        assert max_rel_diff(member(params_u, u), lone) <= F32.adam_batched_rtol
        want = jax.jit(functools.partial(lds.item_losses, net.graphdef))(
            lone, net.rest, jnp.asarray(task.test_tokens), jnp.ones(task.test_tokens.shape, jnp.float32))
        np.testing.assert_allclose(losses[u], np.asarray(want), rtol=F32.adam_batched_rtol)
    # the subsets differ, so the members do (the comparison above could fail)
    assert max_rel_diff(member(params_u, 0), member(params_u, 1)) > 100 * F32.adam_batched_rtol


def test_per_test_less_and_hyperinf_reproduce_the_selection_scores_for_one_item():
    rng = np.random.default_rng(2)
    train = {("a",): jnp.asarray(rng.normal(size=(6, 3 * 4)), jnp.float32),
             ("b",): jnp.asarray(rng.normal(size=(6, 5 * 2)), jnp.float32)}
    val = {p: jnp.asarray(rng.normal(size=(4, g.shape[1])), jnp.float32) for p, g in train.items()}
    shapes = {("a",): (3, 4), ("b",): (5, 2)}
    per_test = np.asarray(lds.hyperinf_per_test(train, val, shapes))
    for q in range(4):
        one = selection.hyperinf_scores(train, {p: v[q] for p, v in val.items()}, shapes)
        np.testing.assert_allclose(per_test[q], np.asarray(one), rtol=F32.sum_rtol, atol=F32.sum_rtol)
    feats = [jnp.asarray(rng.normal(size=(6, 8)), jnp.float32) for _ in range(2)]
    vals = [jnp.asarray(rng.normal(size=(4, 8)), jnp.float32) for _ in range(2)]
    less = np.asarray(lds.less_per_test(feats, vals, [0.3, 0.1]))
    for q in range(4):
        one = selection.less_scores(feats, [v[q] for v in vals], [0.3, 0.1])
        np.testing.assert_allclose(less[q], np.asarray(one), rtol=F32.exact_rtol, atol=F32.exact_rtol)
