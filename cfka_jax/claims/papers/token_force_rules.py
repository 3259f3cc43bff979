"""The verdict rules of the token-force paper's empirical claims (``token_force.py`` registers them), and the
spread rule for sides the docs publish only as mean ± std.

Most multi-seed studies in docs/geometry.md are published as mean ± std over the seeds, not per seed. The spread
rule of ``claims/verdicts.py`` needs the seeds' range; from mean ± std over n runs we know it only within bounds
(:class:`Summary`): every run lies within mean ± σ·√(n−1), and the range covers at least mean ± σ/√(n−1) (σ the
population std). Two sides are *apart* when even the widest ranges do not overlap, *overlap* when even the
narrowest do, and *open* otherwise (the direction counts, the spread cannot be read). A claim made of several
comparisons is judged by :func:`overall`: every comparison apart in the paper's direction (and of its size):
holds; every one apart the other way: refuted; every one in the paper's direction but not all apart, or some
apart: partly; else not reproduced. One run on a side is never apart, so a one-seed record gives at most
``partly``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from cfka_jax.claims.results import Record
from cfka_jax.claims.verdicts import Gap, Judgement, Paired, gap, paired, spread

COST_V, COST_D = "token-force/attribution_cost_vocab151936", "token-force/attribution_cost_d512"
IDENT, IDENT_P = "token-force/identification_qwen", "token-force/identification_pythia"
"""The identification benchmark per port (``cfka geometry attribution --seeds --record``)."""
XLING, SELECT = "token-force/crosslingual", "token-force/select"
ENERGY, ENERGY_KEPT = "token-force/energy_all", "token-force/energy_kept"
"""Energy masking normalised by all supervised tokens (with plain SFT and the base rows) and by the kept ones."""
ERO1, ERO3, PRED = "token-force/erosion_lr1e-3", "token-force/erosion_lr3e-4", "token-force/erosion_prediction"
ERO_GRADED = "token-force/erosion_graded"
"""The graded-similarity world (``cfka geometry erosion --study graded --record erosion_graded``): subject s shares
a nested fraction f_s of the new task's cue, so erosion differs by subject by construction."""
GRADED_PREMISE = -0.5
"""A seed's graded world grades erosion when ρ(similarity, Δlog P(A..D)) ≤ this (over its 8 subjects)."""
CUES, COLL = "token-force/cues", "token-force/collision_tokens"
COLD, COLD_BASE = "token-force/coldstart_random", "token-force/coldstart_base"
"""The cold start from the random initialisation (lr 1e-3) and from the synthetic base model (lr 1e-4)."""
T_BIO, T_OOD = "token-force/transmission_biography", "token-force/transmission_ood"
T_OOD_KNOWN = "token-force/transmission_ood_known"
"""The out-of-domain study with the identification tasks made learnable (``--ident-rule map --ident-classes 3``):
the base model knows all three tasks before CPT, so every task enters the rules."""
"""The Biography transmission study (transcribed, one seed) and the out-of-domain one (produced by ``cfka geometry
transmission --world ood --record transmission_ood``; its rules are in ``token_force_transmission.py``)."""
LOOP = "token-force/loop_ood"
"""Rounds of a CPT block then SFT on the known task, chained through the SFT'd model, beside the same CPT blocks
alone (``cfka geometry loop --world ood --record loop_ood``; rules in ``token_force_transmission.py``)."""
TAUS = (1.8, 1.5, 1.0)


# ------------------------------------------------------------------------------------------------- the spread, bounded

@dataclasses.dataclass(frozen=True)
class Summary:
    """One side published as mean ± std over ``n`` runs (``ddof`` 0 or 1; None when the docs do not say)."""

    mean: float
    std: float
    n: int
    ddof: int | None = 0

    def _pop_std(self, widest: bool) -> float:
        shrink = math.sqrt((self.n - 1) / self.n)  # population std of a ddof-1 std
        if self.ddof == 0:
            return self.std
        if self.ddof == 1:
            return self.std * shrink
        return self.std if widest else self.std * shrink

    def possible(self) -> tuple[float, float]:
        """The interval every run lies in: |x − mean| ≤ σ·√(n − 1) (σ the population std)."""
        w = self._pop_std(True) * math.sqrt(self.n - 1)
        return self.mean - w, self.mean + w

    def certain(self) -> tuple[float, float]:
        """An interval the runs' range surely covers: min ≤ mean − σ/√(n − 1), max ≥ mean + σ/√(n − 1)."""
        w = self._pop_std(False) / math.sqrt(self.n - 1)
        return self.mean - w, self.mean + w

    def show(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f} (n={self.n})" if self.n > 1 else \
            f"{self.mean:.{digits}f} (n=1)"


def summary(row: Mapping, metric: str, n_key: str = "n_seeds") -> Summary:
    """``metric`` ± ``metric_std`` of a row, over its ``n_seeds`` runs, with its ``ddof``."""
    return Summary(float(row[metric]), float(row.get(metric + "_std") or 0.0), int(row[n_key]), row.get("ddof", 0))


@dataclasses.dataclass(frozen=True)
class Cmp:
    """One comparison of a claim: ``diff`` > 0 is the paper's direction; ``state`` apart / overlap / open / one run;
    ``size`` the paper's difference where a claim has one."""

    label: str
    diff: float
    state: str
    shown: str
    size: float | None = None

    def __post_init__(self):
        if self.state not in ("apart", "overlap", "open", "one run"):
            raise ValueError(f"comparison state {self.state!r}")


STATES = {"apart": "apart", "overlap": "ranges overlap", "open": "mean ± std cannot separate them",
          "one run": "one run: spread unknown"}
POINT_STATES = {"apart": "apart from {p}", "overlap": "its range holds {p}", "open": "mean ± std cannot separate it "
                "from {p}", "one run": "one run: spread unknown"}


def _disjoint(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] < b[0] or b[1] < a[0]


def vs_summaries(label: str, a: Summary, b: Summary, *, size: float | None = None, digits: int = 3) -> Cmp:
    """"``a`` above ``b``" for two published mean ± std sides (see the module docstring)."""
    if min(a.n, b.n) < 2:
        state = "one run"
    elif _disjoint(a.possible(), b.possible()):
        state = "apart"
    elif not _disjoint(a.certain(), b.certain()):
        state = "overlap"
    else:
        state = "open"
    return Cmp(label, a.mean - b.mean, state, f"{label}: {a.show(digits)} vs {b.show(digits)} ({STATES[state]})", size)


def vs_point(label: str, a: Summary, point: float, *, sign: int = 1, digits: int = 3) -> Cmp:
    """``sign`` · (``a`` − ``point``) > 0, for a published side against a fixed value (0, chance)."""
    if a.n < 2:
        state = "one run"
    else:
        (lo, hi), (clo, chi) = a.possible(), a.certain()
        state = "apart" if not lo <= point <= hi else ("overlap" if clo <= point <= chi else "open")
    where = POINT_STATES[state].format(p=f"{point:g}")
    return Cmp(label, sign * (a.mean - point), state, f"{label}: {a.show(digits)} ({where})")


def vs_values(label: str, values: Sequence[float], point: float, *, digits: int = 2) -> Cmp:
    """Runs' values against a fixed value: apart when ≥ 2 runs all lie on one side."""
    vals = [float(v) for v in values]
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        state = "one run"
    else:
        state = "apart" if all(v > point for v in vals) or all(v < point for v in vals) else "overlap"
    where = POINT_STATES[state].format(p=f"{point:g}")
    return Cmp(label, mean - point, state, f"{label}: " + " / ".join(f"{v:+.{digits}f}" for v in vals) + f" ({where})")


def vs_runs(label: str, g: Gap | Paired, *, size: float | None = None, digits: int = 3) -> Cmp:
    """A :func:`gap` or :func:`paired` comparison (``a`` above ``b`` is the paper's direction)."""
    state = {True: "apart", False: "overlap", None: "one run"}[g.apart]
    return Cmp(label, g.diff, state, f"{label}: {g.show(digits)}", size)


def overall(cmps: Sequence[Cmp], claim: str, note: str = "") -> Judgement:
    """The verdict over a claim's comparisons (see the module docstring); ``ours`` lists every comparison."""
    n = len(cmps)
    if not n:
        raise ValueError(f"{claim}: no comparison")
    up = [c for c in cmps if c.state == "apart" and c.diff > 0]
    down = [c for c in cmps if c.state == "apart" and c.diff < 0]
    small = [c for c in up if c.size is not None and c.diff < c.size]
    tail = f" ({note})" if note else ""
    ours = "; ".join(c.shown for c in cmps)
    every = "" if n == 1 else f" in all {n} comparisons"
    if len(up) == n and not small:
        return Judgement("holds", f"{claim}: beyond the spread{every}" + tail, ours)
    if len(up) == n:
        which = "" if n == 1 else f" ({len(small)} of {n})"
        return Judgement("partly", f"{claim}: beyond the spread, but smaller than the paper's difference{which}"
                         + tail, ours)
    if len(down) == n:
        return Judgement("refuted", f"{claim}: the other way round, beyond the spread{every}" + tail, ours)
    if all(c.diff > 0 for c in cmps):
        where = f" ({STATES[cmps[0].state]})" if n == 1 else f" in all {n} comparisons, beyond the spread in {len(up)}"
        return Judgement("partly", f"{claim}: in the paper's direction{where}" + tail, ours)
    if up:
        return Judgement("partly", f"{claim}: beyond the spread in {len(up)} of {n} comparisons, not in the "
                                   "others" + tail, ours)
    k = sum(c.diff > 0 for c in cmps)
    return Judgement("not reproduced", f"{claim}: in the paper's direction in {k} of {n} comparisons, none beyond "
                                       "the spread" + tail, ours)


MIN_SEEDS = 3
"""Seeds a verdict beyond ``partly`` (or ``not reproduced``) needs (:func:`capped`)."""


def capped(j: Judgement, n_seeds: int, what: str = "seeds") -> Judgement:
    """``holds`` → ``partly`` and ``refuted`` → ``not reproduced`` below :data:`MIN_SEEDS` seeds (``what`` names
    the seeds counted, e.g. the graded ones)."""
    if n_seeds >= MIN_SEEDS or j.verdict not in ("holds", "refuted"):
        return j
    weaker = "partly" if j.verdict == "holds" else "not reproduced"
    return Judgement(weaker, f"{n_seeds} of the {MIN_SEEDS} {what} a verdict needs; " + j.reason, j.ours)


def joined(records: Mapping[str, Record], names: Sequence[str]) -> Record:
    """The rows of the records ``names`` present in ``records`` as one record (the first one's name, origin and
    provenance, with the seeds every one of them holds): a study run as several commands read as one table."""
    recs = [records[n] for n in names if n in records]
    if not recs:
        raise KeyError(f"none of the records {', '.join(names)}")
    seeds = sorted(set.intersection(*(set(r.provenance.get("seeds") or ()) for r in recs)))
    first = recs[0]
    return Record(first.name, first.origin, {**first.provenance, "seeds": seeds}, first.regime,
                  tuple(row for r in recs for row in r.rows), first.path)


def _one(rec: Record, metric: str, **where) -> float:
    vals = rec.values(metric, **where)
    if len(vals) != 1:
        raise ValueError(f"record {rec.name}: {len(vals)} rows with {metric!r} where {where}, expected one")
    return vals[0]


# --------------------------------------------------------------------------------------------- attribution (§4, §10)

def _identification(method: str, floor: float = 0.99):
    """CH1 (or CH1 + CH2) AUC ≥ ``floor`` (the acceptance target) on every port and seed."""
    def rule(records: Mapping[str, Record]) -> Judgement:
        rec = joined(records, (IDENT, IDENT_P))
        rows = rec.select(method=method)
        archs = sorted({r["arch"] for r in rows}, reverse=True)
        seeds = min(rec.count("seed", method=method, arch=a) for a in archs)
        k = rows[0]["k"]

        def span(vals, digits):
            return f"{min(vals):.{digits}f}" if min(vals) == max(vals) else f"{min(vals):.{digits}f}–{max(vals):.{digits}f}"
        ours = ", ".join(f"{a} AUC {span(rec.values('auc', method=method, arch=a), 4)} / Recall@{k} "
                         f"{span(rec.values('recall', method=method, arch=a), 3)}" for a in archs) \
            + f" (range over {seeds} seed{'s' if seeds != 1 else ''}; each the mean over the test items)"
        low = sorted({f"{r['arch']} seed {r['seed']}" for r in rows if r["auc"] < floor})
        if low:
            return Judgement("not reproduced", f"{method} AUC below {floor} on " + ", ".join(low), ours)
        recall = min(r["recall"] for r in rows)
        if seeds < 2:
            return Judgement("partly", f"{method} AUC ≥ {floor} on both ports (lowest Recall@{k} {recall:.3f}); one "
                                       "seed: the seed spread is unknown", ours)
        return Judgement("holds", f"{method} AUC ≥ {floor} on every port and seed ({seeds} seeds; lowest "
                                  f"Recall@{k} {recall:.3f})", ours)
    return rule


def _forward_only(records: Mapping[str, Record]) -> Judgement:
    """Forward-only CH1 faster than exact per-example gradients in every timing run at the 151,936-entry vocabulary,
    with less memory, and identifying as well as the exact gradient product (AUC within 0.01 or above)."""
    v, ident, d = records[COST_V], joined(records, (IDENT, IDENT_P)), records[COST_D]
    wall = v.values("ratio_wall", kind="run")
    cpu = v.values("ratio_cpu", kind="run")
    floor = _one(v, "ratio_wall", kind="floor")
    feats, grads = _one(v, "forward_features_gb", kind="agreement"), v.values("exact_buffers_needed_gb", kind="run")[0]
    rho = _one(v, "spearman_exact", kind="agreement")
    d512 = _one(d, "ratio_cpu", d=512)
    archs = sorted({r["arch"] for r in ident.rows}, reverse=True)
    qual = {a: paired(ident.rows, "auc", {"arch": a, "method": "ch1"}, {"arch": a, "method": "exact"}, by=("seed",))
            for a in archs}
    seeds = ident.count("seed", method="ch1")
    ours = (f"{min(wall):.0f}–{max(wall):.0f}× wall ({min(cpu):.0f}–{max(cpu):.0f}× CPU, {len(wall)} runs; floor "
            f"{floor:.0f}×), {feats} vs {grads} GB; CH1 − exact AUC " +
            " / ".join(f"{q.diff:+.4f}" for q in qual.values()) + f" ({' / '.join(archs)}, {seeds} seed{'s' if seeds != 1 else ''})")
    faster = len(wall) >= 2 and min(wall) > 1 and min(cpu) > 1
    good = all(q.diffs.lo >= -0.01 for q in qual.values())  # CH1 within 0.01 AUC of exact, or above, every seed
    extra = (f"Spearman {rho} with the exact term on a random-init model; {d512:.0f}× CPU at d = 512 with the task "
             f"vocabulary; {floor:.0f}× against an exact side with products at the matmul peak")
    if not faster:
        return Judgement("not reproduced", "forward-only not faster than exact gradients in every run; " + extra, ours)
    if not good:
        return Judgement("partly", "faster in every run, but CH1 identifies worse than the exact product; " + extra,
                         ours)
    if seeds < 2:
        return Judgement("partly", f"faster in every run ({min(wall):.0f}× or more) with {grads / feats:.0f}× less "
                                   "memory, and CH1 identifies as well as exact gradients on one seed (spread "
                                   "unknown); " + extra, ours)
    return Judgement("holds", "faster in every run, less memory, identification as good as exact; " + extra, ours)


def _xling_row(rec: Record, score: str) -> Mapping:
    rows = [r for r in rec.select(score=score) if r.get("vocab") in ("topk_unique", None)]
    if len(rows) != 1:
        raise ValueError(f"record {rec.name}: {len(rows)} topk_unique rows for {score!r}")
    return rows[0]


def _xling_both(records: Mapping[str, Record]) -> Judgement:
    rec = records[XLING]
    both, rh, native = (summary(_xling_row(rec, s), "recall4") for s in ("ch1-ch2-inputln", "ch1", "native"))
    c = vs_summaries("top-4 item acc. CH1 + CH2 (inputln) vs CH1", both, rh, size=0.6250 - 0.4875)
    nat = vs_summaries("vs native", both, native)
    a4, a4_rh = (summary(_xling_row(rec, s), "all4") for s in ("ch1-ch2-inputln", "ch1"))
    return overall([c], "adding GH to RH raises cross-lingual top-4 accuracy",
                   f"all-4 rate {a4.show()} vs CH1 {a4_rh.mean:.3f}; against the native hidden-state baseline "
                   f"{nat.shown.split(': ', 1)[1]}")


def _xling_rh(records: Mapping[str, Record]) -> Judgement:
    rec = records[XLING]
    rh, rnd = (summary(_xling_row(rec, s), "recall4") for s in ("ch1", "random"))
    c = vs_summaries("top-4 item acc. CH1 vs random", rh, rnd, size=0.445 - 0.020)
    return overall([c], "RH alone retrieves translations above chance",
                   "the five synthetic languages share no token id")


def _selection(records: Mapping[str, Record]) -> Judgement:
    rec = records[SELECT]
    cmps = [vs_runs(f"CH1 + CH2 − {b} accuracy", paired(rec.rows, "accuracy", {"method": "ch1-ch2-inputln"},
                                                        {"method": b}, by=("seed",)), size=size)
            for b, size in (("random", 0.636 - 0.610), ("less", 0.636 - 0.587))]
    g = paired(rec.rows, "accuracy", {"method": "less"}, {"method": "random"}, by=("seed",))
    order = "the paper's random > LESS is reversed here" if g.a_above else "LESS not above random beyond the spread"
    return overall(cmps, "top-5 % by CH1 + CH2 beats random and LESS", f"LESS − random {g.show(3)}: {order}")


# ------------------------------------------------------------------------------------------------ energy masking (§5)

def _mask_cost(records: Mapping[str, Record]) -> Judgement:
    """New-task accuracy lost to masking, in points, ≤ 2.6 at every τ (normalize = all)."""
    rec = joined(records, (ENERGY, ENERGY_KEPT))
    seeds = sorted({r["seed"] for r in rec.select(variant="plain", normalize="all")})
    kept_seeds = sorted({r["seed"] for r in rec.select(variant="masked", normalize="kept")} & set(seeds))

    def drop(normalize: str, s: int, t: float) -> float:
        return 100 * (_one(rec, "new_acc", variant="plain", normalize="all", seed=s)
                      - _one(rec, "new_acc", variant="masked", tau=t, normalize=normalize, seed=s))

    def span(vals) -> str:
        lo, hi = f"{min(vals):.1f}", f"{max(vals):.1f}"
        return lo if lo == hi else f"{lo}…{hi}"
    drops = {(s, t): drop("all", s, t) for s in seeds for t in TAUS}
    ok = [t for t in TAUS if all(drops[s, t] <= 2.6 for s in seeds)]
    n = f"{len(seeds)} seed" + ("s, the range over seeds" if len(seeds) > 1 else "")
    ours = "drop " + " / ".join(span([drops[s, t] for s in seeds]) for t in TAUS) + " points at τ = 1.8 / 1.5 / " \
        f"1.0 ({n}" + ("; normalize=kept " + " / ".join(span([drop("kept", s, t) for s in kept_seeds]) for t in TAUS)
                       if kept_seeds else "") + ")"
    if not ok:
        return Judgement("not reproduced", "masking costs more than 2.6 points at every τ", ours)
    if len(ok) == len(TAUS) and len(seeds) >= 2:
        return Judgement("holds", "≤ 2.6 points at every τ and seed", ours)
    where = "every τ" if len(ok) == len(TAUS) else "τ = " + " / ".join(f"{t}" for t in ok) + " only"
    return Judgement("partly", f"≤ 2.6 points at {where}" + ("; one seed: the spread is unknown"
                                                              if len(seeds) < 2 else ""), ours)


def _mask_collision(records: Mapping[str, Record]) -> Judgement:
    """The one-step collision under plain SFT above the masked one, in every study (a = plain)."""
    en, e1, e3 = joined(records, (ENERGY,)), records[ERO1], records[ERO3]
    cmps = []
    for t in TAUS:
        cmps.append(vs_runs(f"conflict world τ = {t}", gap(en.values("collision", variant="plain", normalize="all"),
                                                         en.values("collision", tau=t, normalize="all")), digits=5))
        cmps.append(vs_summaries(f"format world lr 1e-3 τ = {t}", summary(e1.select(variant="plain")[0], "collision"),
                                 summary(e1.select(tau=t)[0], "collision")))
        cmps.append(vs_runs(f"format world lr 3e-4 τ = {t}", gap(e3.values("collision", variant="plain"),
                                                               e3.values("collision", tau=t)), digits=5))
    return overall(cmps, "masking reduces the one-step collision",
                   "unpaired: the per-seed values of the 3-seed study are not in the docs")


def _mask_erosion(records: Mapping[str, Record]) -> Judgement:
    """"Masking does not reduce erosion": no τ keeps more of the old format than plain SFT beyond the spread
    (format world: P(A..D) at the end, paired at lr 3e-4, mean ± std at lr 1e-3; conflict world: the old format's
    NLL drift, one seed)."""
    en, e1, e3 = joined(records, (ENERGY,)), records[ERO1], records[ERO3]
    n_en = en.count("seed", variant="plain", normalize="all")
    en_seeds = "one seed" if n_en < 2 else f"{n_en} seeds"
    beyond, kept, drift_less, parts = [], [], [], []
    for t in TAUS:
        pair = paired(e3.rows, "pad_end", {"tau": t}, {"variant": "plain"}, by=("seed",))
        s = vs_summaries("", summary(e1.select(tau=t)[0], "pad_end"), summary(e1.select(variant="plain")[0], "pad_end"))
        drift = gap(en.values("old_nll_delta", variant="plain", normalize="all"),
                    en.values("old_nll_delta", tau=t, normalize="all"))
        (beyond if pair.a_above or (s.state == "apart" and s.diff > 0) else kept).append(t)
        if drift.diff > 0 and drift.apart is not False:  # less drift, beyond the spread or with one run a side
            drift_less.append(t)
        parts.append(f"τ = {t}: P(A..D) masked − plain " + " / ".join(f"{d:+.3f}" for d in pair.diffs.values)
                     + f" (lr 3e-4, per seed), {s.diff:+.3f} ({s.state}; lr 1e-3); conflict-world drift plain − "
                       f"masked {drift.diff:+.2f} ({en_seeds}" + ("" if drift.apart is None else
                                                         ", apart" if drift.apart else ", ranges overlap") + ")")
    ours = "; ".join(parts)
    taus = lambda ts: " / ".join(f"{t}" for t in ts)  # noqa: E731
    if len(beyond) == len(TAUS):
        return Judgement("refuted", "every τ keeps more of the old format than plain SFT beyond the spread", ours)
    if not beyond and not drift_less and min(e1.seeds, e3.seeds, n_en) >= 2:
        return Judgement("holds", "no τ keeps more of the old format beyond the spread, in either world", ours)
    why = [f"not reduced beyond the spread at τ = {taus(kept)} in the format world"] if kept else []
    if beyond:
        why.append(f"reduced beyond it at τ = {taus(beyond)}")
    if drift_less:
        why.append(f"in the conflict world the old format drifts less at τ = {taus(drift_less)} ({en_seeds})")
    return Judgement("partly", "; ".join(why), ours)


# --------------------------------------------------------------------------------- collision, erosion, format (§6)

def _collision_energy(records: Mapping[str, Record]) -> Judgement:
    rec = records[COLL]
    cmps = [vs_point(f"{r['update_cue']}/{r['probe_cue']} η={r['eta']:g}", summary(r, "spearman_e"), 0.0)
            for r in rec.rows]
    first = [r["f_first"] / r["f_other"] for r in rec.select(eta=1e-4)]
    return overall(cmps, "Spearman(E, F_avg) > 0 over the update tokens",
                   f"the first answer token collides {min(first):.1f}–{max(first):.1f}× the other answer tokens")


def _erosion_prediction_graded(records: Mapping[str, Record]) -> Judgement:
    """In the graded world, at every seed whose erosion the knob grades (ρ(similarity, Δlog P(A..D)) ≤
    :data:`GRADED_PREMISE`): ρ(seq5 total, Δlog P(A..D)) > 0 (a higher score, a smaller loss of answer mass) and
    ρ(seq5 total, non-IF) < 0, each over the seed's subjects. Below three such seeds a verdict stops at partly /
    not reproduced. The one-token world (context) is shown beside it."""
    rec = records[ERO_GRADED]

    def rho(seed, score, target):
        return _one(rec, "spearman", row="spearman", seed=seed, score=score, target=target)

    seeds = sorted({r["seed"] for r in rec.select(row="spearman")})
    premise = {s: rho(s, "similarity", "dlog_pad") for s in seeds}
    graded = [s for s in seeds if premise[s] <= GRADED_PREMISE]
    shown = "ρ(similarity, Δlog P(A..D)) per seed " + " / ".join(f"{premise[s]:+.2f}@{s}" for s in seeds)
    if not graded:
        return Judgement("not tested", f"the graded world grades erosion at no seed ({shown})")
    at = f"within seed (n=8) at the graded seeds {', '.join(map(str, graded))}"
    cmps = [vs_values(f"ρ(seq5 total, Δlog P(A..D)) {at}", [rho(s, "total", "dlog_pad") for s in graded], 0.0),
            vs_values(f"−ρ(seq5 total, non-IF) {at}", [-rho(s, "total", "non_if") for s in graded], 0.0)]
    terms = ", ".join(f"{t} " + " / ".join(f"{rho(s, t, 'dlog_pad'):+.2f}" for s in graded)
                      for t in ("ch1", "ch2_no_kembd", "h_cos"))
    note = f"premise {shown}; the terms against Δlog P(A..D): {terms}"
    if PRED in records:
        old = records[PRED].values("spearman", markers="canonical", target="dlog_pad", score="total", pooled=None)
        note += ("; not deciding it, the one-token world (no grading): " + " / ".join(f"{v:+.2f}" for v in old))
    return capped(overall(cmps, "the pre-finetuning seq5 score ranks subjects by how much they erode", note),
                  len(graded), "graded seeds")


def _isolation(records: Mapping[str, Record]) -> Judgement:
    e1, e3 = records[ERO1], records[ERO3]
    cmps = []
    for metric in ("pad_end", "canonical_end"):
        cmps.append(vs_runs(f"{metric} isolated − plain, lr 3e-4", paired(e3.rows, metric, {"variant": "isolated"},
                                                                         {"variant": "plain"}, by=("seed",))))
        cmps.append(vs_summaries(f"{metric} isolated vs plain, lr 1e-3", summary(e1.select(variant="isolated")[0],
                                                                                metric),
                                 summary(e1.select(variant="plain")[0], metric)))
    new = paired(e3.rows, "new_acc", {"variant": "isolated"}, {"variant": "plain"}, by=("seed",))
    return overall(cmps, "P / R markers keep more of the old format than Q / ANS",
                   f"new-task accuracy isolated − plain {new.diff:+.3f} at lr 3e-4; every variant's P(A..D) "
                   "collapses first and partly recovers")


def _cue_specific(records: Mapping[str, Record]) -> Judgement:
    """Format loss larger on the matching eval cue: the old format kept on the other cue (a) above the matching
    one (b), per learning rate, train cue and metric."""
    rec = records[CUES]
    cmps = []
    for lr in sorted({r["lr"] for r in rec.rows}, reverse=True):
        for train, other in (("qa", "pr"), ("pr", "qa")):
            for metric in ("canonical", "pad"):
                a = summary(rec.select(lr=lr, train_cue=train, eval_cue=other)[0], metric)
                b = summary(rec.select(lr=lr, train_cue=train, eval_cue=train)[0], metric)
                cmps.append(vs_summaries(f"lr {lr:g} train {train} {metric} other vs same cue", a, b))
    return overall(cmps, "format loss larger when the eval cue matches the train cue")


# ------------------------------------------------------------------------------------ cold start (§8; §7 is in
# token_force_transmission.py)

def _cold_start(records: Mapping[str, Record]) -> Judgement:
    """Sign agreement of B and C near chance (≤ 0.6) at the random initialisation and ≥ 0.9 within 200 warm-up
    steps (twice the paper's ~100), at every seed."""
    rec = joined(records, (COLD, COLD_BASE))
    seeds = sorted({r["seed"] for r in rec.select(start="random")})
    traj = {(s, k): {r["step"]: r[k] for r in rec.select(start="random", seed=s)} for s in seeds
            for k in ("sign_b", "sign_c")}
    ok = [all(t[0] <= 0.6 and max(v for step, v in t.items() if step <= 200) >= 0.9
              for (s, _), t in traj.items() if s == seed) for seed in seeds]

    def span(vals) -> str:
        lo, hi = f"{min(vals):.3f}", f"{max(vals):.3f}"
        return lo if lo == hi else f"{lo}–{hi}"

    def path(start: str, key: str) -> str:
        steps = sorted({r["step"] for r in rec.select(start=start)})
        return " → ".join(f"{span(rec.values(key, start=start, step=t))}@{t}" for t in steps)
    ours = "; ".join(f"{k[-1].upper()} {path('random', k)}" for k in ("sign_b", "sign_c")) \
        + (f" (range over {len(seeds)} seeds)" if len(seeds) > 1 else "")
    base_seeds = rec.count("seed", start="base")
    note = (f"from the (not cold) base model C {path('base', 'sign_c')}" + (f" ({base_seeds} seeds)" if base_seeds > 1
                                                                            else "")) if base_seeds else ""
    if not any(ok):
        return Judgement("not reproduced", "the sign does not recover from near chance within 200 steps; " + note, ours)
    if not all(ok):
        return Judgement("partly", f"recovers at {sum(ok)} of {len(seeds)} seeds; " + note, ours)
    if len(seeds) < 2:
        return Judgement("partly", "near chance at initialisation, ≥ 0.9 within 200 steps; one seed: the spread is "
                                   "unknown; " + note, ours)
    return Judgement("holds", "near chance at initialisation, ≥ 0.9 within 200 steps at every seed; " + note, ours)


# ------------------------------------------------------------------------- attribution against retraining (LDS)

LDS = "token-force/lds_small"
"""The linear datamodeling score of every method against retrained subsets (``cfka geometry lds --record``)."""
LDS_GRADIENT = ("exact", "datainf", "hyperinf", "less")
"""The gradient methods CH1 is compared with (the exact first-order product, DataInf, HyperINF, LESS)."""


def _lds_cost(rec: Record, method: str) -> float:
    return sum(rec.values("wall_s", method=method)) / rec.count("seed", method=method)


def _lds_replaces_gradients(records: Mapping[str, Record]) -> Judgement:
    """CH1's LDS against each gradient method's, seed by seed (:func:`paired`), CH1 above random beyond the spread
    (:func:`gap`), and CH1 cheaper than each gradient method at every seed; ``holds`` needs ≥ 3 seeds, no gradient
    method above CH1 beyond the spread and CH1 cheaper everywhere; CH1 below every gradient method beyond the
    spread refutes "as well as"."""
    rec = records[LDS]
    seeds = rec.count("seed", method="ch1")
    lds = {m: spread(rec.values("lds", method=m)) for m in ("ch1", "random", *LDS_GRADIENT)}
    floor = gap(lds["ch1"].values, lds["random"].values)
    worse = {m: paired(rec.rows, "lds", {"method": m}, {"method": "ch1"}, by=("seed",)) for m in LDS_GRADIENT}
    cost = {m: paired(rec.rows, "wall_s", {"method": m}, {"method": "ch1"}, by=("seed",)) for m in LDS_GRADIENT}
    below = [m for m, g in worse.items() if g.a_above]
    above = [m for m, g in worse.items() if g.b_above]
    dearer = [m for m, g in cost.items() if not (g.apart and g.diff > 0)]
    ours = ("LDS " + ", ".join(f"{m} {lds[m].show(3)}" for m in lds) + "; wall s per seed "
            + ", ".join(f"{m} {_lds_cost(rec, m):.3g}" for m in ("ch1", *LDS_GRADIENT)))
    ratio = ", ".join(f"{m} {_lds_cost(rec, m) / max(_lds_cost(rec, 'ch1'), 1e-9):.1f}×" for m in LDS_GRADIENT)
    tail = f"cost relative to CH1: {ratio}"
    if not floor.a_above:
        return Judgement("not reproduced", f"CH1's LDS is not above random scores beyond the spread; {tail}", ours)
    if len(below) == len(LDS_GRADIENT):
        return Judgement("refuted", "every gradient method predicts retraining better than CH1 (LDS, every seed); "
                                    + tail, ours)
    if below or dearer or seeds < 3:
        parts = ([f"below {', '.join(below)} beyond the spread"] if below else []) + \
                ([f"not cheaper than {', '.join(dearer)} at every seed"] if dearer else []) + \
                ([f"{seeds} seed{'s' if seeds != 1 else ''} (3 needed)"] if seeds < 3 else [])
        return Judgement("partly", "CH1 predicts retraining above random; " + "; ".join(parts) + f"; {tail}", ours)
    lead = f"above {', '.join(above)} at every seed" if above else "above none of them at every seed"
    return Judgement("holds", f"CH1's LDS is not below any gradient method beyond the spread ({seeds} seeds; {lead}) "
                              f"and it is cheaper than each at every seed; {tail}", ours)
