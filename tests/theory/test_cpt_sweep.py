import jax
import numpy as np
import pytest

from cfka_jax.theory import cpt as cl
from cfka_jax.theory import cpt_sweep as cs
from cfka_jax.theory.cpt_predictions import naive_old_prob
from tests.tolerances import F64

TINY = cl.ContinualConfig(num_old_subjects=3, num_new_subjects=1, num_changed=1, num_relations=2,
                          objects_per_relation=2, smoothing=0.15, seed=1)


def test_spec_validation_and_grid_order():
    with pytest.raises(ValueError):
        cs.SweepSpec(alphas=(0.0,))
    with pytest.raises(ValueError):
        cs.SweepSpec(ks=(-1.0,))
    with pytest.raises(ValueError):
        cs.SweepSpec(replay="lamol")
    spec = cs.SweepSpec(ks=(0.0, 1.0, 2.0), alphas=(0.5, 1.0), num_seeds=3)
    assert spec.num_runs == 18
    k, a = cs.grid_axes(spec)
    np.testing.assert_array_equal(k, [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(a, [0.5, 1, 0.5, 1, 0.5, 1])


def test_tiny_sweep_shapes_theory_and_summary(x64, tmp_path):
    worlds = cl.make_continual_worlds(TINY)
    spec = cs.SweepSpec(ks=(0.0, 1.0), alphas=(0.8, 1.0), num_seeds=2, steps=20, log_every=10, batch_size=4)
    theory = cs.theory_grid(worlds, spec)
    naive = 1 * spec.alphas.index(1.0)  # k = 0, α = 1
    np.testing.assert_allclose(theory.old_prob[naive], naive_old_prob(worlds, worlds.old_facts), rtol=F64.direct_rtol)
    assert float(theory.old_prob[3]) > float(theory.old_prob[naive])  # EWC k = 1 keeps more than naive
    final_Y, trace = cs.run_grid(worlds, spec, theory, jax.random.key(0))
    assert final_Y.shape == (spec.num_runs, worlds.old.vocab_size, worlds.old.vocab_size)
    assert trace.old_prob.shape == (spec.num_runs, 3)
    assert trace.probe_column.shape == (spec.num_runs, 3, worlds.old.objects.shape[0])
    rows = cs.summarise(worlds, spec, theory, final_Y, trace)
    assert [(r["k"], r["alpha"]) for r in rows] == [(0.0, 0.8), (0.0, 1.0), (1.0, 0.8), (1.0, 1.0)]
    cs.write_csv(rows, tmp_path / "s.csv")
    assert (tmp_path / "s.csv").read_text().count("\n") == 5


def test_gradient_descent_started_at_the_optimum_stays_there(x64):
    worlds = cl.make_continual_worlds(TINY)
    spec = cs.SweepSpec(ks=(0.5,), alphas=(0.7,), num_seeds=1, steps=50, log_every=50, batch_size=None,
                        start="optimum", replay="generative")
    theory = cs.theory_grid(worlds, spec)
    final_Y, _ = cs.run_grid(worlds, spec, theory, jax.random.key(0))
    np.testing.assert_allclose(cl.active_block(final_Y[0], worlds), cl.active_block(theory.Y[0], worlds),
                               atol=F64.fixed_point_atol)
    assert float(theory.probe_var[0]) == 0.0  # no minibatch noise in population GD


def test_explicit_fisher_equals_the_default_and_a_premise_fisher_changes_the_ewc_point(x64):
    worlds = cl.make_continual_worlds(TINY)
    spec = cs.SweepSpec(ks=(0.0, 1.0), alphas=(1.0,), num_seeds=2, steps=20, log_every=10, batch_size=4)
    fisher = cl.diagonal_fisher(cl.pretrained(worlds), worlds.old)
    default, explicit = cs.theory_grid(worlds, spec), cs.theory_grid(worlds, spec, fisher)
    np.testing.assert_array_equal(default.Y, explicit.Y)
    key = jax.random.key(0)
    np.testing.assert_array_equal(cs.run_grid(worlds, spec, default, key)[0],
                                  cs.run_grid(worlds, spec, explicit, key, fisher=fisher)[0])
    premise = cs.theory_grid(worlds, spec, cl.premise_fisher(fisher, worlds, 1e-3))
    np.testing.assert_array_equal(premise.Y[0], default.Y[0])  # k = 0: the weights do not enter
    # the EWC point with the premise's weights lies between naive and the dense-Fisher EWC point
    assert float(default.old_prob[0]) < float(premise.old_prob[1]) < float(default.old_prob[1])
