"""Null-space projected updates (continual/nullspace.py): after a projected update every old key's output is
unchanged to float tolerance (one layer, accumulated over two tasks, and a whole train step of a tiny LM with
AdamW and weight decay), the eigenvalue cut keeps what it says, and GPM's bases share the format."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.continual import gpm, nullspace
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import init_state, make_train_step
from tests.helpers import batch, split, tiny_model
from tests.tolerances import F32, F64

D_IN, D_OUT = 13, 7


def _keys(seed: int, n: int, rank: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, rank)) @ rng.normal(size=(rank, D_IN))  # n keys spanning `rank` directions


def test_projected_update_leaves_old_keys_outputs_unchanged():
    k1, k2 = _keys(0, 20, 4), _keys(1, 15, 3)
    rng = np.random.default_rng(2)
    w, u = rng.normal(size=(D_IN, D_OUT)), rng.normal(size=(D_IN, D_OUT)).astype(np.float32)
    bases = nullspace.update_bases(None, {("l",): k1.T @ k1}, 1e-9)
    assert bases[("l",)].shape == (D_IN, 4)  # exactly the keys' span
    bases = nullspace.update_bases(bases, {("l",): k2.T @ k2}, 1e-9)
    assert bases[("l",)].shape == (D_IN, 7)  # task 2 adds its own three directions
    m = bases[("l",)].astype(np.float64)
    np.testing.assert_allclose(m.T @ m, np.eye(7), atol=F32.op_atol)
    step = gpm.project_updates({"l": {"kernel": jnp.asarray(u)}}, bases)["l"]["kernel"]
    for k in (k1, k2):
        change = k @ np.asarray(step, np.float64)  # (W + U')ᵀ k − Wᵀ k for every old key
        np.testing.assert_allclose(change, 0.0, atol=F32.op_atol * np.abs(k @ w).max())
    assert np.linalg.norm(np.asarray(step)) > 0.1 * np.linalg.norm(u)  # 6 of 13 directions still move


def test_eigenvalue_cut_is_relative_to_the_largest(x64):
    evecs = np.linalg.qr(np.random.default_rng(3).normal(size=(D_IN, D_IN)))[0]
    evals = np.array([100.0, 10.0, 2.0, 0.5, 0.05] + [0.0] * (D_IN - 5))
    gram = evecs @ np.diag(evals) @ evecs.T
    for tol, k in ((5e-2, 2), (5e-3, 3), (1e-3, 4), (1e-4, 5)):
        m = nullspace.new_directions(gram, None, tol)
        assert m.shape == (D_IN, k), tol
        np.testing.assert_allclose(np.linalg.norm(evecs[:, :k].T @ m, axis=0), 1.0, rtol=F64.exact_rtol)
    assert nullspace.new_directions(np.zeros((D_IN, D_IN)), None, 1e-2).shape == (D_IN, 0)


def test_a_train_step_keeps_every_layer_on_the_old_keys():
    """One AdamW step (weight decay on) of a tiny LM with the projection after the optimiser: for every covered
    kernel W, the old inputs x give x·W' = x·W (the embeddings and norms still train, unprojected)."""
    model = tiny_model(5)
    old = batch(7, rows=1)  # 10 predicting positions: every layer's key span is smaller than its input width
    grams = gpm.input_grams(model, [old])
    bases = nullspace.update_bases(None, grams, 1e-7)
    assert all(0 < m.shape[1] < m.shape[0] for m in bases.values())
    graphdef, params, rest = split(model)
    opt = OptimConfig(peak_lr=1e-2, min_lr=1e-3, total_steps=4, warmup_steps=0, weight_decay=0.1)
    tx = make_optimizer(opt, None, post=gpm.gpm_projection(bases))
    state = init_state(jax.tree.map(jnp.copy, params), tx)
    new, metrics = make_train_step(graphdef, rest, tx)(state, batch(8, rows=2))
    assert bool(metrics["finite"])
    moved = 0.0
    for path, gram in grams.items():
        w0 = np.asarray(_at(params, path + ("kernel",)), np.float64)
        w1 = np.asarray(_at(new.params, path + ("kernel",)), np.float64)
        delta, scale = w1 - w0, np.trace(w0.T @ gram @ w0)
        moved += float(np.abs(delta).sum())
        assert np.trace(delta.T @ gram @ delta) <= (F32.exact_rtol ** 2) * scale, path  # Σ_n ‖Δᵀ x_n‖² ≈ 0
    assert moved > 0.0


def _at(tree, path):
    node = tree
    for k in path:
        node = node[k]
    return node[...] if hasattr(node, "get_value") else node


def test_gpm_and_nullspace_share_the_basis_format(tmp_path):
    k = _keys(4, 30, 5)
    grams = {("a", 0, "b"): k.T @ k}
    for bases in (gpm.update_bases(None, grams, 0.99), nullspace.update_bases(None, grams, 1e-3)):
        gpm.save_bases(tmp_path / "b.npz", bases)
        back = gpm.load_bases(tmp_path / "b.npz")
        assert list(back) == [("a", 0, "b")] and back[("a", 0, "b")].dtype == np.float32
    with pytest.raises(ValueError, match="tol"):
        nullspace.component(None, tol=0.0)
