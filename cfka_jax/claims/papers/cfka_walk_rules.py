"""The verdict rule of ``cfka.di-walk``: the step at which the Diversity Index law stops holding on the walk from the
single-layer theory model to the Biography ports (``cfka di-walk``, record ``cfka/di_walk``).

The record's rows are one per (step, seed), in walk order. A step *holds* the law when every seed's Pearson
(DI, attention) is at or below −0.8, and holds it *firmly* when every seed's 95 % bootstrap interval (over token
types) lies at or below −0.8. The walk breaks at the first step that does not hold it. The verdict on the paper's
statement (the law carries over to multi-layer LMs):

* ``holds``: every step holds it, the Biography ports included;
* ``partly``: some step breaks it, and some port (a multi-layer LM on the theory's world) holds it;
* ``refuted``: the theory model holds it and no port step does, nor the Biography ports;
* ``not tested``: the theory model itself (the anchor) does not hold it, or a step has fewer than 3 seeds.
"""

from __future__ import annotations

from cfka_jax.claims.verdicts import Judgement, not_tested

WALK = "cfka/di_walk"
LAW = -0.8
MIN_SEEDS = 3


def _steps(rows) -> list[tuple[str, str, list]]:
    """(index, name, rows) per step, in the record's (walk) order."""
    order: dict[str, list] = {}
    for r in rows:
        order.setdefault(r["name"], []).append(r)
    return [(rs[0]["step"], name, rs) for name, rs in order.items()]


def _shown(index: str, name: str, rs) -> str:
    p = [r["pearson"] for r in rs]
    spread = f"{min(p):+.2f}…{max(p):+.2f}" if len(p) > 1 else f"{p[0]:+.2f} [{rs[0]['pearson_lo']:+.2f}, " \
                                                                f"{rs[0]['pearson_hi']:+.2f}]"
    return f"{index} {name} {spread}"


def di_walk(records) -> Judgement:
    """The first step of the walk at which Pearson ≤ −0.8 is no longer held by every seed (module docstring)."""
    steps = _steps(records[WALK].rows)
    ours = "; ".join(_shown(*s) for s in steps)
    few = [name for _, name, rs in steps if name != "biography" and len(rs) < MIN_SEEDS]
    if few:
        return not_tested(f"steps with fewer than {MIN_SEEDS} seeds: {', '.join(few)}")
    held = {name: all(r["pearson"] <= LAW for r in rs) for _, name, rs in steps}
    firm = {name: all(r["pearson_hi"] <= LAW for r in rs) for _, name, rs in steps}
    if not held.get("theory", False):
        return Judgement("not tested", "the theory model itself (step 0) does not hold Pearson ≤ −0.8 on every seed",
                         ours)
    broken = [k for k, (_, name, _) in enumerate(steps) if not held[name]]
    if not broken:
        return Judgement("holds", "every step of the walk holds Pearson ≤ −0.8 on every seed"
                         + ("" if all(firm.values()) else " (not every interval)"), ours)
    index, name, _ = steps[broken[0]]
    kept = [f"{i} ({n})" for i, n, _ in steps if held[n] and not n.startswith("theory")]
    where = f"the law breaks at step {index} ({name})"
    if not kept:
        return Judgement("refuted", f"{where}: no port and not the Biography ports hold Pearson ≤ −0.8 on every "
                                    f"seed; the theory model does" + (" (every seed's interval)" if firm["theory"]
                                                                       else ""), ours)
    return Judgement("partly", f"{where}; held on every seed by the port steps {', '.join(kept)}", ours)
