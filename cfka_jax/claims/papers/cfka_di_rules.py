"""The verdict rules of the cFKA paper's claims about attention and the Diversity Index in trained LMs: the
DI–attention law, STOC's link to low-DI tokens, retention after naive CPT and the 1-Aug explanation.

A correlation is judged against its threshold with its interval: the law "Pearson ≤ −0.8" holds on a panel when
the upper end of the 95 % bootstrap interval (over token types) of the project's default DI is at or below −0.8,
and it is refuted when every interval measured on that panel lies above −0.8 and no measure × DI convention
reaches −0.8 even as a point estimate. Only ports in the theory's regime (held-out sFTA ≥ 0.7,
:data:`cfka_rules.THEORY_REGIME`) decide; under-trained panels are named in the reason and capped at
``not reproduced`` (a measurement off the theory's regime does not refute it).
"""

from __future__ import annotations

from cfka_jax.claims.papers.cfka_rules import AUG1, DI_EARLY, DI_TRAINED, LOHI, THEORY_REGIME, Part, regimes
from cfka_jax.claims.verdicts import Judgement, gap, not_tested, ordered, spread

LAW = -0.8
"""The paper's threshold: DI "correlates strongly with measured attention in multi-layer LMs (Pearson < −0.8)"."""
DEFAULT_DI = "centred/cooccur"
"""The project's default DI convention (centred, over co-occurring objects; the single-layer theory's −0.880)."""
MOST_NEGATIVE = "most negative of 5 measures × 4 DI conventions"


def _panel(rec, att: str, world: str) -> Part:
    """One panel's verdict on the law (module docstring)."""
    held = spread(rec.values("heldout_sfta", attention=att, world=world, summary="held-out"))
    main = rec.select(attention=att, world=world, measure="context", di=DEFAULT_DI, ports="trained")[0]
    tabled = [r for r in rec.select(attention=att, world=world, ports="trained") if "pearson_lo" in r]
    lowest = min(r["pearson_lo"] for r in tabled)
    most = rec.select(attention=att, world=world, summary=MOST_NEGATIVE)[0]["most_negative_pooled_pearson"]
    shown = (f"{main['pearson']:+.3f} [{main['pearson_lo']:+.3f}, {main['pearson_hi']:+.3f}] (per seed "
             f"{main['per_seed_pearson_mean']:+.3f} ± {main['per_seed_pearson_sd']:.3f}); most negative of 20 "
             f"{most:+.3f} (held-out sFTA {held.mean:.2f})")
    label = f"{att} {world}"
    if held.mean < THEORY_REGIME:
        j = Judgement("not tested", f"held-out sFTA {held.mean:.2f} below the theory's regime {THEORY_REGIME}")
    elif main["pearson_hi"] <= LAW:
        j = Judgement("holds", f"the default DI's interval lies at or below {LAW}")
    elif lowest > LAW and most > LAW:
        j = Judgement("refuted", f"every interval above {LAW} (lowest end {lowest:+.3f}); the most negative point "
                                 f"estimate {most:+.3f}; the default DI {main['pearson']:+.3f}"
                                 + (", the opposite sign" if main["pearson_lo"] > 0 else ""))
    else:
        j = Judgement("not reproduced", f"the default DI's interval reaches above {LAW}")
    return Part(label, j, shown)


def di_law(records) -> Judgement:
    """Pearson ≤ −0.8 on the fully trained ports; panels below the theory's regime are named, not counted."""
    rec = records[DI_TRAINED]
    panels = sorted({(r["attention"], r["world"]) for r in rec.rows}, key=lambda p: (p[1] != "small", p))
    parts = [_panel(rec, *p) for p in panels]
    counted = [p for p in parts if p.judgement.verdict != "not tested"]
    if not counted:
        return not_tested("no panel of ports in the theory's regime (held-out sFTA ≥ 0.7)")
    j = regimes("DI–attention Pearson ≤ −0.8 on trained ports (2 seeds each)", counted)
    off = [p for p in parts if p.judgement.verdict == "not tested"]
    note = "".join(f"; {p.label} not counted ({p.judgement.reason})" for p in off)
    return Judgement(j.verdict, j.reason + note, "; ".join(f"{p.label} {p.shown}" for p in parts))


DI_QWEN35 = "cfka/di_attention_qwen3_5"
DI_QWEN_SAME_DOSE = "cfka/di_attention_qwen"  # the Qwen2 port at the same preset, seeds and dose: the comparison
"""``cfka di-attention --arch qwen3_5 --record results``: rows per (seed, layer kind, layer) (experiments/di_kinds.py)."""
KINDS = {"linear_attention": "Gated DeltaNet layers", "full_attention": "full-attention layers"}
MIN_SEEDS = 3


def _kind(rec, kind: str, regime_note: str) -> Part:
    """The law on one layer kind: every seed's Pearson of DI against the kind's pooled z, under the spread rule."""
    rows = [r for r in rec.select(kind=kind, layer="pooled", ports="trained") if r["seed"] != "mean"]
    seeds = spread([r["pearson"] for r in rows])
    mean = rec.select(kind=kind, layer="pooled", ports="trained", seed="mean")[0]
    init = rec.select(kind=kind, layer="pooled", ports="untrained", seed="mean")[0]
    shown = (f"{mean['pearson']:+.3f} [{mean['pearson_lo']:+.3f}, {mean['pearson_hi']:+.3f}] (per seed "
             f"{seeds.show(3)}; untrained {init['pearson']:+.3f})")
    lowest = min(r["pearson_lo"] for r in rows)
    if regime_note:
        j = Judgement("not tested", regime_note)
    elif seeds.n < MIN_SEEDS:
        j = Judgement("not tested", f"{seeds.n} seeds, fewer than {MIN_SEEDS}")
    elif seeds.hi <= LAW and mean["pearson_hi"] <= LAW:
        j = Judgement("holds", f"every seed at or below {LAW} and the seed-mean interval too")
    elif lowest > LAW:
        j = Judgement("refuted", f"every seed's interval above {LAW} (lowest end {lowest:+.3f})"
                                 + ("; the opposite sign on every seed" if seeds.lo > 0 else ""))
    else:
        j = Judgement("not reproduced", f"the seeds ({seeds.show(3)}) do not all reach {LAW}")
    return Part(KINDS[kind], j, shown)


def di_law_gated_deltanet(records) -> Judgement:
    """"Pearson < −0.8 in multi-layer LMs" on the Qwen3.5-style port, judged apart on its Gated DeltaNet (linear)
    layers and its full-attention layers (the project's default DI, the ``context`` measure; the linear layers'
    attention is the row-normalised |token-mixing matrix|, ``lm_theory/attention.py``). Per kind: holds when every
    seed's Pearson and the seed-mean interval are at or below −0.8; refuted when every seed's interval lies above;
    ≥ 3 seeds and held-out sFTA ≥ 0.7 (the theory's regime), else not tested."""
    rec = records[DI_QWEN35]
    held = spread(rec.values("heldout_sfta", summary="held-out"))
    note = (f"held-out sFTA {held.show(2)} below the theory's regime {THEORY_REGIME}"
            if held.mean < THEORY_REGIME else "")
    parts = [_kind(rec, k, note) for k in KINDS if rec.select(kind=k)]
    j = regimes("DI–attention Pearson ≤ −0.8 per layer kind (Qwen3.5-style port)", parts)
    return Judgement(j.verdict, j.reason, f"{j.ours}; held-out sFTA {held.show(2)}")


def stoc_low_di(records) -> Judgement:
    """Overlap of STOC's selected token types with the lowest-DI ones against chance, over the seeds' range."""
    rec = records[DI_EARLY]
    parts = []
    for r in rec.select(summary=None):
        shown = (f"overlap {r['overlap_mean']:.3f} ± {r['overlap_sd']:.3f} ({r['overlap_min']:.3f}–"
                 f"{r['overlap_max']:.3f}, {r['seeds']} seeds) vs chance {r['chance']:.3f}")
        regime = r.get("heldout_sfta")
        off = regime is None or regime < THEORY_REGIME
        where = (f"PT {r['pt_steps']} of 2000 steps, held-out sFTA "
                 f"{'not measured' if regime is None else f'{regime:.3f}'}")
        if r["overlap_min"] > r["chance"]:
            j = Judgement("holds", f"above chance on every seed ({where})")
        elif r["overlap_max"] < r["chance"]:
            j = Judgement("not reproduced" if off else "refuted",
                          f"below chance on every seed ({where}" + ("; off the theory's regime, so not a refutation)"
                                                                    if off else ")"))
        else:
            j = Judgement("not reproduced", f"the seeds' range spans chance ({where})")
        parts.append(Part(r["attention"], j, shown))
    return regimes("STOC's selected tokens are the lowest-DI tokens (top-10 % overlap)", parts)


def retention(records) -> Judgement:
    """The theory's per-fact retention against the measured one; untestable while the ports know few facts."""
    r = records[DI_EARLY].select(summary="retention after naive CPT")[0]
    known = r["known_facts"]
    shown = (f"Spearman {r['retention_spearman_mean']:+.2f} ± {r['retention_spearman_sd']:.2f} "
             f"({r['retention_spearman_min']:+.2f} … {r['retention_spearman_max']:+.2f}) over "
             f"{r['retention_seeds']} seeds; known facts {min(known)}–{max(known)} of {r['facts']}")
    if r["heldout_sfta_pt"] < THEORY_REGIME:
        return Judgement("not tested", f"the ports know {min(known)}–{max(known)} of {r['facts']} facts (held-out "
                                       f"sFTA {r['heldout_sfta_pt']:.3f} < {THEORY_REGIME}, PT {r['pt_steps']} of "
                                       "2000 steps): too few for a per-fact rank correlation; rerun at the full PT "
                                       "schedule", shown)
    if r["retention_spearman_min"] > 0:
        return Judgement("holds", "the prediction ranks retention positively on every seed", shown)
    return Judgement("not reproduced", "the seeds' Spearman range spans 0", shown)


def aug1_extraction(records) -> Judgement:
    """1-Aug stores (train EM) but does not extract (test EM), against the five-biography world's test EM."""
    rec = records[AUG1]
    test5, test1 = rec.values("heldout_em", world="names150"), rec.values("heldout_em", world="names150_1aug")
    train1 = rec.values("train_em", world="names150_1aug")
    stored = ordered(gap(train1, test1), claim="1-Aug train EM above its test EM")
    failed = ordered(gap(test5, test1), claim="1-Aug test EM below the five-biography world's")
    return regimes("one biography per person: stored but not extractable", [
        Part("train vs test EM (1-Aug)", stored, f"{spread(train1).show()} vs {spread(test1).show()}"),
        Part("test EM, 5 vs 1 biographies", failed, f"{spread(test5).show()} vs {spread(test1).show()}")])


def aug1_attention(records) -> Judgement:
    """The paper's direction as registered (cfka.py): with one biography per person, less attention on the
    subject (name) tokens and more on the relation tokens than with augmentation."""
    rec = records[AUG1]

    def att(world, slot):
        return rec.values("attention", world=world, slot=slot, layers="pooled", seed=LOHI)

    name = gap(att("names150", "name"), att("names150_1aug", "name"))
    rel = gap(att("names150_1aug", "relation"), att("names150", "relation"))
    mid = {w: rec.values("attention", world=w, slot="name", layers="1 (middle)")[0]
           for w in ("names150", "names150_1aug")}
    di = {w: rec.values("di_centred_cooccur", world=w, slot="relation", seed="world")[0]
          for w in ("names150", "names150_1aug")}
    j = regimes("1-Aug attention", [
        Part("name attention lower with 1-Aug", ordered(name, claim="5 above 1 biography", digits=3),
             f"{name.b.show(3)} vs {name.a.show(3)}"),
        Part("relation attention higher with 1-Aug", ordered(rel, claim="1 above 5 biographies", digits=3),
             f"{rel.a.show(3)} vs {rel.b.show(3)}")])
    return Judgement(j.verdict, f"{j.reason}; middle layer name attention {mid['names150_1aug']:.3f} vs "
                                f"{mid['names150']:.3f}; relation DI (centred) {di['names150_1aug']:+.2f} with 1-Aug "
                                f"vs {di['names150']:+.2f}", j.ours)
