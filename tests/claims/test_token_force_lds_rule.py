"""The verdict rule of ``token-force.attribution-lds`` on small synthetic LDS records: every verdict it can give, and
the registry row reading the real record when it is there."""

import pathlib

import pytest

from cfka_jax.claims.papers import token_force
from cfka_jax.claims.papers import token_force_rules as r
from cfka_jax.claims.results import Record, load_records

RESULTS = pathlib.Path(__file__).parents[2] / "results"
CLAIM = {c.id: c for c in token_force.CLAIMS}["token-force.attribution-lds"]
METHODS = ("random", "ch1", *r.LDS_GRADIENT)


def _record(lds: dict, wall: dict, seeds=(0, 1, 2)) -> Record:
    """Rows of ``cfka geometry lds``: per seed and method its LDS (``lds[m][i]`` at seed i) and wall seconds."""
    rows = [{"method": m, "seed": s, "lds": lds[m][i], "wall_s": wall[m][i], "cpu_s": wall[m][i]}
            for i, s in enumerate(seeds) for m in METHODS]
    prov = {"commit": "0" * 40, "command": "cfka geometry lds", "config": {}, "seeds": list(seeds),
            "pt_replicates": [], "machine": "m", "date": "d", "wall_s": 1.0, "cpu_s": 1.0}
    return Record(r.LDS, "produced", prov, {"model": "m"}, tuple(rows))


def _judge(lds, wall, seeds=(0, 1, 2)):
    return CLAIM.rule({r.LDS: _record(lds, wall, seeds)})


CHEAP = {"random": [0.0] * 3, "ch1": [0.1] * 3, **{m: [1.0, 2.0, 3.0] for m in r.LDS_GRADIENT}}
RANDOM = [-0.02, 0.01, 0.03]


@pytest.mark.parametrize("ch1, gradient, wall, seeds, verdict", [
    ([0.5, 0.6, 0.55], [0.4, 0.62, 0.5], CHEAP, (0, 1, 2), "holds"),          # no method above CH1 at every seed
    ([0.5, 0.6, 0.55], [0.4, 0.62, 0.5], {**CHEAP, "exact": [0.05, 0.2, 3.0]}, (0, 1, 2), "partly"),  # not cheaper
    ([0.5, 0.6, 0.55], [0.6, 0.7, 0.6], CHEAP, (0, 1, 2), "refuted"),          # every method above CH1, every seed
    ([0.02, -0.01, 0.0], [0.6, 0.7, 0.6], CHEAP, (0, 1, 2), "not reproduced"),  # CH1 inside random's range
    ([0.5, 0.6], [0.4, 0.62], {m: v[:2] for m, v in CHEAP.items()}, (0, 1), "partly"),  # 2 seeds: at most partly
])
def test_every_verdict(ch1, gradient, wall, seeds, verdict):
    n = len(seeds)
    lds = {"random": RANDOM[:n], "ch1": ch1, **{m: gradient for m in r.LDS_GRADIENT}}
    got = _judge(lds, wall, seeds)
    assert got.verdict == verdict, got
    assert "ch1" in got.ours and "wall s per seed" in got.ours


def test_below_some_gradient_methods_is_partly_and_names_them():
    lds = {"random": RANDOM, "ch1": [0.5, 0.6, 0.55], "exact": [0.7, 0.8, 0.7], "datainf": [0.4, 0.5, 0.6],
           "hyperinf": [0.45, 0.62, 0.5], "less": [0.1, 0.2, 0.1]}
    got = _judge(lds, CHEAP)
    assert got.verdict == "partly" and "below exact" in got.reason and "datainf" not in got.reason.split(";")[1]


def test_the_registry_row_reads_the_real_record():
    recs = load_records(RESULTS)
    if r.LDS not in recs:
        pytest.skip(f"{r.LDS} not produced yet")
    got = CLAIM.rule({r.LDS: recs[r.LDS]})
    assert got.verdict in ("holds", "partly", "not reproduced", "refuted") and got.ours.startswith("LDS ch1")
