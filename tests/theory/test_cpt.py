import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cfka_jax.theory import cpt as cl
from cfka_jax.theory import cpt_predictions as ct
from cfka_jax.theory.dynamics import error_hessian, stationary_covariance
from cfka_jax.theory.model import YZParams, yz_loss
from cfka_jax.theory.optimum import bayes_posterior
from cfka_jax.theory.train import SGDConfig
from tests.tolerances import F32, F64, SAMPLING_K_HISTOGRAM, sampling_atol

TINY = cl.ContinualConfig(num_old_subjects=3, num_new_subjects=1, num_changed=1, num_relations=2,
                          objects_per_relation=2, smoothing=0.15, seed=1)


def _setup():
    worlds = cl.make_continual_worlds(TINY)
    theta = cl.pretrained(worlds)
    return worlds, theta, cl.diagonal_fisher(theta, worlds.old)


def test_config_validation():
    with pytest.raises(ValueError):
        cl.ContinualConfig(num_changed=5, num_old_subjects=4)
    with pytest.raises(ValueError):
        cl.ContinualConfig(objects_per_relation=1)
    with pytest.raises(ValueError):
        cl.ContinualConfig(smoothing=0.0)


def test_worlds_share_layout_and_are_naive_bayes(x64):
    worlds, _, _ = _setup()
    old, new = worlds.old, worlds.new
    np.testing.assert_array_equal(old.contexts, new.contexts)
    assert old.token_kinds == new.token_kinds and old.query_token == new.query_token
    for w in (old, new):
        np.testing.assert_allclose(jnp.sum(w.joint), 1.0, rtol=F64.exact_rtol)
        nb = w.pr_o[None, :] * jnp.prod(w.pr_s_given_o[w.contexts], axis=1)
        np.testing.assert_allclose(w.joint, nb / jnp.sum(nb), rtol=F64.direct_rtol)
    # the overwritten fact: same context, a different object in the new world
    c, o = int(worlds.changed.context[0]), int(worlds.changed.obj[0])
    assert int(jnp.argmax(bayes_posterior(old)[c])) == o
    assert int(jnp.argmax(bayes_posterior(new)[c])) != o


def test_fisher_is_per_example_squared_gradient_and_diag_of_hessian(x64, key):
    worlds, theta, fisher = _setup()
    assert fisher.shape == theta.Y.shape
    block = cl.active_block(fisher, worlds)
    assert float(jnp.min(block)) > 0.0
    np.testing.assert_array_equal(fisher.at[worlds.old.objects, : block.shape[1]].set(0.0), 0.0)
    K = error_hessian(worlds.old, theta.Y, theta.Z)
    np.testing.assert_allclose(block.reshape(-1), jnp.diag(K), rtol=F64.exact_rtol, atol=F64.zero_atol)
    # away from the optimum: the enumerated E[(∂CE)²]
    params = YZParams(theta.Y + 0.3 * jax.random.normal(key, theta.Y.shape), theta.Z)
    num_c, num_o = worlds.old.joint.shape
    cc, oo = jnp.meshgrid(jnp.arange(num_c), jnp.arange(num_o), indexing="ij")

    def grad(c, o):
        target = jax.nn.one_hot(o, num_o, dtype=params.Y.dtype)[None, :]
        loss = lambda Y: yz_loss(YZParams(Y, params.Z), worlds.old.contexts[c][None, :], target, worlds.old.objects)
        return jax.grad(loss)(params.Y)

    grads = jax.jit(jax.vmap(grad))(cc.reshape(-1), oo.reshape(-1))
    expected = jnp.einsum("p,pij->ij", worlds.old.joint.reshape(-1), grads**2)
    np.testing.assert_allclose(cl.diagonal_fisher(params, worlds.old), expected, rtol=F64.exact_rtol,
                               atol=F64.zero_atol)


@settings(max_examples=10, deadline=None)
@given(k=st.floats(0.0, 10.0), alpha=st.floats(0.3, 1.0), seed=st.integers(0, 100))
def test_cpt_grad_matches_autodiff(k, alpha, seed):
    with jax.enable_x64(True):
        worlds, theta, fisher = _setup()
        Y = theta.Y + 0.5 * jax.random.normal(jax.random.key(seed), theta.Y.shape)
        joint = cl.mixture_joint(worlds.new.joint, worlds.old.joint, alpha)
        full = jax.grad(lambda Y_: yz_loss(YZParams(Y_, worlds.Z), worlds.new.contexts, joint, worlds.new.objects)
                        + cl.ewc_penalty(Y_, theta.Y, fisher, k))(Y)
        mine = cl.cpt_grad(cl.active_block(Y, worlds), joint, cl.design(worlds), cl.active_block(theta.Y, worlds),
                           cl.active_block(fisher, worlds), k)
        np.testing.assert_allclose(mine, cl.active_block(full, worlds), rtol=F64.exact_rtol,
                                   atol=F64.zero_sum_atol)


@jax.jit
def _naive_run(fisher, key):
    worlds = cl.make_continual_worlds(TINY)
    cfg = SGDConfig(steps=5, batch_size=4, log_every=5)
    return cl.run_cpt(worlds, cl.Method(0.0, 1.0, worlds.old.joint), key, eta_y=0.5, cfg=cfg, fisher=fisher)[0]


@settings(max_examples=3, deadline=None)
@given(scale=st.floats(1e-3, 1e3), seed=st.integers(0, 1000))
def test_ewc_with_k0_is_the_naive_step_exactly(scale, seed):
    worlds, theta, _ = _setup()
    key = jax.random.key(seed)
    fisher = scale * jnp.abs(jax.random.normal(key, theta.Y.shape, theta.Y.dtype))
    np.testing.assert_array_equal(_naive_run(fisher, key), _naive_run(jnp.zeros_like(fisher), key))


def test_replay_with_alpha1_is_the_naive_run_exactly(key):
    worlds, theta, fisher = _setup()
    cfg = SGDConfig(steps=6, batch_size=3, log_every=2)
    other = cl.generative_joint(theta, worlds.old)
    runs = [jax.jit(lambda m: cl.run_cpt(worlds, m, key, eta_y=0.7, cfg=cfg, fisher=fisher))(
        cl.Method(0.0, 1.0, replay)) for replay in (worlds.old.joint, other)]
    jax.tree.map(np.testing.assert_array_equal, runs[0], runs[1])


def test_batch_weights(key):
    joint = cl.make_continual_worlds(TINY).new.joint
    assert cl.batch_weights(joint, key, None) is joint
    q = cl.batch_weights(joint, key, 7)
    np.testing.assert_allclose(jnp.sum(q), 1.0, rtol=F32.few_ulps)
    assert q.shape == joint.shape
    np.testing.assert_allclose(q * 7, jnp.round(q * 7), atol=F32.op_atol)
    many = jax.vmap(lambda k: cl.batch_weights(joint, k, 50))(jax.random.split(key, 400)).mean(0)
    worst_std = float(jnp.sqrt(jnp.max(joint * (1 - joint))))  # of the cell frequency most spread out
    np.testing.assert_allclose(many, joint, atol=sampling_atol(worst_std, 400 * 50, k=SAMPLING_K_HISTOGRAM))


def test_naive_convergence_point_is_the_closed_form(x64):
    worlds, theta, fisher = _setup()
    guess = ct.mixture_nb_optimum(worlds, worlds.new.joint).Y
    Y = jax.jit(ct.minimise)(worlds, worlds.new.joint, theta.Y, fisher, 0.0, theta.Y, guess=guess)
    np.testing.assert_allclose(ct.old_prob_at(worlds, Y), ct.naive_old_prob(worlds, worlds.old_facts),
                               rtol=F64.direct_rtol)
    # GD keeps the null-space component of its start: the k = 0 point differs from θ* only in range(H)
    H = ct.objective_hessian(worlds, worlds.new.joint, theta.Y, fisher, 0.0, Y)
    evals, evecs = jnp.linalg.eigh(H)
    null = evecs[:, evals < 1e-10 * jnp.max(evals)]
    np.testing.assert_allclose(null.T @ cl.active_block(Y - theta.Y, worlds).reshape(-1), 0.0,
                               atol=F64.fixed_point_atol)


def test_closed_form_points_match_long_gradient_descent(x64):
    worlds, theta, fisher = _setup()
    joint = cl.mixture_joint(worlds.new.joint, worlds.old.joint, 0.8)
    for k in (0.0, 2.0):
        guess = ct.mixture_nb_optimum(worlds, joint).Y if k == 0 else theta.Y
        Y_star = ct.minimise(worlds, joint, theta.Y, fisher, k, theta.Y, guess=guess)
        H = ct.objective_hessian(worlds, joint, theta.Y, fisher, k, Y_star)
        eta = 1.0 / float(jnp.max(jnp.linalg.eigvalsh(H)))
        Y_gd, _ = jax.jit(lambda: cl.run_cpt(worlds, cl.Method(k, 0.8, worlds.old.joint), jax.random.key(0),
                                             eta_y=eta, cfg=SGDConfig(30_000, None, 30_000), fisher=fisher))()
        np.testing.assert_allclose(cl.active_block(Y_gd, worlds), cl.active_block(Y_star, worlds),
                                   atol=F64.long_gd_atol)
    assert float(ct.moment_residual(ct.mixture_nb_optimum(worlds, joint).Y, worlds, joint)) < F64.cancel_atol


def test_sgd_covariance_limits_and_vectorisation(x64):
    worlds, theta, _ = _setup()
    K = error_hessian(worlds.old, theta.Y, theta.Z)
    G = ct.gradient_covariance(worlds, worlds.old.joint, theta.Y)
    np.testing.assert_allclose(G, K, atol=F64.zero_sum_atol)  # Fisher = Hessian at a Bayes optimum
    predict = ct.sgd_covariance(K, G, 0.7, 8)
    np.testing.assert_allclose(predict(0.0), 0.0, atol=F64.zero_atol)
    np.testing.assert_allclose(predict(jnp.inf), stationary_covariance(K, 0.7, 8), rtol=F64.solve_rtol,
                               atol=F64.zero_atol)
    ts = jnp.asarray([[1.0, 10.0], [100.0, 1e4]])
    np.testing.assert_allclose(predict(ts)[1, 0], predict(100.0), rtol=F64.exact_rtol)


def test_world_dataclass_replace_keeps_marginals_consistent(x64):
    worlds, _, _ = _setup()
    mixed = cl.with_joint(worlds.new, worlds.new.joint)
    num_x = worlds.new.context_tokens.shape[0]
    np.testing.assert_allclose(mixed.pr_o, worlds.new.pr_o, rtol=F64.direct_rtol)
    np.testing.assert_allclose(mixed.pr_s_given_o[:num_x], worlds.new.pr_s_given_o[:num_x], rtol=F64.direct_rtol)
    assert dataclasses.is_dataclass(mixed)


def test_ewc_hessian_is_bounded_below_by_the_fisher_floor(x64):
    worlds, theta, fisher = _setup()
    for k in (0.1, 3.0):
        H = ct.objective_hessian(worlds, worlds.new.joint, theta.Y, fisher, k, theta.Y)
        floor = ct.ewc_curvature_floor(worlds, fisher, k)
        assert float(jnp.min(jnp.linalg.eigvalsh(H))) >= float(floor) * (1 - 1e-9) > 0.0


def test_first_ewc_step_equals_the_naive_step(x64):
    worlds, theta, fisher = _setup()
    A, ystar, W = cl.design(worlds), cl.active_block(theta.Y, worlds), cl.active_block(fisher, worlds)
    naive = cl.cpt_grad(ystar, worlds.new.joint, A, ystar, W, 0.0)
    np.testing.assert_array_equal(cl.cpt_grad(ystar, worlds.new.joint, A, ystar, W, 50.0), naive)


def test_fact_support_marks_exactly_the_old_facts_coordinates(x64):
    worlds, theta, fisher = _setup()
    m = np.asarray(cl.fact_support(worlds))
    world, facts = worlds.old, worlds.old_facts
    expected = np.zeros_like(m)
    for c, o in zip(np.asarray(facts.context), np.asarray(facts.obj)):
        expected[int(world.objects[o]), np.asarray(world.contexts[c])] = 1.0
    np.testing.assert_array_equal(m, expected)
    # every subject token of an old fact occupies exactly its facts' objects (one per relation)
    s = int(world.contexts[facts.context[0], 0])
    assert m[:, s].sum() == TINY.num_relations


def test_premise_fisher_keeps_occupied_weights_and_shrinks_the_others(x64):
    worlds, theta, fisher = _setup()
    m = cl.fact_support(worlds)
    np.testing.assert_array_equal(cl.premise_fisher(fisher, worlds, 1.0), fisher)
    w = cl.premise_fisher(fisher, worlds, 1e-3)
    np.testing.assert_array_equal(np.asarray(w * m), np.asarray(fisher * m))
    np.testing.assert_allclose(w * (1 - m), 1e-3 * fisher * (1 - m), rtol=F64.direct_rtol)
    col = np.asarray(w[worlds.old.objects, worlds.probe_token])
    dense = np.asarray(fisher[worlds.old.objects, worlds.probe_token])
    assert col.min() / col.max() < 1e-2 * dense.min() / dense.max()  # min_o w_{o,s} ≈ 0: the §2.7 premise
