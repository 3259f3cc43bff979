"""The verdict rule of cfka.di-walk (``claims/papers/cfka_walk_rules.py``) on hand-made records."""

from cfka_jax.claims.papers import cfka_walk_rules as walk
from cfka_jax.claims.results import PRODUCED_KEYS, Record

PROVENANCE = {k: "x" for k in PRODUCED_KEYS}


def _rec(steps):
    rows = []
    for index, name, values in steps:
        for seed, p in enumerate(values):
            rows.append({"step": index, "name": name, "seed": seed, "pearson": p, "pearson_lo": p - 0.05,
                         "pearson_hi": p + 0.05})
    return {walk.WALK: Record(walk.WALK, "produced", PROVENANCE, {}, tuple(rows))}


THEORY = ("0", "theory", [-0.9, -0.9, -0.9])


def test_the_first_step_not_held_by_every_seed_is_named():
    j = walk.di_walk(_rec([THEORY, ("1", "1L-linear", [-0.85, -0.82, -0.9]), ("2a", "2L-linear", [-0.85, -0.7, -0.9]),
                           ("3", "softmax", [-0.9, -0.9, -0.9])]))
    assert j.verdict == "partly" and "step 2a (2L-linear)" in j.reason and "1 (1L-linear)" in j.reason
    assert "2a 2L-linear -0.90…-0.70" in j.ours.replace("+", "")


def test_no_port_holding_it_refutes_and_all_holding_holds():
    j = walk.di_walk(_rec([THEORY, ("1", "1L-linear", [-0.85, -0.5, -0.9]), ("6", "biography", [0.5])]))
    assert j.verdict == "refuted" and "step 1 (1L-linear)" in j.reason
    assert walk.di_walk(_rec([THEORY, ("1", "1L-linear", [-0.85, -0.81, -0.9])])).verdict == "holds"


def test_an_anchor_that_fails_or_too_few_seeds_decide_nothing():
    assert walk.di_walk(_rec([("0", "theory", [-0.9, -0.7, -0.9])])).verdict == "not tested"
    assert walk.di_walk(_rec([THEORY, ("1", "1L-linear", [-0.9, -0.9])])).verdict == "not tested"
