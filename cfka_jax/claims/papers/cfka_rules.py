"""The verdict rules of the cFKA / STOC paper's empirical claims (the registry is ``cfka.py``).

Every rule reads the records ``cfka.py`` names for it (``results/cfka/*.json``) and judges the paper's statement
with the spread rule of ``claims/verdicts.py``. Five shapes beyond "a above b" recur here:

* **Regimes** (:func:`regimes`): one statement tested in several worlds, doses or PT models. ``holds`` only when it
  holds in every regime; ``partly`` when it holds (or holds in direction) in some; ``refuted`` only when refuted
  in every one; otherwise ``not reproduced``. The reason names every regime with its verdict.
* **Two-seed cells given as mean (min–max)** are stored as rows with ``seed`` ``lo`` / ``hi``: the two seeds'
  values of each metric, with the seed unknown. They enter :func:`verdicts.gap` (unpaired), never
  :func:`verdicts.paired`; :func:`pairs` keeps only rows whose seed is an integer.
* **One run against a measured seed range** (:func:`against_floor`): where a setting was run once but the same
  preset has a seed replicate, a one-run difference no larger than that replicate's range is inside the spread
  (``not reproduced``); a larger one in the paper's direction is ``partly`` (one run).
* **"About equal"** (:func:`similar`): the paper's "≈" statements are held to the paper's own largest difference
  between the rows it calls equal, :data:`PAPER_TOL`.
* **Two records of one set of PT models** (:func:`joined`): runs of two studies (the same PT folders, another
  update or α) pair on (pt, seed) only when both records give the same PT quality for every PT label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from cfka_jax.claims.results import Record
from cfka_jax.claims.verdicts import Gap, Judgement, Paired, Spread, gap, ordered, paired, spread

R600, R600X4, R150, R150X16 = ("cfka/stoc_names600", "cfka/stoc_names600x4", "cfka/stoc_names150",
                               "cfka/stoc_names150x16")
SMALL, SCALE, INTERF = "cfka/stoc_small", "cfka/stoc_scale", "cfka/stoc_interfered"
PTS, BIO, STREAMS = "cfka/pt_models", "cfka/biography_small", "cfka/streams_small"
BIO_BPE = "cfka/biography_small_bpe"
R150S3 = "cfka/stoc_names150_s3"
SMALL_S3 = "cfka/stoc_small_s3"
"""The small preset (default name pools, word-level Qwen port) at α 0.5, full update: STOC, Random, LAMOL and naive
on PT replicates s0, s1 × CPT seeds 0–2 (produced; rows pair on (pt, seed)). The transcribed :data:`SMALL` (one PT
model) keeps the α × update grid and the ablations, shown as context."""
BIO_REAL = "cfka/biography_small_real"
"""Real replay 'all' (α 0.5, full) of the Biography table on :data:`SMALL_S3`'s PT models and CPT seeds (``cfka
bio-table --pt-root``; the shared PT models are checked by :func:`joined` through ``regime.pt_quality``)."""
SMALL_F67 = "cfka/stoc_small_freeze067_s3"
""":data:`SMALL_S3`'s PT models and seeds at α 0.67 with the input embedding (tied head) and block 0 frozen: STOC,
Random and LAMOL (the paper's freeze row)."""
SMALL_F90 = "cfka/stoc_small_freeze09_s3"
"""The same at α 0.9 (10 % replay): STOC and LAMOL (the paper's α 0.9 freeze row has no Random) and naive CPT under
the same freeze."""
LORA150 = "cfka/stoc_lora150_s3"
FREEZE150 = "cfka/stoc_freeze150_s3"
"""names150 1× on the Pythia port with a 1,024-entry BPE tokenizer, input embedding and first block frozen, α 0.67:
one PT replicate (s0) × CPT seeds 0–2, STOC, Random and LAMOL on the same seeds (rows pair on (pt, seed))."""
"""names150 1× with a LoRA update (rank 16) on :data:`R150S3`'s PT replicate s0 and CPT seeds: the same PT model,
replay corpora and data order as its full-update runs, so the two pair run by run."""
"""names150 at 1× on PT replicates s0, s1 × CPT seeds 0, 1, 2 (produced; rows pair on (pt, seed)); the transcribed
:data:`R150` keeps the 4× cells (two seeds, lo/hi rows)."""
STREAMS_2SEED = "cfka/streams_small_2seed"
"""The transcribed 3-stage stream table (one PT model, lo/hi rows of two seeds): the streams not re-run in
``cfka/streams_small`` (generative replay, GPM, the replay × peak grid)."""
"""The freeze cell beside the full update on one BPE tokenizer (Pythia port): no frozen embedding of a new name."""
BIO_LORA_LR = "cfka/biography_lora_lr"
"""The Biography LoRA cell at CPT learning rates × 3 and × 10 (row factor ``lr_scale``), from the PT models and CPT
seeds of ``cfka/biography_small`` (``cfka bio-table --lora-lr-scales --pt-root``)."""
DI_TRAINED, DI_EARLY, AUG1 = "cfka/di_attention_trained", "cfka/di_attention_early", "cfka/aug1"
LOHI = ["lo", "hi"]
GAP_RANDOM = 33.8
"""The paper's STOC − Random Original sFTA (51.54 − 17.68, Pythia-160M, α 0.5, full)."""
GAP_LAMOL = 31.6
"""The paper's STOC − LAMOL Original sFTA (51.54 − 19.90)."""
GAP_F67_RANDOM, GAP_F67_LAMOL = 32.8, 32.1
"""The paper's α 0.67 freeze gaps: STOC 53.80 − Random 21.02, − LAMOL 21.69."""
GAP_F90_LAMOL = 21.7
"""The paper's α 0.9 freeze gap STOC 40.54 − LAMOL 18.88 (its α 0.9 row has no Random)."""
GAP_EM = 26.7
"""The paper's STOC − Random Original EM (29.84 − 3.14)."""
GAP_EM_LAMOL = 23.9
"""The paper's STOC − LAMOL Original EM (29.84 − 5.95)."""
PAPER_TOL = 2.3
"""What the paper treats as equal: its largest difference between rows it calls alike (LAMOL − Random 2.22
Original sFTA; STOC − LAMOL 2.11 Continual sFTA), plus 0.1 for the one-decimal rounding of our numbers."""
THEORY_REGIME = 0.7
"""Held-out sFTA a port needs before the theory's statements about trained LMs apply (docs/theory_vs_lms.md)."""
EPS = 1e-6
"""Slack for comparing one-decimal transcribed numbers (their differences carry float error)."""
_RANK = {"holds": 0, "partly": 1, "not reproduced": 2, "refuted": 3, "not tested": 4}


@dataclasses.dataclass(frozen=True)
class Part:
    """One regime of a claim: its label, its judgement and the numbers shown for it."""

    label: str
    judgement: Judgement
    shown: str


def _why(j: Judgement) -> str:
    return j.reason.split(": ", 1)[-1]


def regimes(claim: str, parts: Sequence[Part]) -> Judgement:
    """One verdict over several regimes (module docstring); the reason names each regime's verdict and why."""
    v = [p.judgement.verdict for p in parts]
    if all(x == "holds" for x in v):
        verdict = "holds"
    elif any(x in ("holds", "partly") for x in v):
        verdict = "partly"
    elif all(x == v[0] for x in v):
        verdict = v[0]
    else:
        verdict = "not reproduced"
    reason = f"{claim} — " + "; ".join(f"{p.label}: {p.judgement.verdict} ({_why(p.judgement)})" for p in parts)
    return Judgement(verdict, reason, "; ".join(f"{p.label} {p.shown}" for p in parts))


def brief(g: Gap | Paired) -> str:
    """The numbers of a comparison, short: 'a vs b' for a gap, the mean and range of the differences for pairs."""
    if isinstance(g, Gap):
        return f"{g.a.show()} vs {g.b.show()}"
    return f"{g.diff:+.1f} ({g.diffs.lo:+.1f} … {g.diffs.hi:+.1f}, {g.diffs.n} pair{'s' * (g.diffs.n > 1)})"


def part(label: str, g: Gap | Paired, claim: str, size: float | None = None) -> Part:
    """``ordered`` on one regime's comparison."""
    return Part(label, ordered(g, claim=claim, size=size), brief(g))


def gap_of(rec: Record, metric: str, a: Mapping, b: Mapping, **common) -> Gap:
    """``metric`` of the rows selected by ``a`` against those selected by ``b`` (both within ``common``)."""
    return gap(rec.values(metric, **common, **a), rec.values(metric, **common, **b))


def pairs(rec: Record, metric: str, a: Mapping, b: Mapping, by: tuple[str, ...] = ("pt", "seed"),
          **common) -> Paired:
    """Run-by-run differences over the rows of one seed each (integer ``seed``; lo/hi and mean rows are left out)."""
    rows = [r for r in rec.select(**common) if isinstance(r.get("seed"), int)]
    return paired(rows, metric, dict(a), dict(b), by=by)


def seed_range(rec: Record, metric: str, kinds: Sequence[str], **where) -> float:
    """The widest seed range of ``metric`` over ``kinds`` in one setting (the spread a one-run difference meets)."""
    widths = []
    for kind in kinds:
        s = spread(rec.values(metric, kind=kind, **where))
        if s.n >= 2:
            widths.append(s.hi - s.lo)
    if not widths:
        raise ValueError(f"record {rec.name}: no kind of {list(kinds)} has two runs of {metric!r} where {where}")
    return max(widths)


def against_floor(claim: str, diff: float, floor: float) -> Judgement:
    """A one-run difference against the seed range ``floor`` of the same setting (module docstring)."""
    shown = f"{diff:+.1f} on one run (seed range {floor:.1f})"
    if abs(diff) <= floor + EPS:
        return Judgement("not reproduced", f"{claim}: {diff:+.1f} on one run, inside the seed range {floor:.1f} "
                                           "of the same setting", shown)
    if diff > 0:
        return Judgement("partly", f"{claim}: {diff:+.1f} on one run, beyond the seed range {floor:.1f} (spread "
                                   "of this cell unknown)", shown)
    return Judgement("not reproduced", f"{claim}: the other way round, {diff:+.1f} on one run, beyond the seed "
                                       f"range {floor:.1f}", shown)


def similar(claim: str, g: Gap | Paired, tol: float = PAPER_TOL) -> Judgement:
    """"a ≈ b": every run within ``tol`` (holds; partly with one run a side), every run beyond it (not
    reproduced), or a mean within ``tol`` whose runs are not (partly)."""
    if isinstance(g, Gap):
        worst = max(abs(g.a.hi - g.b.lo), abs(g.b.hi - g.a.lo))
        best = max(0.0, g.a.lo - g.b.hi, g.b.lo - g.a.hi)
    else:
        worst = max(abs(g.diffs.lo), abs(g.diffs.hi))
        best = min(abs(g.diffs.lo), abs(g.diffs.hi)) if g.diffs.lo * g.diffs.hi > 0 else 0.0
    if worst <= tol + EPS:
        if g.apart is None:
            return Judgement("partly", f"{claim}: within {tol} on one run (spread unknown)", brief(g))
        return Judgement("holds", f"{claim}: every run within {tol}", brief(g))
    if best > tol + EPS:
        return Judgement("not reproduced", f"{claim}: {g.diff:+.1f}, beyond {tol} on every run", brief(g))
    if abs(g.diff) <= tol + EPS:
        return Judgement("partly", f"{claim}: mean {g.diff:+.1f} within {tol}, runs up to {worst:.1f}", brief(g))
    return Judgement("not reproduced", f"{claim}: mean {g.diff:+.1f} beyond {tol}", brief(g))


# ------------------------------------------------------------------------------------------------ replay kinds

def stoc_vs_lamol(records) -> Judgement:
    """Both regimes: the shared-names worlds (LAMOL at or above STOC) and the default-pool 600-person world."""
    claim, r600, r150, r16 = "STOC above LAMOL", records[R600], records[R150], records[R150X16]
    r150s3 = records[R150S3]
    sc, sm = records[SCALE], records[SMALL_S3]
    s, l = {"kind": "stoc"}, {"kind": "lamol"}
    return regimes(claim, [
        part("w600 default pools (BPE)", gap_of(sc, "original_sfta", s, l, world="w600-bpe1024"), claim, GAP_LAMOL),
        part("names600 shared names, PT C", pairs(r600, "original_sfta", s, l, pt="C"), claim, GAP_LAMOL),
        part("names600 shared names, PT A and B (one pair each)", pairs(r600, "original_sfta", s, l, pt=["A", "B"]),
             claim, GAP_LAMOL),
        part("names150 1×", pairs(r150s3, "original_sfta", s, l), claim, GAP_LAMOL),
        part("names150 4×", gap_of(r150, "original_sfta", s, l, dose=4, seed=LOHI), claim, GAP_LAMOL),
        part("names150 16× PT C", pairs(r16, "original_sfta", s, l, pt="C"), claim, GAP_LAMOL),
        part("small BPE", gap_of(sc, "original_sfta", s, l, world="small-bpe1024"), claim, GAP_LAMOL),
        part("small word-level", pairs(sm, "original_sfta", s, l), claim, GAP_LAMOL)])


def lamol_vs_random(records) -> Judgement:
    claim, r600, r150, sc, sm = ("LAMOL ≈ Random", records[R600], records[R150], records[SCALE],
                                 records[SMALL_S3])
    r150s3 = records[R150S3]
    l, r = {"kind": "lamol"}, {"kind": "random"}
    parts = [("small word-level", pairs(sm, "original_sfta", l, r)),
             ("small BPE", gap_of(sc, "original_sfta", l, r, world="small-bpe1024")),
             ("names150 1×", pairs(r150s3, "original_sfta", l, r)),
             ("names150 4×", gap_of(r150, "original_sfta", l, r, dose=4, seed=LOHI)),
             ("names600 PT A/B/C", pairs(r600, "original_sfta", l, r)),
             ("w600 default pools (BPE)", gap_of(sc, "original_sfta", l, r, world="w600-bpe1024"))]
    return regimes(claim, [Part(lab, similar(claim, g), brief(g)) for lab, g in parts])


def _stoc_random(label, g, size=GAP_RANDOM) -> Part:
    return part(label, g, "STOC above Random", size)


def stoc_vs_random_names150(records) -> Judgement:
    """1× run by run on two PT replicates × three CPT seeds; 4× on the transcribed two seeds (lo/hi rows)."""
    r, r3 = records[R150], records[R150S3]
    s, x = {"kind": "stoc"}, {"kind": "random"}
    return regimes("STOC above Random at 150 people with shared names", [
        _stoc_random("1×", pairs(r3, "original_sfta", s, x)),
        _stoc_random("4×", gap_of(r, "original_sfta", s, x, dose=4, seed=LOHI))])


def stoc_vs_random_16x(records) -> Judgement:
    r = records[R150X16]
    s, x = {"kind": "stoc"}, {"kind": "random"}
    return regimes("STOC above Random at 16× the dose", [
        _stoc_random("PT B", gap_of(r, "original_sfta", s, x, pt="B", seed=LOHI)),
        _stoc_random("PT C", pairs(r, "original_sfta", s, x, pt="C"))])


def stoc_vs_random_names600x4(records) -> Judgement:
    """With ≥ 3 (PT, seed) pairs at 4× (a produced record of the replicate study) the pairs decide; with the one
    transcribed run, its difference is judged against the 1× seed range of the same PT model."""
    x4, x1 = records[R600X4], records[R600]
    many = [r for r in x4.rows if isinstance(r.get("seed"), int)]
    if len({(r.get("pt"), r["seed"]) for r in many}) >= 3:
        return ordered(pairs(x4, "original_sfta", {"kind": "stoc"}, {"kind": "random"}),
                       claim="STOC above Random at names600x4 on every PT model and seed", size=GAP_RANDOM)
    diff = x4.values("original_sfta", kind="stoc")[0] - x4.values("original_sfta", kind="random")[0]
    floor = seed_range(x1, "original_sfta", ("stoc", "random"), pt="C")
    one = pairs(x1, "original_sfta", {"kind": "stoc"}, {"kind": "random"}, pt="C", seed=0)
    j = against_floor("STOC above Random at names600x4 (PT C, seed 0)", diff, floor)
    if j.verdict == "partly" and diff < GAP_RANDOM:
        j = Judgement("partly", f"{j.reason}; 1× on the same corpora {one.diff:+.1f}; the paper's gap is "
                                f"{GAP_RANDOM}", j.ours)
    return j


def stoc_vs_random_default(records) -> Judgement:
    sm, sc = records[SMALL_S3], records[SCALE]
    s, x = {"kind": "stoc"}, {"kind": "random"}
    return regimes("STOC above Random with default name pools", [
        _stoc_random("small word-level", pairs(sm, "original_sfta", s, x)),
        _stoc_random("small BPE", gap_of(sc, "original_sfta", s, x, world="small-bpe1024")),
        _stoc_random("w600 BPE", gap_of(sc, "original_sfta", s, x, world="w600-bpe1024"))])


def stoc_freeze(records) -> Judgement:
    """STOC against Random and LAMOL with frozen layers, run by run on (PT model, seed): the small world at α 0.67
    and α 0.9 (:data:`SMALL_F67`, :data:`SMALL_F90`, 2 PT models × 3 seeds; at α 0.9 against LAMOL only, the paper's
    row) and names150 on the Pythia port with a BPE tokenizer at α 0.67 (:data:`FREEZE150`)."""
    out = []
    for label, name, against in (("small α 0.67", SMALL_F67, (("random", GAP_F67_RANDOM), ("lamol", GAP_F67_LAMOL))),
                                 ("small α 0.9", SMALL_F90, (("lamol", GAP_F90_LAMOL),)),
                                 ("names150 Pythia BPE α 0.67", FREEZE150,
                                  (("random", GAP_F67_RANDOM), ("lamol", GAP_F67_LAMOL)))):
        for other, size in against:
            out.append(part(f"{label} vs {other}", pairs(records[name], "original_sfta", {"kind": "stoc"},
                                                         {"kind": other}), f"STOC above {other}", size))
    return regimes("STOC above Random and LAMOL with frozen layers", out)


def stoc_em(records) -> Judgement:
    r600, r150, r150s3 = records[R600], records[R150], records[R150S3]
    s = {"kind": "stoc"}
    return regimes("STOC's Original EM above the other kinds'", [
        part("names600 vs Random", pairs(r600, "original_em", s, {"kind": "random"}), "above Random", GAP_EM),
        part("names600 vs LAMOL", pairs(r600, "original_em", s, {"kind": "lamol"}), "above LAMOL", GAP_EM_LAMOL),
        part("names150 1× vs Random", pairs(r150s3, "original_em", s, {"kind": "random"}),
             "above Random", GAP_EM),
        part("names150 4× vs Random", gap_of(r150, "original_em", s, {"kind": "random"}, dose=4, seed=LOHI),
             "above Random", GAP_EM)])


def stoc_uptake(records) -> Judgement:
    r600, r150 = records[R600], records[R150S3]
    s = {"kind": "stoc"}
    parts = [("names600 vs Random", pairs(r600, "continual_sfta", s, {"kind": "random"})),
             ("names600 vs LAMOL", pairs(r600, "continual_sfta", s, {"kind": "lamol"})),
             ("names150 1× vs Random", pairs(r150, "continual_sfta", s, {"kind": "random"})),
             ("names150 1× vs LAMOL", pairs(r150, "continual_sfta", s, {"kind": "lamol"}))]
    claim = "STOC's Continual sFTA ≈ the other kinds'"
    return regimes(claim, [Part(lab, similar(claim, g), brief(g)) for lab, g in parts])


# ------------------------------------------------------------------------------------------------ forgetting, replay

NAIVE_WORLDS = ((SMALL_S3, "small", None), (SCALE, "small-bpe1024", {"world": "small-bpe1024"}),
                (SCALE, "w600-bpe1024", {"world": "w600-bpe1024"}), (R150S3, "names150", None),
                (R150, "names150", {"dose": 4}), (R150X16, "names150", None), (R600, "names600", None))
"""(record, world of cfka/pt_models, selection) of every naive CPT run at the preset's dose or above."""


def _pt_sfta(pts: Record, rec: Record, world: str, pt: str) -> float:
    """The PT model's Original sFTA: from the record's own ``regime.pt_quality`` where a produced study wrote it
    per PT replicate, else from the PT-model table."""
    quality = _quality(rec, pt)
    if "original_sfta" in quality:
        return quality["original_sfta"]
    return pts.values("original_sfta", world=world, pt=pt)[0]


def naive_forgets(records) -> Judgement:
    """The share of each PT model's Original sFTA that naive CPT leaves, over every world and PT replicate."""
    pts, kept = records[PTS], []
    for name, world, where in NAIVE_WORLDS:
        rec = records[name]
        for pt in sorted({r["pt"] for r in rec.select(kind="naive", **(where or {}))}):
            before = _pt_sfta(pts, rec, world, pt)
            for after in rec.values("original_sfta", kind="naive", pt=pt, **(where or {})):
                kept.append((f"{world}/{pt}", after / before))
    share = spread([k for _, k in kept])
    models = len({w for w, _ in kept})
    shown = f"naive keeps {100 * share.lo:.0f}–{100 * share.hi:.0f} % of the PT model's Original sFTA " \
            f"({share.n} runs, {models} PT models)"
    if share.hi < 0.5 and share.n >= 2:
        return Judgement("holds", f"naive CPT loses more than half of the old facts in every run on every PT model "
                                  f"(at most {100 * share.hi:.0f} % kept)", shown)
    if share.hi < 0.5:
        return Judgement("partly", "naive CPT loses more than half of the old facts, on one run", shown)
    return Judgement("not reproduced", f"a naive run keeps {100 * share.hi:.0f} % of the PT model's facts", shown)


def replay_vs_naive(records) -> Judgement:
    r600, r150, sc, st = records[R600], records[R150S3], records[SCALE], records[STREAMS]
    out, n = [], {"kind": "naive"}
    for kind in ("stoc", "random", "lamol"):
        k = {"kind": kind}
        out += [part(f"names600 {kind}", pairs(r600, "original_sfta", k, n), f"{kind} above naive"),
                part(f"names150 {kind}", pairs(r150, "original_sfta", k, n), f"{kind} above naive"),
                part(f"small BPE {kind}", gap_of(sc, "original_sfta", k, n, world="small-bpe1024"),
                     f"{kind} above naive")]
    out.append(part("small BPE real replay", gap_of(sc, "original_sfta", {"kind": "real_all"}, n,
                                                    world="small-bpe1024"), "real replay above naive"))
    out.append(part("3-stage stream, 25 % real replay",
                    stream_cmp(st, "final_original", {"stream": "replay25-rewarm"}, {"stream": "naive-rewarm"}),
                    "replay above naive"))
    return regimes("replay keeps more old knowledge than naive CPT", out)


def stream_cmp(st: Record, metric: str, a: Mapping, b: Mapping) -> Gap | Paired:
    """Stream ``a`` against stream ``b`` in a stream record: run by run on (PT model, seed) where both have runs of
    one seed each (``cfka/streams_small``, produced); otherwise unpaired over every row (the transcribed two-seed
    table's lo/hi rows, ``cfka/streams_small_2seed``)."""
    try:
        return pairs(st, metric, a, b)
    except ValueError:  # no pair of integer-seed runs
        return gap_of(st, metric, a, b)


def runs_of(g: Gap | Paired) -> str:
    """How many runs a stream comparison rests on, for a reason: 'N pairs' or 'unpaired, n = a / b'."""
    return f"{g.diffs.n} pairs" if isinstance(g, Paired) else f"unpaired, n = {g.a.n} / {g.b.n}"


def stream_pt_share(st: Record, stream: str) -> Spread:
    """The share of its PT model's Original sFTA each run of ``stream`` keeps at the end (final_original over the
    ``pt`` row of the same PT model)."""
    pt = {r["pt"]: r["original_sfta"] for r in st.select(stream="pt")}
    return spread([r["final_original"] / pt[r["pt"]] for r in st.select(stream=stream)])


def real_replay_top(records) -> Judgement:
    """Real old-data replay above every generative kind at α 0.5: in the small word-level world run by run on (PT
    model, seed) (real replay 'all' of :data:`BIO_REAL` against :data:`SMALL_S3`'s kinds, the same PT models) and in the
    small BPE world (two seeds, unpaired). The 3-stage stream's generative streams, which only the transcribed
    two-seed table on one PT model holds (:data:`STREAMS_2SEED`, context), are shown after the verdict."""
    sc, bio, sm = records[SCALE], records[BIO_REAL], records[SMALL_S3]
    rows = joined(sm, bio, {}, {})
    out = []
    for k in ("stoc", "random", "lamol"):
        out.append(part(f"small word-level vs {k}", paired(rows, "original_sfta", {"kind": "real_all"}, {"kind": k}),
                        f"real replay above {k}"))
        out.append(part(f"small BPE vs {k}", gap_of(sc, "original_sfta", {"kind": "real_all"}, {"kind": k},
                                                    world="small-bpe1024"), f"real replay above {k}"))
    j = regimes("real replay above generative replay", out)
    if STREAMS_2SEED not in records:
        return j
    old, rp = records[STREAMS_2SEED], {"stream": "replay25-rewarm"}
    stream = [f"{k} {brief(stream_cmp(old, 'final_original', rp, {'stream': f'{k}25-rewarm'}))}"
              for k in ("stoc", "random", "lamol")]
    return Judgement(j.verdict, f"{j.reason}. Context (3-stage stream, transcribed, 2 seeds on one PT model, real "
                                f"25 % replay − generative): {'; '.join(stream)}", j.ours)


def all_vs_half(records) -> Judgement:
    """Replay 'all' against 'half' run by run (the same PT replicate and CPT seed): Original sFTA, then EM."""
    bio = records[BIO]
    j = ordered(pairs(bio, "original_sfta", {"kind": "real_all"}, {"kind": "real_half"}),
                claim="replay 'all' above 'half' in Original sFTA")
    em = pairs(bio, "original_em", {"kind": "real_all"}, {"kind": "real_half"})
    side = "the same way" if em.diff > 0 else "the other way"
    note = f"; Original EM {side}: {brief(em)}" + ("" if em.apart else " (pairs of both signs)" if em.apart is False
                                                   else " (one pair)")
    return Judgement(j.verdict, j.reason + note, j.ours)



def _held_to_half(j: Judgement, share: Spread) -> tuple[Judgement, str]:
    """An "above naive" judgement held to keeping at least half of the PT model: ``holds`` becomes ``partly`` when a
    run keeps less; the share kept, for the reason."""
    kept = f"keeps {100 * share.lo:.0f}–{100 * share.hi:.0f} % of its PT model's Original sFTA"
    if j.verdict == "holds" and share.lo < 0.5:
        return Judgement("partly", f"{j.reason}, but it {kept} (< half)", j.ours), kept
    if j.verdict == "holds":
        return Judgement("holds", f"{j.reason}; {kept}", j.ours), kept
    return j, kept


def replay_10pct(records) -> Judgement:
    """α = 0.9 (10 % replay) with frozen layers, the paper's row, against naive CPT under the same freeze, run by run
    on (PT model, seed) per kind (:data:`SMALL_F90`): above naive beyond the spread and keeping at least half of
    each run's own PT model; in the 3-stage stream (no re-warming, full update) the same for 10 % real replay."""
    f9, st = records[SMALL_F90], records[STREAMS]
    out = []
    for kind in ("stoc", "lamol"):
        g = pairs(f9, "original_sfta", {"kind": kind}, {"kind": "naive"})
        share = spread([r["original_sfta"] / _quality(f9, r["pt"])["original_sfta"]
                        for r in f9.select(kind=kind) if isinstance(r.get("seed"), int)])
        j, kept = _held_to_half(ordered(g, claim=f"10 % {kind} replay above naive (both frozen)"), share)
        out.append(Part(f"small α 0.9 freeze, {kind}", j, f"{brief(g)}, {kept}"))
    sg = stream_cmp(st, "final_original", {"stream": "replay10-norewarm"}, {"stream": "naive-norewarm"})
    stream, kept = _held_to_half(ordered(sg, claim="10 % real replay above naive (stream, no re-warm)"),
                                 stream_pt_share(st, "replay10-norewarm"))
    return regimes("10 % replay preserves old facts", out + [Part("3-stage stream", stream, f"{brief(sg)}, {kept}")])


# ------------------------------------------------------------------------------------------------ update modes, EWC

def full_vs_freeze(records) -> Judgement:
    """Freeze − full run by run (same PT model and seed): the paper's comparison — each replay kind at α 0.67 with
    frozen layers against the same kind at α 0.5 with the full update — in the small world (:data:`SMALL_F67`
    against :data:`SMALL_S3`), and the naive cell on the word-level tokenizer and on a BPE one (where new names share
    pieces with old ones, as in the paper's Pythia). The transcribed one-seed α × kind grid (:data:`SMALL`, context)
    is shown after the verdict."""
    rows = joined(records[SMALL_F67], records[SMALL_S3], {"update": "freeze"}, {"update": "full"})
    out = []
    for metric in ("continual_sfta", "original_sfta"):
        for kind in ("stoc", "random", "lamol"):
            g = paired(rows, metric, {"update": "freeze", "kind": kind}, {"update": "full", "kind": kind})
            out.append(Part(f"small {kind}, freeze α 0.67 − full α 0.5, {metric}",
                            similar(f"freeze ≈ full ({metric})", g), brief(g)))
    for label, rec in (("small naive", records[BIO]), ("small naive, Pythia + BPE", records[BIO_BPE])):
        for metric in ("continual_sfta", "original_sfta"):
            g = pairs(rec, metric, {"update": "freeze"}, {"update": "full"}, kind="naive")
            out.append(Part(f"{label}, {metric}", similar(f"freeze ≈ full ({metric})", g), brief(g)))
    j = regimes("full update ≈ freeze", out)
    if SMALL not in records:
        return j
    grid = [f"{m} {brief(pairs(records[SMALL], m, {'update': 'freeze'}, {'update': 'full'}, by=('alpha', 'kind')))}"
            for m in ("continual_sfta", "original_sfta")]
    return Judgement(j.verdict, f"{j.reason}. Context (transcribed, one PT model, one seed: freeze − full at the same "
                                f"α, 12 α × kind cells): {'; '.join(grid)}", j.ours)


def bio_lora_rows(bio: Record, lr: Record) -> list[dict]:
    """The naive Biography runs of ``bio`` (full, freeze, LoRA at the preset's lr) and ``lr``'s LoRA runs at other
    learning rates, one row per run, each LoRA row with its ``lr_scale`` (absent: 1).

    Raises:
      ValueError: ``lr``'s runs started from other PT models than ``bio``'s (a PT row of the same name with other
        values), so that pairs on (pt, seed) would not share their PT model.
    """
    pt = {r["pt"]: r for r in bio.select(kind="pt")}
    for r in lr.select(kind="pt"):
        if r["pt"] not in pt or pt[r["pt"]] != r:
            raise ValueError(f"record {lr.name}: PT model {r['pt']} is not {bio.name}'s ({r} vs {pt.get(r['pt'])}); "
                             "its LoRA runs cannot be paired with that record's")
    runs = [r for rec in (bio, lr) for r in rec.select(kind="naive") if isinstance(r.get("seed"), int)]
    return [dict(r, lr_scale=r.get("lr_scale", 1.0)) if r.get("update") == "lora" else r for r in runs]


def bio_lora_lr(bio: Record, lr: Record) -> tuple[list[Part], str]:
    """Per learning-rate scale x of the Biography LoRA cell: freeze − LoRA and full − LoRA run by run (same PT
    model and CPT seed), on new facts (Continual sFTA) and old facts (Original sFTA); and at which x LoRA has the
    fewest new facts and the fewest old facts (both comparisons ``holds``: below freeze and full in every pair)."""
    rows = bio_lora_rows(bio, lr)
    scales = sorted({r["lr_scale"] for r in rows if r.get("update") == "lora"})
    out, fewest = [], {"continual_sfta": [], "original_sfta": []}
    for x in scales:
        lora = {"update": "lora", "lr_scale": x}
        for metric, word in (("continual_sfta", "new facts"), ("original_sfta", "old facts")):
            below = []
            for other in ("freeze", "full"):
                g = paired(rows, metric, {"update": other}, lora)
                j = ordered(g, claim=f"LoRA below {other} on {word}")
                out.append(Part(f"Biography LoRA lr×{x:g}, {word}, {other} − LoRA", j, brief(g)))
                below.append(j.verdict == "holds")
            if all(below):
                fewest[metric].append(x)

    def at(xs: list[float]) -> str:
        return "lr × " + ", ".join(f"{x:g}" for x in xs) if xs else "no lr"

    new, old = fewest["continual_sfta"], fewest["original_sfta"]
    said = (f"Biography LoRA at lr × {', '.join(f'{x:g}' for x in scales)} of the full update's, against freeze "
            f"and full run by run: the fewest new facts at {at(new)}, the fewest old facts at {at(old)}; LoRA "
            + ("stays the worst on new facts at every lr" if new == scales else "is not the worst on new facts at "
               + at([x for x in scales if x not in new])))
    return out, said


def _quality(rec: Record, pt: str) -> dict[str, float]:
    """A PT model's quality in ``rec.regime.pt_quality``, keys normalised (``Original/sFTA`` → ``original_sfta``)."""
    q = rec.regime.get("pt_quality", {})
    q = q.get(pt) if isinstance(q, Mapping) else None
    return {k.lower().replace("/", "_"): float(v) for k, v in q.items()} if isinstance(q, Mapping) else {}


def joined(a: Record, b: Record, tag_a: Mapping, tag_b: Mapping) -> list[dict]:
    """The one-seed runs of ``a`` and those of ``b`` on ``a``'s PT models, each row updated with its record's tag,
    for pairing on (pt, seed) across two records.

    Raises:
      ValueError: a PT model of ``a`` is missing from ``b``'s ``regime.pt_quality`` or disagrees with it on a
        measure both record (another label or another model), so the runs would not share their PT model.
    """
    pts = {r["pt"] for r in a.rows if isinstance(r.get("seed"), int)}
    for pt in sorted(pts):
        mine, theirs = _quality(a, pt), _quality(b, pt)
        common = set(mine) & set(theirs)
        if "original_sfta" not in common or any(abs(mine[k] - theirs[k]) > 0.005 for k in common):
            raise ValueError(f"record {a.name}: PT model {pt} ({a.regime.get('pt_quality', {}).get(pt)}) is not "
                             f"{b.name}'s ({b.regime.get('pt_quality', {}).get(pt)}): its runs cannot be paired with "
                             "that record's")
    return ([dict(r, **tag_a) for r in a.rows if isinstance(r.get("seed"), int)]
            + [dict(r, **tag_b) for r in b.rows if r.get("pt") in pts and isinstance(r.get("seed"), int)])


def update_rows(other: Record, full: Record, update: str) -> list[dict]:
    """``other``'s runs (tagged ``update``) and ``full``'s full-update runs of the same PT models (:func:`joined`)."""
    return joined(other, full, {"update": update}, {"update": "full"})


def lora_worst(records) -> Judgement:
    """names150 LoRA against the full update run by run (same PT model, corpora and seed), α 0.5: new facts and old
    facts; the Biography
    LoRA cell against freeze and full run by run at the full update's lr and at × 3, × 10 of it
    (:func:`bio_lora_lr`)."""
    bio = records[BIO]
    rows = update_rows(records[LORA150], records[R150S3], "lora")
    out = []
    for metric, word in (("continual_sfta", "new facts"), ("original_sfta", "old facts")):
        for kind in ("stoc", "random", "lamol"):
            g = paired(rows, metric, {"update": "full", "kind": kind}, {"update": "lora", "kind": kind})
            out.append(Part(f"names150 {word}, {kind}, full − LoRA", ordered(g, claim=f"LoRA below full on {word}"),
                            brief(g)))
    parts, said = bio_lora_lr(bio, records[BIO_LORA_LR])
    j = regimes("LoRA the worst update at low α", out + parts)
    return Judgement(j.verdict, f"{said}. {j.reason}", j.ours)


def ewc_sweep(bio: Record) -> Judgement:
    """Does any EWC strength reach real replay 'all' on old and new facts at once? Per λ, run by run (same PT
    replicate and CPT seed): that λ is *dominated* when on Original or Continual sFTA every pair is below replay."""
    lams = sorted({r["ewc_lambda"] for r in bio.select(kind="ewc")})
    parts, dominated = [], []
    for lam in lams:
        rows = [r for r in bio.rows if r.get("kind") == "real_all" or
                (r.get("kind") == "ewc" and r.get("ewc_lambda") == lam)]
        old, new = (paired(rows, m, {"kind": "ewc"}, {"kind": "real_all"}) for m in ("original_sfta", "continual_sfta"))
        dominated.append(any(p.b_above for p in (old, new)))
        parts.append(f"λ {lam:.0e}: old {brief(old)}, new {brief(new)}")
    shown = "EWC − replay 'all' (sFTA, run by run): " + "; ".join(parts)
    if all(dominated):
        return Judgement("partly", "no EWC λ reaches real replay's old and new facts at once (every λ below replay "
                                   "on one axis in every pair)", shown)
    return Judgement("not reproduced", "an EWC λ is not below real replay on either axis beyond the spread", shown)


def ewc(records) -> Judgement:
    """Forgetting under EWC, EWC against replay, EWC against naive (the 3-stage stream, run by run on (PT model,
    seed)); the λ sweep (Biography, run by run)."""
    st, bio = records[STREAMS], records[BIO]  # the claim also names PTS (the PT models behind the sweep)
    e, n, rp = {"stream": "ewc-rewarm"}, {"stream": "naive-rewarm"}, {"stream": "replay25-rewarm"}
    share = stream_pt_share(st, "ewc-rewarm")
    forget = Judgement("holds" if share.hi < 0.5 else "not reproduced",
                       f"EWC still forgets: keeps at most {100 * share.hi:.0f} % of its PT model's Original sFTA", "")
    over_ewc = stream_cmp(st, "final_original", rp, e)
    replay = ordered(over_ewc, claim="25 % replay above EWC")
    acc = stream_cmp(st, "avg_acc", rp, e)
    sweep = ewc_sweep(bio)
    over_naive = stream_cmp(st, "final_original", e, n)
    slower = ordered(over_naive, claim="EWC keeps more than naive")
    shown = (f"stream, final Original (run by run): replay − EWC {brief(over_ewc)}, EWC − naive "
             f"{brief(over_naive)}; EWC keeps {100 * share.lo:.0f}–{100 * share.hi:.0f} % of PT; ACC replay − EWC {brief(acc)}; "
             f"{sweep.ours}")
    verdict = "partly" if forget.verdict == "holds" and replay.verdict == "holds" else "not reproduced"
    return Judgement(verdict, f"EWC still forgets (the stream keeps at most {100 * share.hi:.0f} % of its PT model's "
                              f"Original sFTA): {forget.verdict}; 25 % real replay keeps more "
                              f"({runs_of(over_ewc)}): {replay.verdict}; {sweep.reason}; but EWC keeps more "
                              f"than naive: {slower.verdict} ({runs_of(over_naive)}), which a slower convergence "
                              "allows at this dose; where it converges is not measured", shown)


# ------------------------------------------------------------------------------------------------ interfered facts

_PER_SEED = [(f"{w} PT {p}", {"world": w, "pt": p}, "paired")
             for w, p in (("names150", "C"), ("names600", "A"), ("names600", "B"), ("names600", "C"))]
VOICING = [("names150 PT A", {"world": "names150", "pt": "A"}, LOHI),
           ("names150 PT B", {"world": "names150", "pt": "B"}, ["mean"]), *_PER_SEED]
"""The corpora whose voicing of interfered vs other old facts was measured: (label, selection, seeds)."""
RETENTION = [("names150 PT A 1×", {"world": "names150", "pt": "A", "dose": 1}, ["mean"]),
             ("names150 PT A 4×", {"world": "names150", "pt": "A", "dose": 4}, ["mean"]),
             ("names150 PT B 16×", {"world": "names150", "pt": "B", "dose": 16}, ["mean"]), *_PER_SEED]
"""The CPT cells whose retention of interfered vs other old facts was measured (names150 PT C: 16×, names600: 1×)."""


def _interfered(records, metric: str, cells, claim: str) -> Judgement:
    """STOC's interfered − rest gap of ``metric`` against Random's, cell by cell (paired where seeds are known)."""
    rec, s, x = records[INTERF], {"kind": "stoc"}, {"kind": "random"}
    out = []
    for label, where, seeds in cells:
        g = (pairs(rec, metric, s, x, by=("seed",), **where) if seeds == "paired"
             else gap_of(rec, metric, s, x, seed=seeds, **where))
        out.append(part(label, g, claim))
    return regimes(claim, out)


def stoc_voices_interfered(records) -> Judgement:
    return _interfered(records, "voiced_gap", VOICING,
                       "STOC's corpus voices the interfered facts more than Random's (interfered − rest)")


def stoc_retains_interfered(records) -> Judgement:
    return _interfered(records, "retained_gap", RETENTION,
                       "STOC retains the interfered facts more than Random does (interfered − rest)")
