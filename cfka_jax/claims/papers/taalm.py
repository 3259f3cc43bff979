"""The TAALM / Train-Attention paper's empirical claims: LAMA-CKL (Table 1: TAALM against Finetune, the CKL
baselines and Oracle; TAALM combined with them), TemporalWiki, what φ learns, and the rows nothing here can run.

Paper: Seo, Lee, Yeo, NeurIPS 2024, arXiv:2407.16920 (spec: shared/spec/taalm.md; §9 lists the reported numbers,
§5–§8 the protocols). Our numbers are the small preset's (``cfka taalm --preset small``: a 0.27 M-parameter θ0 on a
synthetic LAMA-CKL of 45 TO-LEARN facts) and a Biography CPT run with a φ of its own. The LAMA-CKL and
TemporalWiki records are produced over study seeds (``cfka taalm --seed N --record small``: one θ0, φ and method
run per seed), and so is φ's weights record (``--phi-record-only``: the same seeds' φ, read). A record of one seed
lets no rule say more than ``partly`` (:func:`one_seed_cap`); the LAMA-CKL and TemporalWiki learning rate (3e-3)
was chosen on Finetune and Oracle alone (seed 0), which every reason on those records says. The φ rules compare
runs paired on (PT model, seed) (:func:`_over_runs`).

Two rules beyond the spread rule of ``claims/verdicts.py``: an accuracy difference of at most one fact of the
set (1/45 Top Acc, 1/50 NF Acc) is no difference, on one run, on the seeds' mean or in one seed's pair
(:func:`above`, :func:`compare`), and a TemporalWiki comparison is the sign of the after-training NLL difference
in every (seed, period) pair (:func:`twiki_lower`). Methods are compared seed by seed where the seeds' ranges
overlap (:func:`compare`): every method of a seed starts from its θ0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cfka_jax.claims.papers import PaperClaim
from cfka_jax.claims.papers.taalm_rules import at_chosen, describe, select_lr
from cfka_jax.claims.results import Record
from cfka_jax.claims.verdicts import VERDICTS, Gap, Judgement, Paired, gap, not_tested, ordered, paired, spread

LAMA, TWIKI = "taalm/lama_ckl_small", "taalm/twiki_small"
TWIKI_EP = "taalm/twiki_epochs_small"
"""TemporalWiki at 1, 3 and 5 epochs per period on the same θ0 and φ (``taalm_twiki``); its 1-epoch rows are the
runs of :data:`TWIKI` made again (the rules check that they agree). One epoch is 2 updates per period here."""
TWIKI_EP_CMD = ("python -m cfka_jax.experiments.taalm_twiki --preset small --epochs 1,3,5 --seeds 0,1,2 --methods "
                "\"Finetune,Oracle,RHO-1,Mix-review,RecAdam,K-Adapter,TAALM,TAALM + K-Adapter\" (θ0 and φ of cfka "
                "taalm --preset small --seed N)")
LR_SEL = "taalm/lr_selection_small"
LR_E90 = "taalm/lr_selection_small_e90"
"""K-Adapter's budget: the LAMA-CKL lr sweep at 3× the epochs (``taalm_lr --epochs 90``), read beside the K-Adapter
verdicts (a context record): does a budget of 10× the lr and 3× the epochs let K-Adapter learn?"""
KADAPTERS = ("K-Adapter", "K-Adapter (dropout 0.1)", "TAALM + K-Adapter", "TAALM + K-Adapter (dropout 0.1)")
PHI_SIZE = "taalm/phi_size_small"
PHI_SIZE_CMD = ("python -m cfka_jax.experiments.taalm_phi_size --preset small --phi-widths 32 [--phi-layers 1] --seeds "
                "0,1,2 (θ0, sets and the same-size φ of cfka taalm --preset small --seed N)")
LR_CMD = ("python -m cfka_jax.experiments.taalm_lr --preset small --lrs 1e-3,3e-3,1e-2,3e-2 --seeds 0,1,2 --methods "
          "\"Finetune,TAALM,K-Adapter,TAALM + K-Adapter,Oracle,RHO-1,Mix-review,RecAdam\" (θ0, sets and φ of cfka "
          "taalm --preset small --seed N)")
PHI_W, BIO = "taalm/phi_weights_small", "taalm/biography_phi_small"
BIO_2PT = "taalm/biography_phi_small_2pt"
"""The Biography φ study again on two PT models (s0, s1) × 3 seeds, on another machine: its PT models are not
:data:`BIO`'s (the same spec, other floating-point results), so :func:`bio_phi` keeps the two records' PT models
apart."""
SMALL = ("cfka taalm --preset small --seed N --out runs/taalm-small-sN --record small --record-seeds 0,1,2 "
         "(N = 0, 1, 2)")
PHI_CMD = ("cfka taalm --preset small --record small --record-seeds 0,1,2 --phi-record-only (reads the φ of "
           "runs/taalm-small-sN, N = 0, 1, 2, made by the LAMA-CKL command)")
BIO_CMD = ("cfka bio-table --preset small --cells replay-all-full --pt-seeds 0,1 --seeds 0,1,2 --pt-root runs/pt-small "
           "--out runs/bio-small-real (PT replicates and plain replay-all runs); cfka taalm --biography runs/pt-small "
           "--pt-seeds 0,1 --seeds 0,1,2 --preset small --out runs/taalm-bio-s3 --cache-dir runs/data-cache "
           "--plain-dirs \"runs/bio-small-real/cpt-replay-all-full/pt{pt}-seed{seed}\" --record "
           "taalm/biography_phi_small")
LR = "lr 3e-3 chosen on Finetune and Oracle only"
PAPER_LAMA = ("Llama-2-7B QLoRA (NF4, LoRA r 64 α 16), φ TinyLlama-1.1B-Chat + LoRA; 500 TO-LEARN + 500 "
              "NOT-TO-FORGET LAMA facts; 30 epochs of batch 64 (8 updates each), AdamW lr 1e-4 for every method")
PAPER_TWIKI = ("TinyLlama-1.1B-Chat QLoRA or K-Adapter, TinyLlama φ; Wikipedia diff sets 0910 → 1011 → 1112, "
               "1 epoch per period, batch 64, lr 1e-4; object-token NLL of the changed / unchanged probes")
METRIC_NAME = {"top_acc": "Top Acc", "nf_acc": "NF Acc", "total": "Total Knowledge", "epoch": "Epoch"}
_WORST = {v: i for i, v in enumerate(VERDICTS)}  # holds < partly < not reproduced < refuted < not tested


def one_seed_cap(j: Judgement, records: Sequence[Record]) -> Judgement:
    """At most ``partly`` (and never ``refuted``) while a record has fewer than two seeds."""
    if min(r.seeds for r in records) >= 2 or j.verdict not in ("holds", "refuted"):
        return j
    verdict = "partly" if j.verdict == "holds" else "not reproduced"
    return Judgement(verdict, f"{j.reason}; one seed: at most {verdict}", j.ours)


def resolution(rec: Record, metric: str) -> float:
    """The smallest difference one run can show: one fact of the set (partial credit aside); one epoch."""
    r = rec.regime
    return {"top_acc": 1 / r["n_to_learn"], "nf_acc": 1 / r["n_not_to_forget"],
            "total": 1 / max(r["n_to_learn"], r["n_not_to_forget"]), "epoch": 1.0}[metric]


def compare(rec: Record, hi: str, lo: str, metric: str) -> Gap | Paired:
    """``hi`` against ``lo`` on ``metric`` under the spread rule: the seeds' ranges (:func:`gap`), or, where they
    overlap, the per-seed differences (every method of a seed starts from that seed's θ0; :func:`paired`) when
    every one of them is beyond one fact (:func:`resolution`) with one sign; otherwise the overlapping ranges."""
    g = gap(rec.values(metric, method=hi), rec.values(metric, method=lo))
    if g.apart is not False:
        return g
    try:
        p = paired(rec.rows, metric, {"method": hi}, {"method": lo}, by=("seed",))
    except ValueError:
        return g
    beyond = min(abs(d) for d in p.diffs.values) > 1.01 * resolution(rec, metric)  # a pair within a fact: no sign
    return p if p.apart and beyond else g


def above(rec: Record, a: str, b: str, metric: str, *, lower_better: bool = False) -> Judgement:
    """"``a`` beats ``b`` on ``metric``" over the record's seeds (``ordered`` on :func:`compare`), where a margin
    of at most one fact (:func:`resolution`) is no margin: on one run, on the seeds' mean, or in a seed's pair."""
    hi, lo = (b, a) if lower_better else (a, b)
    g = compare(rec, hi, lo, metric)
    claim = f"{a} {'earlier than' if lower_better else 'above'} {b} on {METRIC_NAME[metric]}"
    digits = 0 if metric == "epoch" else 3
    res = resolution(rec, metric)
    shown = f"{METRIC_NAME[metric]} {hi} vs {lo}: {g.show(digits)}"
    if abs(g.diff) <= 1.01 * res:  # 1.01: the docs' 4-decimal rounding
        unit = "epoch" if metric == "epoch" else "fact"
        where = "on one run" if g.apart is None else f"on the mean of {min(g.a.n, g.b.n)} seeds"
        return Judgement("not reproduced",
                         f"{claim}: {g.diff:+.{digits}f}, within one {unit} ({res:.3f}), {where}", shown)
    j = one_seed_cap(ordered(g, claim=claim, digits=digits), [rec])
    return Judgement(j.verdict, j.reason, shown)


def combine(parts: Sequence[Judgement], note: str = "") -> Judgement:
    """The worst verdict of ``parts``: its reason (plus ``note``); every part's numbers in ``ours``."""
    worst = max(parts, key=lambda j: _WORST[j.verdict])
    n = sum(j.verdict == worst.verdict for j in parts)
    alike = f"; {n} of {len(parts)} comparisons {worst.verdict}" if len(parts) > 1 else ""
    return Judgement(worst.verdict, worst.reason + alike + (f" ({note})" if note else ""),
                     "; ".join(j.ours for j in parts))


def _seeds(rec: Record) -> str:
    return f"{rec.seeds} seed{'' if rec.seeds == 1 else 's'}"


def lr_note(records: Mapping[str, Record], methods) -> str:
    """Which lr a LAMA-CKL verdict used: the shared one, and, where the lr study (:data:`LR_SEL`) chose another for
    one of ``methods``, each one's own (``taalm_rules.select_lr``); ``""`` without the study or its methods."""
    if LR_SEL not in records:
        return ""
    rec = records[LR_SEL]
    chosen = select_lr(rec.rows)
    shared = {float(r["lr"]) for r in records[LAMA].rows if r.get("lr") is not None} if LAMA in records else set()
    mine = [m for m in dict.fromkeys(methods) if m in chosen]
    if not mine or {chosen[m].lr for m in mine} <= (shared or {3e-3}):
        return ""
    return (f"verdict at the shared lr 3e-3; each method's own lr by one rule ({LR_SEL}, {_seeds(rec)}): "
            f"{describe(chosen, mine)}")


def lama(*pairs: tuple[str, str, str], note: str = LR):
    """A rule: every (a, b, metric) of ``pairs`` on the LAMA-CKL record, combined (Epoch: lower is better); the note
    says which lr it used (:func:`lr_note`)."""
    def rule(records: Mapping[str, Record]) -> Judgement:
        rec = records[LAMA]
        extra = lr_note(records, [m for a, b, _ in pairs for m in (a, b)])
        return combine([above(rec, a, b, m, lower_better=m == "epoch") for a, b, m in pairs],
                       f"{note}; {extra}" if extra else note)
    return rule


def lr_selection(records: Mapping[str, Record]) -> Judgement:
    """TAALM against every baseline of the lr study, each method at its own lr (``taalm_rules.select_lr`` on the
    selection split), on the test split's Top Acc and Total Knowledge (:func:`above`)."""
    rec = records[LR_SEL]
    chosen = select_lr(rec.rows)
    if "TAALM" not in chosen:
        return not_tested(f"{LR_SEL} has no TAALM run")
    rivals = [m for m in chosen if not m.startswith("TAALM") and m != "Oracle"]
    if not rivals:
        return not_tested(f"{LR_SEL} has no baseline beside TAALM")

    def judged(picked):
        table = Record(rec.name, rec.origin, rec.provenance, rec.regime, tuple(at_chosen(rec.rows, picked)))
        return combine([above(table, "TAALM", b, m) for b in rivals for m in ("top_acc", "total")])

    main = judged(chosen)
    alt = select_lr(rec.rows, metric="top_acc")  # the sensitivity: the same rule on the selection Top Acc
    return Judgement(main.verdict, f"{main.reason} (each method at its own lr, chosen by one rule on the selection "
                     f"split's Total Knowledge, {_seeds(rec)}: {describe(chosen)}; test split, "
                     f"{rec.regime['n_to_learn']} TO-LEARN facts; chosen on the selection Top Acc instead, "
                     f"{describe(alt)}: {judged(alt).verdict})", main.ours)


def twiki_lower(rec: Record, a: str, b: str, probes: str) -> Judgement:
    """"``a``'s after-training NLL on ``probes`` is below ``b``'s": the sign of ``b − a`` in every (seed, period)
    pair; every pair below holds (at most partly on one seed), every pair above refutes (at most not reproduced
    on one seed), mixed signs are not reproduced."""
    pair = paired(rec.rows, "after", {"method": b, "probes": probes}, {"method": a, "probes": probes},
                  by=("seed", "period"))
    k, n = sum(d > 0 for d in pair.diffs.values), pair.diffs.n
    shown = f"{a} vs {b} {probes}: {pair.show(3)}"
    claim = f"{a} below {b} on the {probes} NLL"
    if k == n and n > 1:
        j = Judgement("holds", f"{claim} after every period of every seed ({n})", shown)
    elif k == 0 and n > 1:
        j = Judgement("refuted", f"{claim}: above it after every period of every seed ({n})", shown)
    else:
        j = Judgement("not reproduced" if n > 1 else ("partly" if k else "not reproduced"),
                      f"{claim} in {k} of {n} (seed, period) pairs", shown)
    return one_seed_cap(j, [rec])


def at_epochs(rec: Record, epochs: int) -> Record:
    """The rows of the TemporalWiki epochs record at ``epochs`` per period, as a record of their own."""
    return Record(rec.name, rec.origin, rec.provenance, rec.regime,
                  tuple(r for r in rec.rows if r.get("epochs") == epochs))


def same_runs(main: Record, again: Record) -> None:
    """The main study's TemporalWiki rows (1 epoch) against the epochs record's 1-epoch rows, made again from the
    same θ0 and φ: every shared (method, seed, period, probes) has the same NLL before and after.

    Raises:
      ValueError: a row differs (names both records and the row)."""
    mine = {(r["method"], r["seed"], r["period"], r["probes"]): r for r in main.rows}
    for r in again.rows:
        k = (r["method"], r["seed"], r["period"], r["probes"])
        if k in mine and any(abs(float(mine[k][m]) - float(r[m])) > 1e-6 for m in ("before", "after")):
            raise ValueError(f"{main.name} and {again.name} disagree at 1 epoch on {k}: {mine[k]} vs {r}")


def twiki(*pairs: tuple[str, str, str], note: str = LR):
    """A rule: every (a, b, probes) of ``pairs`` (:func:`twiki_lower`), combined. With the epochs record
    (:data:`TWIKI_EP`) the verdict is the one at its largest number of epochs per period (one epoch is 2 updates
    per period here, where the paper's one epoch of a Wikipedia diff set is many), the others named beside it;
    without it, the main study's 1-epoch record."""
    def rule(records: Mapping[str, Record]) -> Judgement:
        if TWIKI_EP not in records:
            return combine([twiki_lower(records[TWIKI], a, b, p) for a, b, p in pairs], note)
        rec = records[TWIKI_EP]
        doses = sorted({int(r["epochs"]) for r in rec.rows})
        if TWIKI in records:
            same_runs(records[TWIKI], at_epochs(rec, 1))
        ran = {r["method"] for r in rec.rows}
        mine = [(a, b, p) for a, b, p in pairs if {a, b} <= ran]
        left = [(a, b, p) for a, b, p in pairs if not {a, b} <= ran]  # methods the epochs study did not run
        if not mine:
            return combine([twiki_lower(records[TWIKI], a, b, p) for a, b, p in pairs], note)
        by = {e: [twiki_lower(at_epochs(rec, e), a, b, p) for a, b, p in mine] for e in doses}
        top = doses[-1]
        j = combine([*by[top], *(twiki_lower(records[TWIKI], a, b, p) for a, b, p in left if TWIKI in records)])
        others = "; ".join(f"at {e} epoch{'s' if e > 1 else ''}: {combine(by[e]).verdict}" for e in doses[:-1])
        absent = sorted({m for a, b, _ in left for m in (a, b)} - ran)
        only = f"; at 1 epoch only (not in the epochs study): {', '.join(absent)}" if left else ""
        return Judgement(j.verdict, f"at {top} epochs per period: {j.reason} ({note}; {others}{only})", j.ours)
    return rule


def _over_runs(rec: Record, metric: str, a: dict, b: dict, *, claim: str, digits: int = 3) -> tuple[Judgement,
                                                                                                     Gap | Paired]:
    """"``a`` above ``b`` on ``metric``" over the record's runs: paired on (pt, seed) (every run of ``a`` against
    the run of ``b`` of its PT model and seed; a difference counts only when every pair has one sign), or, where
    no run pairs, the seeds' ranges; at most ``partly`` on one seed (:func:`one_seed_cap`)."""
    try:
        g = paired(rec.rows, metric, a, b, by=("pt", "seed"))
    except ValueError:
        g = gap(rec.values(metric, **a), rec.values(metric, **b))
    return one_seed_cap(ordered(g, claim=claim, digits=digits), [rec]), g


def _g(xs) -> str:
    """``mean (lo–hi, n)`` of values spanning orders of magnitude (3 significant digits)."""
    s = spread(xs)
    return f"{s.mean:.3g} (n=1)" if s.n == 1 else f"{s.mean:.3g} ({s.lo:.3g}–{s.hi:.3g}, n={s.n})"


def _phi_tokens(records: Mapping[str, Record]) -> Judgement:
    """φ's mean weight on the fact's object/value tokens against the other tokens, in both worlds, run by run."""
    parts = []
    for name, kind, target in ((PHI_W, "evidence", "object"), (BIO, "phi_weights", "value")):
        rec = bio_phi(records) if name == BIO else records[name]
        a, b = {"kind": kind, "tokens": target}, {"kind": kind, "tokens": "other"}
        j, g = _over_runs(rec, "mean_weight", a, b, claim=f"φ's mean weight on {target} tokens above the rest "
                                                            f"({name}, {_seeds(rec)})")
        parts.append(Judgement(j.verdict, j.reason, f"{target} {_g(rec.values('mean_weight', **a))} vs other "
                                                    f"{_g(rec.values('mean_weight', **b))}; {g.show(3)}"))
    shares = records[PHI_W].select(kind="object_share")
    uniform, phi = (bio_phi(records).values("median", kind="value_share", weights=w) for w in ("uniform", "phi"))
    mins = " / ".join(f"{r['min']:.2g}" for r in shares)
    j = combine(parts, f"LAMA-CKL object share of a document's weight: least per seed {mins}, median ≥ "
                       f"{min(r['median'] for r in shares):.4g}; Biography median value share {_g(uniform)} under "
                       f"uniform weights → {_g(phi)} under φ")
    return Judgement(j.verdict, j.reason, "; ".join(f"{t} {p.ours}" for t, p in zip(("LAMA-CKL", "Biography"), parts)))


PHI_RUN, UNIFORM_RUN, PLAIN_RUN = "replay-all + TAALM φ", "replay-all + TWPPL w = 1", "replay-all"


def bio_phi(records: Mapping[str, Record]) -> Record:
    """The Biography φ runs of :data:`BIO` and, where present, :data:`BIO_2PT` as one record whose PT labels name
    their record (``1:s0``; ``2:s0``, ``2:s1``): the two machines' PT models are different models, so runs pair only
    within a record; seeds and PT replicates are counted over both."""
    recs = [records[BIO]] + ([records[BIO_2PT]] if BIO_2PT in records else [])
    if len(recs) == 1:
        return recs[0]
    rows = tuple(dict(r, pt=f"{i}:{r['pt']}") if "pt" in r else r for i, rec in enumerate(recs, 1) for r in rec.rows)
    prov = dict(recs[0].provenance, seeds=sorted({s for rec in recs for s in rec.provenance.get("seeds", [])}),
                pt_replicates=[f"{i}:{p}" for i, rec in enumerate(recs, 1)
                               for p in rec.provenance.get("pt_replicates", [])])
    return Record(BIO, recs[0].origin, prov, recs[0].regime, rows)


def _phi_vs_uniform(records: Mapping[str, Record]) -> Judgement:
    """Replay-all with TWPPL under φ against TWPPL at w = 1 (the same loss, uniform weights) at the last step, run
    by run; the w = 1 control against plain replay-all shows what TWPPL's normalisation alone does."""
    rec = bio_phi(records)
    step = max(r["step"] for r in rec.select(kind="cpt", run=PHI_RUN))
    parts = []
    for metric in ("continual_hfta", "original_hfta"):
        j, g = _over_runs(rec, metric, {"kind": "cpt", "run": PHI_RUN, "step": step},
                          {"kind": "cpt", "run": UNIFORM_RUN, "step": step},
                          claim=f"φ above w = 1 on {metric} at step {step} ({_seeds(rec)})")
        parts.append(Judgement(j.verdict, j.reason, f"{metric} φ vs w = 1: {g.show(3)}"))
    try:
        ctrl = paired(rec.rows, "continual_hfta", {"kind": "cpt", "run": UNIFORM_RUN, "step": step},
                      {"kind": "cpt", "run": PLAIN_RUN, "step": step}, by=("pt", "seed"))
        note = f"w = 1 − plain replay-all on continual_hfta: {ctrl.show(3)}"
    except ValueError:
        note = "no plain replay-all run pairs with w = 1"
    return combine(parts, note)


def _untested(reason: str):
    return lambda records: not_tested(reason)


def _claim(id, section, statement, paper_value, rule, records=(LAMA, LR_SEL), *, regime=PAPER_LAMA, command=SMALL,
           **kw) -> PaperClaim:
    return PaperClaim(id=f"taalm.{id}", paper="taalm", section=section, statement=statement, paper_value=paper_value,
                      paper_regime=regime, command=command if records else "", records=tuple(records), rule=rule,
                      **kw)


LAMA_WHY = ("docs/taalm.md §Why the numbers differ: a 0.27 M θ on 45 facts at 3 updates per epoch learns slower "
            "than Llama-2-7B on 500 (every peak late); three seeds (one θ0 and φ each), one fact = 0.022 Top Acc.")
KADAPTER_WHY = ("docs/taalm.md, 'K-Adapter with a budget': at the table's setting K-Adapter learns nothing with "
                "dropout 0.9 or 0.1: its output, 0.1·LayerNorm(h) added to the frozen θ0's final state, does not move "
                "θ0's answer on any probe, at any lr up to 3e-2 (10×) in 30 epochs; at 3e-2 and 90 epochs (3×) the "
                "dropout-0.1 variant learns 0.067–0.100 of the TO-LEARN facts keeping NF 0.93–0.99, TAALM on top of "
                "it 0.117–0.233, and the reference's dropout 0.9 still nothing.")


def sweep_epochs(rec: Record) -> int:
    """The epochs per run of a TAALM sweep record: the sweep's ``--epochs`` (``provenance.config.sweep.epochs``),
    else the LAMA-CKL epochs every seed's config gives (``provenance.config.s<k>.ckl.epochs``).

    Raises:
      ValueError: neither is recorded, or the seeds' configs disagree.
    """
    config = rec.provenance.get("config", {})
    epochs = config.get("sweep", {}).get("epochs")
    if epochs is not None:
        return int(epochs)
    per_seed = {int(c["ckl"]["epochs"]) for k, c in config.items() if k != "sweep" and "ckl" in c}
    if len(per_seed) != 1:
        raise ValueError(f"record {rec.name}: provenance.config records no single epochs per run (sweep.epochs, or "
                         f"s<k>.ckl.epochs: {sorted(per_seed)})")
    return per_seed.pop()


def kadapter_budget(records: Mapping[str, Record]) -> str:
    """What K-Adapter learns when given a budget: per K-Adapter method of the lr studies (:data:`LR_SEL`, 30
    epochs at each swept lr; :data:`LR_E90`, 90 epochs), the highest seeds' mean test Top Acc over the lrs and its
    NF Acc; ``""`` without them."""
    parts = []
    for name in (LR_SEL, LR_E90):
        if name not in records:
            continue
        rec = records[name]
        for m in KADAPTERS:
            rows = rec.select(method=m, split="test")
            if not rows:
                continue
            by_lr = {}
            for r in rows:
                by_lr.setdefault(float(r["lr"]), []).append(r)
            lr, best = max(by_lr.items(), key=lambda kv: (spread([r["top_acc"] for r in kv[1]]).mean, -kv[0]))
            top, nf = spread([r["top_acc"] for r in best]), spread([r["nf_acc"] for r in best])
            lrs = "/".join(f"{x:g}" for x in sorted(by_lr))
            parts.append(f"{m} at {sweep_epochs(rec)} epochs, lr {lrs}: best test Top "
                         f"Acc {top.mean:.3f} (lr {lr:g}, {top.n} seeds; NF {nf.mean:.3f})")
    return "budget: " + "; ".join(parts) if parts else ""


def with_budget(rule):
    """``rule`` with :func:`kadapter_budget` appended to its reason (the budget records never change the
    verdict)."""
    def judged(records: Mapping[str, Record]) -> Judgement:
        j = rule(records)
        extra = kadapter_budget(records)
        return Judgement(j.verdict, f"{j.reason} ({extra})" if extra else j.reason, j.ours)
    return judged


def _table(rec: Record, rows) -> Record:
    """``rows`` of ``rec`` as a LAMA-CKL table for :func:`above`: the fact counts (one fact's resolution) from the
    rows' own ``n_to_learn`` / ``n_not_to_forget``."""
    rows = tuple(rows)
    regime = {**rec.regime, "n_to_learn": min(r["n_to_learn"] for r in rows),
              "n_not_to_forget": min(r["n_not_to_forget"] for r in rows)}
    return Record(rec.name, rec.origin, rec.provenance, regime, rows)


def _test_split(rec: Record) -> Record:
    """An lr-study record's test-split rows as a LAMA-CKL table."""
    return _table(rec, (r for r in rec.rows if r.get("split") == "test"))


def _plus_kadapter(records: Mapping[str, Record]) -> Judgement:
    """TAALM + K-Adapter above K-Adapter alone (Top Acc, Total Knowledge), decided where K-Adapter alone learns
    at least one TO-LEARN fact at some seed (a setting where it learns nothing cannot show what TAALM adds): the
    shared setting of the LAMA-CKL table, else the budget study (:data:`LR_E90`, 10× the lr and 3× the epochs);
    the comparisons where K-Adapter learns nothing are shown beside the verdict."""
    shared = records[LAMA]
    budget = _test_split(records[LR_E90]) if LR_E90 in records else None
    decide, shown = [], []
    for where, rec in (("shared setting", shared), ("budget 3e-2 × 90 epochs", budget)):
        if rec is None:
            continue
        for k in ("K-Adapter", "K-Adapter (dropout 0.1)"):
            if not rec.select(method=f"TAALM + {k}") or not rec.select(method=k):
                continue
            parts = [above(rec, f"TAALM + {k}", k, m) for m in ("top_acc", "total")]
            learns = max(rec.values("top_acc", method=k)) > 0
            (decide if learns else shown).append((where, k, parts))
    note = "; ".join(f"{k} learns nothing at the {where}: " + "; ".join(j.ours for j in parts)
                     for where, k, parts in shown)
    if not decide:
        return Judgement("not reproduced", "K-Adapter alone learns no TO-LEARN fact at any setting measured, so "
                         f"what TAALM adds to it cannot show ({LR})", note)
    j = combine([j for _, _, parts in decide for j in parts],
                "decided at " + ", ".join(f"{k} at the {where}" for where, k, _ in decide) + f"; shared setting: {LR}")
    return Judgement(j.verdict, j.reason + (f" ({note})" if note else ""), j.ours)


def _phi_other_size(records: Mapping[str, Record]) -> Judgement:
    """TAALM on θ0 with a φ whose base is smaller than θ0 (same tokenizer) above Finetune on Top Acc and Total
    Knowledge, per seed (:func:`above`); TAALM with θ0's own-size φ shown beside it."""
    rec = records[PHI_SIZE]
    sizes = sorted({r["phi"] for r in rec.rows if r.get("phi") not in (None, "same")})
    if not sizes:
        return not_tested(f"{PHI_SIZE} has no φ of another size")
    table = _table(rec, (dict(r, method=f"TAALM (φ {r['phi']})") if r.get("phi") else dict(r) for r in rec.rows))
    parts = [above(table, f"TAALM (φ {w})", "Finetune", m) for w in sizes for m in ("top_acc", "total")]
    same = [above(table, "TAALM (φ same)", f"TAALM (φ {w})", "top_acc") for w in sizes]
    words = {"holds": "the own-size φ above it", "partly": "the own-size φ above it on some seeds",
             "refuted": "the own-size φ below it"}
    note = "; ".join(f"own-size φ against it: {j.ours} ({words.get(j.verdict, 'no difference beyond the spread')})"
                     for j in same)
    return combine(parts, note)


def _oracle(records: Mapping[str, Record]) -> Judgement:
    rec = records[LAMA]
    j = above(rec, "Oracle", "TAALM", "top_acc")
    ratio = gap(rec.values("top_acc", method="TAALM"), rec.values("top_acc", method="Oracle"))
    ratio = ratio.a.mean / ratio.b.mean  # the seeds' mean Top Acc
    extra = lr_note(records, ("Oracle", "TAALM"))
    return combine([j], f"TAALM = {ratio:.2f} of Oracle, paper ≈ 0.78 [REPORTED]; {LR}" + (f"; {extra}" if extra
                                                                                          else ""))


TWIKI_BASELINES = ("RHO-1", "Mix-review", "RecAdam", "K-Adapter", "K-Adapter (dropout 0.1)")

CLAIMS: tuple[PaperClaim, ...] = (
    _claim("lama-vs-finetune", "Table 1 (LAMA-CKL, §5.6 metrics)",
           "On LAMA-CKL, TAALM learns the new (TO-LEARN) knowledge far better than fine-tuning and ends with the "
           "most Total Knowledge: Top Acc 0.429 vs Finetune's 0.115, Total Knowledge 1.327 vs 0.932",
           "Top Acc 0.4290 vs 0.1150; Total 1.3273 vs 0.9324",
           lama(("TAALM", "Finetune", "top_acc"), ("TAALM", "Finetune", "total")), headline=True,
           explanation="TAALM 3.1× Finetune here (0.367 vs 0.119 over three seeds; paper 3.7×) at an lr chosen on "
                       "Finetune and Oracle; " + LAMA_WHY),
    _claim("lama-speed", "Table 1 (Epoch column)",
           "TAALM reaches its best TO-LEARN accuracy much earlier than Finetune (epoch 4 vs 16)",
           "Epoch 4 vs 16", lama(("TAALM", "Finetune", "epoch"), note=f"paper 4 vs 16; {LR}"),
           explanation="Earlier on every seed, but both peak late here (TAALM epochs 23 / 25 / 19, Finetune "
                       "28 / 30 / 25 of 30; the paper's 4 vs 16 is a far larger gap); the table's Epoch is the "
                       "epoch of the peak (per-epoch curves in each run's accuracy.png). " + LAMA_WHY),
    _claim("lama-forgetting", "Table 1 (NF Acc column)",
           "TAALM forgets less of the known (NOT-TO-FORGET) facts than Finetune while learning: NF Acc 0.898 vs 0.817",
           "NF Acc 0.8983 vs 0.8174", lama(("TAALM", "Finetune", "nf_acc")),
           explanation="21.7 points here (0.850 vs 0.633, three seeds): TAALM updates on ≈ 2 tokens per document, "
                       "and θ0's facts, memorised by a 0.27 M model in 40 epochs, erode faster under Finetune than "
                       "a 7B model's. " + LAMA_WHY),
    _claim("lama-vs-rho1", "Table 1 (RHO-1 row)",
           "TAALM's learned token weights beat RHO-1's token selection: Top Acc 0.429 vs 0.141, Total Knowledge "
           "1.327 vs 0.963",
           "Top Acc 0.4290 vs 0.1410; Total 1.3273 vs 0.9633",
           lama(*((("TAALM", r, m) for r in ("RHO-1", "RHO-1 (taalm_code)") for m in ("top_acc", "total")))),
           explanation="Both RHO-1 rules: the faithful top-k by excess loss over θ0 (0.030 over three seeds: it drops "
                       "the new-fact tokens as θ learns them, NF 0.98) and the released argsort rule (0.078, a "
                       "slower Finetune), docs/taalm.md §RHO-1."),
    _claim("rho1-vs-finetune", "Table 1 (RHO-1 and Finetune rows)",
           "RHO-1 learns more than plain fine-tuning: Top Acc 0.141 vs 0.115 (NF Acc 0.822 vs 0.817)",
           "Top Acc 0.1410 vs 0.1150",
           lama(("RHO-1", "Finetune", "top_acc"), ("RHO-1 (taalm_code)", "Finetune", "top_acc")),
           explanation="Neither rule learns more than Finetune here (0.030 faithful, below Finetune on every seed; "
                       "0.078 the released argsort rule, which keeps an arbitrary ≈ 40 % of positions, spec §7.2, "
                       "below on every seed but within the spread)."),
    _claim("lama-vs-mixreview", "Table 1 (Mix-review row)",
           "TAALM beats Mix-review (replay of old evidence): Top Acc 0.429 vs 0.080, Total Knowledge 1.327 vs 0.879",
           "Top Acc 0.4290 vs 0.0800; Total 1.3273 vs 0.8788",
           lama(("TAALM", "Mix-review", "top_acc"), ("TAALM", "Mix-review", "total")),
           explanation="Mix-review replays the NOT-TO-FORGET evidence itself (quirk #25) and keeps NF 0.862 "
                       "(0.767–0.915), but learns 0.078. " + LAMA_WHY),
    _claim("lama-vs-recadam", "Table 1 (RecAdam row)",
           "TAALM beats RecAdam: Top Acc 0.429 vs 0.100, Total Knowledge 1.327 vs 0.893",
           "Top Acc 0.4290 vs 0.1000; Total 1.3273 vs 0.8933",
           lama(("TAALM", "RecAdam", "top_acc"), ("TAALM", "RecAdam", "total")),
           explanation="Our RecAdam anneals (the released grouping makes it plain Adam, quirk #12): λ(t) ≈ 0 for "
                       "the first half of the 90 updates, so it learns late (0.067). " + LAMA_WHY),
    _claim("lama-vs-kadapter", "Table 1 (K-Adapter row)",
           "TAALM beats K-Adapter: Top Acc 0.429 vs 0.126, Total Knowledge 1.327 vs 1.124",
           "Top Acc 0.4290 vs 0.1260; Total 1.3273 vs 1.1240",
           with_budget(lama(*((("TAALM", k, m) for k in ("K-Adapter", "K-Adapter (dropout 0.1)")
                               for m in ("top_acc", "total"))))),
           context=(LR_E90,), explanation="Won against a K-Adapter that learns nothing (Top Acc 0.000): "
                                          + KADAPTER_WHY),
    _claim("kadapter-row", "Table 1 (K-Adapter and Finetune rows)",
           "K-Adapter keeps nearly all old knowledge (NF Acc 0.998) and still learns as much as Finetune "
           "(Top Acc 0.126 vs 0.115)",
           "Top Acc 0.1260 vs 0.1150; NF Acc 0.9980 vs 0.8174",
           with_budget(lama(*((k, "Finetune", m) for k in ("K-Adapter", "K-Adapter (dropout 0.1)")
                              for m in ("top_acc", "nf_acc")))),
           context=(LR_E90,), explanation=KADAPTER_WHY),
    _claim("oracle-bound", "§6 Oracle; Table 1 (Oracle row) [REPORTED]",
           "Oracle (weight 1 on the evidence's object tokens, 0 elsewhere) is the upper bound; TAALM reaches about "
           "78 % of it",
           "Oracle Top Acc ≈ 0.55 [REPORTED]; not in the reference release",
           _oracle,
           explanation="Ratio 0.96 here (0.367 / 0.381; TAALM above Oracle on seed 1): both drive the weighted loss "
                       "to ≈ 0 and stall at a ceiling "
                       "of this small θ (the new employer memorised in context, transferred only partly to the "
                       "descriptive probe), docs/taalm.md §Oracle below the reported ≈ 0.55."),
    _claim("plus-kadapter", "Table 1 (TAALM + K-Adapter row)",
           "TAALM combines with K-Adapter: TAALM + K-Adapter reaches Top Acc 0.332 (K-Adapter alone 0.126) with "
           "NF Acc 0.975, Total Knowledge 1.307 vs 1.124",
           "Top Acc 0.3320 vs 0.1260; Total 1.3067 vs 1.1240",
           _plus_kadapter, (LAMA, LR_E90),
           explanation=KADAPTER_WHY),
    _claim("kadapter-stacks", "Table 1 (TAALM + K-Adapter + RecAdam / + Mix-review rows)",
           "TAALM lifts the K-Adapter stacks too: TAALM + K-Adapter + RecAdam Top Acc 0.264, TAALM + K-Adapter + "
           "Mix-review + RecAdam 0.314, against K-Adapter's 0.126",
           "Top Acc 0.2640 / 0.3140 vs 0.1260",
           with_budget(lama(*((s, "K-Adapter", "top_acc") for s in ("TAALM + K-Adapter + RecAdam",
                                                         "TAALM + K-Adapter + Mix-review + RecAdam")))),
           context=(LR_E90,), explanation=KADAPTER_WHY),
    _claim("plus-mixreview", "Table 1 (TAALM + Mix-review row)",
           "TAALM is compatible with replay: TAALM + Mix-review has the table's best Top Acc and Total Knowledge "
           "(0.450, 1.351), above TAALM (0.429, 1.327) and Mix-review (0.080, 0.879)",
           "Top Acc 0.4500 vs 0.4290 / 0.0800; Total 1.3512 vs 1.3273 / 0.8788",
           lama(*((("TAALM + Mix-review", b, m) for b in ("TAALM", "Mix-review") for m in ("top_acc", "total")))),
           explanation="Far above Mix-review alone; against TAALM the same mean Top Acc (0.367) and a lower, more "
                       "spread Total (1.159 vs 1.217: NF 0.665 on seed 1); the paper's own gain over TAALM is "
                       "0.021. In a Biography CPT run φ adds to replay-all as well (taalm.phi-vs-uniform). "
                       + LAMA_WHY),
    _claim("plus-recadam", "Table 1 (TAALM + RecAdam row)",
           "TAALM combines with RecAdam: TAALM + RecAdam Top Acc 0.436 and Total Knowledge 1.334, above TAALM "
           "(0.429, 1.327) and RecAdam (0.100, 0.893)",
           "Top Acc 0.4360 vs 0.4290 / 0.1000; Total 1.3342 vs 1.3273 / 0.8933",
           lama(*((("TAALM + RecAdam", b, m) for b in ("TAALM", "RecAdam") for m in ("top_acc", "total")))),
           explanation="Far above RecAdam alone; against TAALM −1, −2 and −0.5 facts Top Acc and the same "
                       "mean Total (1.217), inside the spread (the paper's gain, +0.007 / +0.007, is smaller than "
                       "one fact here). Our RecAdam anneals; the paper's is plain Adam (quirk #12)."),
    _claim("twiki-changed-vs-finetune", "TemporalWiki table (changed probes), §8",
           "On TemporalWiki, TAALM learns the changed knowledge better than fine-tuning: lower object NLL on the "
           "changed probes after each period",
           "TAALM row not in the reference release (spec §9); Finetune changed 10.057 / 9.531 / 9.632",
           twiki(("TAALM", "Finetune", "changed")), (TWIKI_EP,), context=(TWIKI,), command=TWIKI_EP_CMD,
           regime=PAPER_TWIKI,
           explanation="The changed NLL falls by 0.34 / 1.27 / 1.87 per period (mean of three seeds) at 1 / 3 / 5 "
                       "epochs, Finetune's by 0.08 / 0.41 / 0.81; absolute NLLs are not comparable with TinyLlama's "
                       "on real diffs (docs/taalm.md §TemporalWiki, 'Several epochs per period')."),
    _claim("twiki-changed-vs-baselines", "TemporalWiki table (changed probes), §8",
           "On TemporalWiki, TAALM has the lowest changed-knowledge NLL of the methods: below RHO-1, Mix-review, "
           "RecAdam and K-Adapter after each period",
           "TAALM row not in the reference release; Mix-review 9.580 / 9.487 / 9.452, RecAdam 9.605 / 9.032 / 9.480",
           twiki(*(("TAALM", b, "changed") for b in TWIKI_BASELINES)), (TWIKI_EP,), context=(TWIKI,),
           command=TWIKI_EP_CMD, regime=PAPER_TWIKI,
           explanation="Only Oracle, which is not a baseline of the claim, comes close (a fall of 2.23 per period at "
                       "5 epochs against TAALM's 1.87); K-Adapter (dropout 0.1) ran at 1 epoch only."),
    _claim("twiki-unchanged", "TemporalWiki table (unchanged probes), §8",
           "On TemporalWiki, TAALM keeps the unchanged knowledge: its unchanged-probe NLL stays below the baselines' "
           "after each period",
           "TAALM row not in the reference release; Finetune unchanged 9.999 / 9.554 / 9.737, K-Adapter 4.019 / "
           "4.030 / 4.037",
           twiki(*(("TAALM", b, "unchanged") for b in ("Finetune", "Mix-review", "RecAdam", "RHO-1", "K-Adapter"))),
           (TWIKI_EP,), context=(TWIKI,), command=TWIKI_EP_CMD, regime=PAPER_TWIKI,
           explanation="Below Mix-review in all 9 (seed, period) pairs, Finetune in 7, RecAdam and RHO-1 in 6, "
                       "K-Adapter in 1 at 1 epoch (it barely updates); at 5 epochs every method that learns raises "
                       "the unchanged NLL (Finetune +0.09, TAALM +0.08 per period), RHO-1 and K-Adapter, which learn "
                       "least, hardly (≤ 0.004)."),
    _claim("twiki-baseline-order", "TemporalWiki table (baseline rows), §9",
           "Mix-review and RecAdam end every period below Finetune on both probe sets (changed 9.580 / 9.487 / "
           "9.452 and 9.605 / 9.032 / 9.480 vs 10.057 / 9.531 / 9.632)",
           "changed MR 9.580/9.487/9.452, RA 9.605/9.032/9.480 vs FT 10.057/9.531/9.632; unchanged MR 9.529/"
           "9.514/9.563, RA 9.515/8.993/9.580 vs FT 9.999/9.554/9.737",
           twiki(*((b, "Finetune", p) for b in ("Mix-review", "RecAdam") for p in ("changed", "unchanged"))),
           (TWIKI_EP,), context=(TWIKI,), command=TWIKI_EP_CMD, regime=PAPER_TWIKI,
           explanation="At 1 epoch Mix-review ≈ Finetune (≤ 0.024 NLL, both signs); at 5 epochs both learn (the "
                       "changed NLL falls 0.73 and 0.81 per period) and replay costs Mix-review a little of it while "
                       "keeping more unchanged knowledge (+0.07 vs +0.09); RecAdam learns least of the three (0.33); "
                       "our RecAdam anneals (λ ≈ 0 early), the paper's is plain Adam (quirk #12)."),
    _claim("twiki-kadapter", "TemporalWiki table (K-Adapter row), §9",
           "K-Adapter has by far the lowest NLL of the baselines on TemporalWiki, changed and unchanged (≈ 4.0–4.4 "
           "against ≥ 9.0 for the QLoRA methods)",
           "changed 4.268 / 4.154 / 4.357, unchanged 4.019 / 4.030 / 4.037",
           twiki(*(("K-Adapter", b, p) for b in ("Finetune", "Mix-review", "RecAdam")
                   for p in ("changed", "unchanged"))),
           (TWIKI_EP,), context=(TWIKI,), command=TWIKI_EP_CMD, regime=PAPER_TWIKI,
           explanation="Here K-Adapter hardly trains (its changed NLL falls 0.005 / 0.013 / 0.025 per period at 1 "
                       "/ 3 / 5 epochs; TAALM + K-Adapter 0.016 / 0.041 / 0.063): lowest unchanged, highest changed "
                       "NLL on every seed; the paper's 2× gap is a different output level. "
                       + KADAPTER_WHY),
    _claim("phi-important-tokens", "§3–§4 (Train-Attention, meta-gradient); the weight heat maps",
           "Train-Attention, meta-learned through the inner update, predicts which tokens matter: its weights "
           "concentrate on the tokens that carry the knowledge the later task asks for",
           "qualitative (heat maps); no number in the reference release", _phi_tokens, (PHI_W, BIO, BIO_2PT),
           command=f"{PHI_CMD}; {BIO_CMD}",
           regime="TinyLlama-1.1B φ (LoRA + scalar head), meta-trained on 4,166 LAMA (D, T_D) pairs, 30 epochs",
           explanation="Every seed's LAMA-CKL φ became almost the Oracle mask (object 0.285 / 0.678 / 0.317 vs other "
                       "≤ 7e-4; the median document puts all but 1e-5 of its weight on the object); the Biography φ "
                       "is softer and depends on the meta-step its checkpoint rule picks (value vs other from 0.978 vs "
                       "0.937 at step 40 to 0.571 vs 0.026 at step 200), above the rest in all 9 (PT model, seed) "
                       "pairs of two studies (3 PT models; docs/taalm.md §What φ learned)."),
    _claim("phi-vs-uniform", "§2 TWPPL (Finetune = the same update with uniform weights); beyond the paper",
           "Weighting the training tokens by the meta-learned Train-Attention (TWPPL) teaches new knowledge better "
           "than the same training with uniform weights",
           "LAMA-CKL TAALM 0.429 vs Finetune 0.115 Top Acc", _phi_vs_uniform, (BIO, BIO_2PT), command=BIO_CMD,
           regime=PAPER_LAMA,
           explanation="An ablation the paper does not run, in a Biography CPT with replay-all, paired on (PT model, "
                       "seed) over two studies: the first (one PT model × 3 seeds) gained Continual hFTA +0.007 … "
                       "+0.075 in every pair; the second, on two PT models of another machine (same spec, other "
                       "floating-point results) × 3 seeds, lost −0.003 … −0.079 in every pair, its φ putting more "
                       "weight on the values (median value share 0.21–0.82 against 0.13–0.42). TWPPL at w = 1 "
                       "matches plain replay within 0.0013 in all 9 pairs, so both signs are φ's weights. On Continual "
                       "sFTA (the probability of the right first token, not the argmax the verdict reads) φ is above "
                       "in all 9 pairs (+0.004 … +0.126). Replay documents are weighted by φ too; one method "
                       "(docs/taalm.md)."),
    _claim("lama-7b", "Table 1 at the paper's scale",
           "TAALM's LAMA-CKL results at Llama-2-7B QLoRA with a TinyLlama-1.1B φ (Top Acc 0.429 at epoch 4, "
           "NF Acc 0.898, Total Knowledge 1.327)", "Top Acc 0.4290, NF Acc 0.8983",
           _untested("needs the reference's LAMA-CKL files, Llama-2-7B and TinyLlama-1.1B-Chat checkpoints and a "
                     "GPU of ≥ 141 GB for batch 64 (≈ 115 GB estimated): cfka taalm --lama-ckl DIR --model "
                     "Llama-2-7b-hf --phi-model TinyLlama-1.1B-Chat, ≈ 2 h φ + ≈ 6 min per method (estimated), "
                     "≥ 2 seeds"), (),
           explanation="The runner exists and is tested on files in the reference layout with a tiny random-init "
                       "model; no real file or checkpoint was available offline (docs/taalm.md §Not done)."),
    _claim("phi-other-size", "§3, §4.4 (φ TinyLlama-1.1B for the 7B θ)",
           "A smaller Train-Attention model that shares θ's tokenizer (TinyLlama-1.1B φ for a Llama-2-7B θ) "
           "meta-learns token weights that serve the larger θ", "TAALM 0.4290 Top Acc with the 1.1B φ",
           _phi_other_size, (PHI_SIZE,), command=PHI_SIZE_CMD,
           explanation="docs/taalm.md, 'A φ of another size than θ0': synthetic LAMA-CKL, θ0 a 3-layer d = 64 "
                       "port (0.27 M), φ bases d = 32 with 3 layers (0.10 M) and 1 layer (0.07 M) pre-trained on the "
                       "same texts with θ0's tokenizer (the paper's ratio is 1.1B / 7B); the 3-layer one serves θ0 as "
                       "well as θ0's own-size φ, the 1-layer one less well (below it on every seed) but still far "
                       "above Finetune; the real θ/φ pair needs checkpoints and a GPU (cfka taalm --lama-ckl DIR "
                       "--model θ --phi-model φ)."),
    _claim("twiki-real", "TemporalWiki table, §8", "On the real TemporalWiki (TinyLlama-1.1B, Wikipedia diffs "
           "0910 → 1112), TAALM has the lowest changed and unchanged NLL", "TAALM row not in the reference release",
           _untested("needs the TemporalWiki diff sets and probes, a TinyLlama-1.1B-Chat checkpoint and a "
                     "TemporalWiki φ: cfka taalm --temporalwiki DIR --model TinyLlama --phi-train "
                     "train_attention_traindata_0809.jsonl, on a GPU (this CPU cannot hold a 0.5B training step)"), (),
           regime=PAPER_TWIKI, explanation="Only the synthetic three-period analogue ran (taalm.twiki-*)."),
    _claim("tinyllama-theta", "Table 5 [REPORTED; attribution uncertain]",
           "TAALM with a TinyLlama-1.1B θ on LAMA-CKL reaches Top Acc 32.6", "Top Acc 32.6 [REPORTED]",
           _untested("needs the real LAMA-CKL files and a TinyLlama-1.1B θ and φ (cfka taalm --lama-ckl DIR --model "
                     "TinyLlama), ≥ 2 seeds, and the paper's Table 5 to confirm what 32.6 is"), (),
           explanation="The number comes from a secondary listing; the spec could not check it against the paper."),
    _claim("lr-selection", "§7 (one setting for every method)",
           "Every method runs with the same θ start, learning rate (1e-4), effective batch (64) and 30 epochs, and "
           "TAALM leads the table at that shared setting",
           "lr 1e-4 for all; TAALM 0.429 vs best baseline 0.141",
           lr_selection, (LR_SEL,), command=LR_CMD,
           explanation="Swept for Finetune and TAALM only (1e-3 / 3e-3 / 1e-2, three seeds, 27 min here; the other "
                       "13 methods are sized in docs/results/compute_plan.md). The rule (the selection split's Total "
                       "Knowledge) gives Finetune 1e-3, where it barely learns and so forgets least (test Top Acc "
                       "0.050, NF 0.935), and TAALM the table's 3e-3; on the selection Top Acc both take 1e-2 and "
                       "TAALM still leads (0.467 vs 0.283) while both forget half of NOT-TO-FORGET (docs/taalm.md "
                       "§Each method at its own learning rate)."),
)
