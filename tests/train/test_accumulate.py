"""Gradient accumulation (``train/accumulate.py``, ``make_train_step(..., update=Update(accumulate=N))``) equals
the large batch.

Not bit for bit: the micro-batches' sums are regrouped (a running weighted mean of N partial means instead of one
sum over the batch), so parameters after an SGD step agree to float32 rounding, F32.exact_rtol relative to each
leaf's largest entry; the loss and the gradient norm to F32.exact_rtol.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfka_jax.continual.taalm.twppl import twppl_loss
from cfka_jax.train import ensemble as ens
from cfka_jax.train.accumulate import accumulated, split_micro
from cfka_jax.train.step import Loss, Placement, Update, init_state, make_train_step
from tests.helpers import SEQ, VOCAB, split, tiny_model
from tests.tolerances import F32

ROWS = 6
SLOW = pytest.mark.slow  # each test compiles two steps: ~9 s of CPU, 30 s on the shared 2-core machine


def _batch(seed: int = 0, rows: int = ROWS, empty: bool = False) -> dict:
    """Rows with different numbers of targets (so unweighted micro-batch means would differ from the batch's)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, VOCAB, size=(rows, SEQ)).astype(np.int32)
    mask = (rng.random((rows, SEQ)) < np.linspace(0.2, 1.0, rows)[:, None]).astype(np.float32)
    mask[:, 0] = 0.0
    if empty:
        mask[:] = 0.0
    weights = rng.random((rows, SEQ)).astype(np.float32)
    return {"tokens": jnp.asarray(tokens), "target_mask": jnp.asarray(mask), "token_weights": jnp.asarray(weights)}


def _penalty(params, anchor):
    return 0.3 * sum(jnp.sum(jnp.square(p - a)) for p, a in zip(jax.tree.leaves(params), jax.tree.leaves(anchor)))



def _one_step(accumulate, batch, *, guard="state", loss=None, penalty=False):
    graphdef, params, rest = split(tiny_model())
    anchor = jax.tree.map(lambda p: p + 0.01, params)
    tx = optax.sgd(0.5)
    kw = {"loss_fn": loss} if loss is not None else {}
    step = make_train_step(graphdef, rest, tx, loss=Loss(penalty=_penalty if penalty else None, **kw),
                           update=Update(guard=guard, accumulate=accumulate))
    state = init_state(jax.tree.map(jnp.copy, params), tx)
    state, metrics = step(state, batch, anchor) if penalty else step(state, batch)
    return state, metrics, params


def _assert_same(a, b):
    (sa, ma, p0), (sb, mb, _) = a, b
    assert bool(ma["finite"]) and bool(mb["finite"])
    assert ens.max_rel_diff(jax.tree.map(jnp.subtract, sa.params, p0), jax.tree.map(jnp.subtract, sb.params, p0)) \
        <= F32.exact_rtol  # the update itself, not just the parameters (which hide it under their size)
    for key in ("loss", "penalty", "grad_norm", "targets"):
        np.testing.assert_allclose(ma[key], mb[key], rtol=F32.exact_rtol)


@pytest.mark.parametrize("n,guard", [(3, "state"), pytest.param(2, "gradient", marks=SLOW),
                                     pytest.param(6, "state", marks=SLOW)])
def test_nll_equals_large_batch(n, guard):
    batch = {k: v for k, v in _batch().items() if k != "token_weights"}
    _assert_same(_one_step(n, batch, guard=guard), _one_step(1, batch, guard=guard))


@SLOW
def test_unweighted_micro_means_would_differ():
    """The weighting matters on this batch: equal weights (a mean of micro-batch means) is another loss."""
    batch = {k: v for k, v in _batch().items() if k != "token_weights"}
    graphdef, params, rest = split(tiny_model())
    from cfka_jax.train.step import lm_objective

    vg = jax.value_and_grad(lm_objective(graphdef, rest), has_aux=True)
    (big, _), _ = jax.jit(vg)(params, batch)
    (plain, _), _ = jax.jit(accumulated(vg, 3))(params, batch)
    (weighted, _), _ = jax.jit(accumulated(vg, 3, weight_key="targets"))(params, batch)
    np.testing.assert_allclose(weighted, big, rtol=F32.exact_rtol)
    assert abs(float(plain) - float(big)) > 1e3 * F32.exact_rtol * abs(float(big))


@SLOW
def test_penalty_counted_once():
    _assert_same(_one_step(3, _batch(1), penalty=True), _one_step(1, _batch(1), penalty=True))


def test_token_weighted_objective():
    """TWPPL is a mean over rows (no ``mean_over``): equal weights reproduce the large batch."""
    _assert_same(_one_step(2, _batch(2), loss=twppl_loss), _one_step(1, _batch(2), loss=twppl_loss))


@SLOW
def test_no_targets_keeps_the_penalty_gradient():
    acc, big = _one_step(3, _batch(3, empty=True), penalty=True), _one_step(1, _batch(3, empty=True), penalty=True)
    _assert_same(acc, big)
    assert float(acc[1]["grad_norm"]) > 0 and float(acc[1]["loss"]) == 0.0


@SLOW
def test_seed_ensemble_members_accumulate():
    from tests.helpers import tiny_model as member

    graphdef, params_E, rest = ens.split_members([member(0), member(1)])
    batch = {k: v for k, v in _batch(4).items() if k != "token_weights"}
    out = []
    for n in (1, 3):
        tx = optax.sgd(0.5)
        step = make_train_step(graphdef, rest, tx, update=Update(accumulate=n),
                               placement=Placement(ensemble="vmap", shared_batch=True))
        state, metrics = step(ens.init_ensemble(jax.tree.map(jnp.copy, params_E), tx), batch)
        assert bool(jnp.all(metrics["finite"]))
        out.append(jax.tree.map(jnp.subtract, state.params, params_E))
    for e in range(2):
        assert ens.max_rel_diff(ens.member(out[0], e), ens.member(out[1], e)) <= F32.exact_rtol


def test_bad_accumulate_refused():
    graphdef, params, rest = split(tiny_model())
    with pytest.raises(ValueError, match="--accumulate must be an integer >= 1"):
        make_train_step(graphdef, rest, optax.sgd(0.1), update=Update(accumulate=0))
    step = make_train_step(graphdef, rest, optax.sgd(0.1), update=Update(accumulate=4))
    with pytest.raises(ValueError, match="--accumulate 4 needs the batch size to be a multiple of 4, got 6 rows"):
        step(init_state(params, optax.sgd(0.1)), {k: v for k, v in _batch().items() if k != "token_weights"})
    with pytest.raises(ValueError, match="same leading size"):
        split_micro({"a": jnp.zeros((4, 2)), "b": jnp.zeros((3,))}, 2)
