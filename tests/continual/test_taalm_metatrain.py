"""The meta-training loop: splits, steps per epoch, validation cadence, the checkpoint rule, skip_first."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.continual.taalm import metatrain as mt
from cfka_jax.continual.taalm.adamw import AdamWConfig
from cfka_jax.continual.taalm.meta import MetaConfig
from cfka_jax.data.ckl_encode import Encoded
from tests.continual import taalm_tiny as tiny


def _pairs(n, key):
    rng = np.random.default_rng(0)
    d_ids = tuple(np.asarray(rng.integers(0, tiny.V, 6 + i % 2), np.int32) for i in range(n))
    t_ids = tuple(np.asarray(rng.integers(0, tiny.V, 5), np.int32) for _ in range(n))
    d_obj = tuple(np.eye(len(x), dtype=np.float32)[-2] for x in d_ids)
    t_obj = tuple(np.array([0, 0, 0, 1, 1], np.float32) for _ in range(n))
    return mt.PairSet(Encoded(d_ids, d_obj, 0), Encoded(t_ids, t_obj, 0))


def test_split_is_seeded_and_disjoint():
    tr, va = mt.split_pairs(20, 4, 42)
    assert len(va) == 4 and not set(tr) & set(va) and sorted([*tr, *va]) == list(range(20))
    assert (mt.split_pairs(20, 4, 42)[1] == va).all()
    with pytest.raises(ValueError, match="no training pairs"):
        mt.split_pairs(4, 4, 0)


@pytest.mark.slow
def test_meta_train_loop(key):
    phi, ops = tiny.params(key, jnp.float32)
    pairs = _pairs(14, key)
    cfg = mt.MetaTrainConfig(epochs=3, meta_batch=4, val_size=4, val_every=2, val_epochs=1, val_lr=1e-2,
                             outer=AdamWConfig(lr=1e-2), meta=MetaConfig(inner=AdamWConfig(lr=0.05), pair_chunk=2))
    res = mt.meta_train(tiny.FNS, phi, ops, pairs, cfg, progress=False)
    assert [h["step"] for h in res.history] == list(range(1, 7))  # 10 training pairs // 4 = 2 steps per epoch
    assert [v["step"] for v in res.validation] == [0, 2, 4, 6]
    best = max(res.validation, key=lambda v: (v["acc"], -v["nll"]))
    assert res.best_step == best["step"]
    assert all(np.isfinite(h["outer_loss"]) and h["finite"] == 1.0 for h in res.history)
    skip = mt.meta_train(tiny.FNS, phi, ops, pairs, mt.MetaTrainConfig(
        epochs=3, meta_batch=4, val_size=0, skip_first=True, max_steps=3, meta=cfg.meta), progress=False)
    assert len(skip.history) == 3 and skip.validation == [] and skip.best_step == 3
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), skip.phi, phi)
    assert any(jax.tree.leaves(changed))


def test_checkpoint_rule_prefers_accuracy_then_nll_then_earliest():
    a = {"step": 10, "acc": 0.5, "nll": 2.0}
    assert mt._better(a, None)
    assert mt._better({"step": 20, "acc": 0.6, "nll": 9.0}, a)
    assert mt._better({"step": 20, "acc": 0.5, "nll": 1.0}, a)
    assert not mt._better({"step": 20, "acc": 0.5, "nll": 2.0}, a)  # a tie keeps the earlier step


def test_config_checks():
    with pytest.raises(ValueError, match="pair_chunk"):
        mt.MetaTrainConfig(meta_batch=6, meta=MetaConfig(pair_chunk=4))
    with pytest.raises(ValueError, match="val_batch"):
        mt.MetaTrainConfig(val_batch=0)
