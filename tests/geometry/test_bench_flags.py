"""bench/geometry.py: the flags that reach the paper's regime parse into the scale they name."""

import importlib.util
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "geometry.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_geometry", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regime_flags_set_width_depth_pool_and_random_init(bench):
    args = bench.parse_args(["--hidden", "512", "--layers", "6", "--pool", "2000", "--pretrain-steps", "0",
                             "--train-chunk", "50", "--exact-train", "200"])
    s = bench.bench_scale(args)
    assert (s.model.hidden, s.model.intermediate, s.model.layers) == (512, 1024, 6)
    assert s.task.num_classes * s.task.train_per_class == 2000 and s.task.test_per_class == 10
    assert s.pretrain_steps == 0 and (args.train_chunk, args.exact_train) == (50, 200)
    base = bench.bench_scale(bench.parse_args([]))
    assert base == bench.scale("small")  # no flag: the small scale unchanged


@pytest.mark.parametrize("argv, flag", [(["--pool", "2005"], "--pool"), (["--layers", "0"], "--layers"),
                                        (["--hidden", "30"], "--hidden"), (["--pretrain-steps", "-1"],
                                                                           "--pretrain-steps"),
                                        (["--train-chunk", "-2"], "--train-chunk"),
                                        (["--exact-train", "-1"], "--exact-train"),
                                        (["--exact-test", "-1"], "--exact-test"),
                                        (["--feature-chunk", "-4"], "--feature-chunk"),
                                        (["--model-vocab", "10"], "--model-vocab")])
def test_bad_values_exit_naming_the_flag(bench, argv, flag):
    with pytest.raises(SystemExit, match=flag):
        bench.bench_scale(bench.parse_args(argv))


def test_exact_chunks_must_divide_the_pool(bench):
    import numpy as np

    from cfka_jax.experiments.geometry_common import base_model

    s = bench.bench_scale(bench.parse_args(["--scale", "smoke", "--pretrain-steps", "0"]))
    task, model, _ = base_model(s, "pythia")
    from cfka_jax.geometry.net import Net

    net, params = Net.split(model)
    with pytest.raises(SystemExit, match="--train-chunk 5"):
        bench.exact(params, net, task, "all", train_chunk=5)
    assert len(task.train_tokens) % 5 and np.ndim(task.train_tokens) == 2


def test_exact_on_a_test_subset_extrapolates_each_part_by_its_count(bench):
    """``--exact-test`` / ``--exact-train``: the scores are the measured block of the full exact scores, and the
    reported time scales test gradients by m/m′, train gradients by n/n′ and products by mn/(m′n′)."""
    import numpy as np

    from cfka_jax.experiments.geometry_common import base_model
    from cfka_jax.geometry.net import Net

    s = bench.bench_scale(bench.parse_args(["--scale", "smoke", "--pretrain-steps", "0"]))
    task, model, _ = base_model(s, "qwen", vocab_size=300)
    net, params = Net.split(model)
    assert model.cfg.vocab_size == 300
    full, _, _, n, m = bench.exact(params, net, task, "all", train_chunk=4)
    part, clock, _, n_done, m_done = bench.exact(params, net, task, "all", train_chunk=4, train_limit=5,
                                                 test_limit=2, product="numpy")
    assert (n, m, n_done, m_done) == (12, 6, 8, 2) and part.shape == (2, 8)
    np.testing.assert_allclose(part, full[:2, :8], rtol=1e-5, atol=1e-5 * np.abs(full).max())  # numpy = XLA
    p = clock.parts
    assert np.isclose(sum(p.values()), clock.measured_run_s)
    assert np.isclose(clock.run_s, p["test_grads_s"] * 3 + p["train_grads_s"] * 1.5 + p["products_s"] * 4.5)
