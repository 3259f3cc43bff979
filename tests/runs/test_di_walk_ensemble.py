"""Tiny-port seed ensembles on the rendered theory world (``runs/world_ensemble.py``, ``cfka di-walk``)."""

import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.data.theory_text import Rendering, render
from cfka_jax.runs.world_ensemble import PortSpec, _objective_mask, train_world_ensemble
from cfka_jax.theory.world import MULTI_RELATION, make_world


def test_the_object_objective_keeps_only_object_targets():
    tokens = jnp.asarray([[3, 18, 20, 21, 22, 30, 40]], jnp.int32)
    batch = {"tokens": tokens, "target_mask": jnp.ones((1, 7), jnp.float32)}
    objects = np.arange(23, 31)
    out = _objective_mask(batch, objects, "object")
    np.testing.assert_array_equal(out["target_mask"], [[0, 0, 0, 0, 0, 1, 0]])
    assert _objective_mask(batch, objects, "all") is batch


@pytest.mark.slow
def test_members_train_apart_and_report_their_losses():
    corpus = render(make_world(MULTI_RELATION), Rendering(facts=64))
    spec = PortSpec(hidden=8, intermediate=16, steps=4, warmup=1, batch=4, log_every=2)
    ens = train_world_ensemble(spec, corpus, (0, 1), log=lambda _: None)
    assert ens.losses.shape == (2, 2) and np.isfinite(ens.losses).all() and ens.nonfinite.tolist() == [0, 0]
    a, b = (np.asarray(ens.params(e)["embed_tokens"]["embedding"][...]) for e in (0, 1))
    assert ens.final_loss().shape == (2,) and not np.allclose(a, b)  # different seeds, different members


@pytest.mark.parametrize("bad", [dict(attention="cosine"), dict(objective="span"), dict(seq_len=1),
                                 dict(layers=0), dict(warmup=10, steps=5)])
def test_bad_port_specs_are_refused(bad):
    with pytest.raises(ValueError):
        PortSpec(**bad)
