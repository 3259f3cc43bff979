"""The attention measures of ``cfka di-attention --measures`` (issue 22): DI against each measure, per layer and head,
trained, untrained and the change, raw and partial (controlling for in-context repeat count and position).

Measures (``lm_theory/measures.py``): ``context`` (the panel's original measure), ``occurrence`` (mass per
in-context occurrence), ``fact`` (the query's attention over its own sentence's subject + relation span, compared
with the DI counted over those spans: the theory's one-fact context), ``column_j1`` / ``column_nq`` (STOC's column
scores, ÷ (j + 1) and ÷ (T − j)). For each measure × DI convention: the seed-mean attention pooled over layers and
heads (bootstrap intervals over token types), the same partial on the repeat count and distance to the query,
per-seed point estimates, per layer and per head (the head distribution, and the best head: the most negative
Pearson, chosen after the fact), for the trained members, the untrained members (their initialisation) and the
change z_trained − z_init.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from flax import nnx

from cfka_jax.data.pipeline import DataBundle
from cfka_jax.eval.em import em_prompts, exact_match_rate
from cfka_jax.eval.fta import fta_evaluator
from cfka_jax.lm_theory import biography as bio
from cfka_jax.lm_theory import measures as ms
from cfka_jax.lm_theory.cooccurrence import CoOccurrence, count_cooccurrence
from cfka_jax.lm_theory.diversity import CONVENTIONS, diversity_index
from cfka_jax.lm_theory.stats import correlate, partial_correlate, pearson, seed_summary, spearman
from cfka_jax.runs.ensemble import EnsembleResult, ensemble_models
from cfka_jax.train.ensemble import member, split_members

TABLE_CONVENTIONS = ("centred/cooccur", "uncentred/all")
"""The two DI conventions of the markdown table (the project default and the quoted form); the JSON has all four."""


@dataclasses.dataclass(frozen=True)
class Scope:
    """One example scope (whole context or fact span): counts, DI per convention, eligible types, covariates."""

    counts: CoOccurrence
    di: dict
    eligible: np.ndarray
    covariates: np.ndarray


@dataclasses.dataclass(frozen=True)
class MeasureCorpus:
    """The measures' side of a panel: examples with fact starts, denominators, and both scopes."""

    examples: bio.Examples
    fact: np.ndarray
    denoms: dict
    scopes: dict


def measure_corpus(bundle: DataBundle, vocab: dict, slots: np.ndarray, objects: str, min_count: int
                   ) -> MeasureCorpus:
    """Examples of ``pt_train``, their fact spans, and the DI / eligibility / covariates of both scopes."""
    ex = bio.examples(bundle, "pt_train", vocab, objects)
    fact = bio.fact_starts(bundle, "pt_train", ex)
    tokens, m = bundle.eval["pt_train"][0].tokens, len(bundle.tokenizer)
    scopes = {}
    for name, first in (("context", ex.start), ("fact", fact)):
        contexts = [tokens[c, f:q + 1] for c, f, q in zip(ex.chunk, first, ex.query)]
        co = count_cooccurrence(contexts, ex.objects, num_tokens=m, num_objects=len(vocab))
        di = {c.name: np.asarray(diversity_index(co, c), np.float64) for c in CONVENTIONS}
        eligible = (co.n_s >= min_count) & (slots != bio.SLOTS.index("other"))
        scopes[name] = Scope(co, di, eligible, ms.covariates(tokens, ex.chunk, ex.query, first, num_tokens=m))
    denoms = ms.denominators(tokens, ex.chunk, ex.query, ex.start, fact, num_tokens=m)
    return MeasureCorpus(ex, fact, denoms, scopes)


def member_measures(graphdef, params, rest, bundle: DataBundle, mc: MeasureCorpus) -> dict[str, np.ndarray]:
    """z of every measure for one member, {measure: (L, N, M)}."""
    ex = mc.examples
    masses = ms.measure_masses(graphdef, params, rest, bundle.eval["pt_train"][0], ex.chunk, ex.query, ex.start,
                               mc.fact, num_tokens=len(bundle.tokenizer))
    return ms.per_type(masses, mc.denoms)


def _point(di: np.ndarray, z: np.ndarray) -> dict:
    return {"pearson": pearson(di, z), "spearman": spearman(di, z)}


def correlate_measure(di: np.ndarray, z_LNM: np.ndarray, keep: np.ndarray, cov: np.ndarray, num_boot: int
                      ) -> dict:
    """Pooled (with intervals), partial (repeat count, distance), per layer and per head correlations."""
    d, pooled = di[keep], z_LNM.mean((0, 1))[keep]
    heads = [[_point(d, z[keep]) for z in z_NM] for z_NM in z_LNM]
    flat = [(h["pearson"], l, n) for l, row in enumerate(heads) for n, h in enumerate(row)]
    best = min((f for f in flat if np.isfinite(f[0])), default=(float("nan"), -1, -1))
    return {"pooled": correlate(d, pooled, num_boot=num_boot).as_dict(),
            "partial": partial_correlate(d, pooled, cov[keep], num_boot=num_boot).as_dict(),
            "layers": [_point(d, z_NM.mean(0)[keep]) for z_NM in z_LNM],
            "heads": heads,
            "best_head": {"layer": best[1], "head": best[2], **heads[best[1]][best[2]]} if best[1] >= 0 else None,
            "head_pearson": seed_summary([f[0] for f in flat])}


def analyse(mc: MeasureCorpus, z: list[dict], z0: list[dict], measures: tuple[str, ...], num_boot: int) -> dict:
    """{measure: {convention: {"trained", "untrained", "change": correlate_measure, "per_seed": summaries}}}."""
    out = {}
    for name in measures:
        scope = mc.scopes[ms.SCOPE[name]]
        zt, zi = np.mean([m[name] for m in z], 0), np.mean([m[name] for m in z0], 0)
        out[name] = {}
        for conv, di in scope.di.items():
            args = (scope.eligible, scope.covariates, num_boot)
            per_seed = [_point(di[scope.eligible], m[name].mean((0, 1))[scope.eligible]) for m in z]
            out[name][conv] = {
                "trained": correlate_measure(di, zt, *args), "untrained": correlate_measure(di, zi, *args),
                "change": correlate_measure(di, zt - zi, *args),
                "per_seed": {k: seed_summary([p[k] for p in per_seed]) for k in ("pearson", "spearman")}}
    return out


def _ci(r: dict, k: str) -> str:
    return f"{r[k]:+.3f} [{r[k + '_ci'][0]:+.3f}, {r[k + '_ci'][1]:+.3f}]"


def table(results: dict, *, world: str, attention: str, paper: tuple[float, float], regime: str) -> str:
    """Markdown rows: measure × DI convention × trained / untrained / change, beside the paper's numbers."""
    lines = [f"| measure | DI | world | ports ({regime}) | Pearson [95% CI] | Spearman [95% CI] | partial Pearson | "
             f"partial Spearman | best head (l, n): Pearson | heads: Pearson mean (min, max) | per seed Pearson | "
             f"paper |", "|" + "---|" * 12]
    for name, by_conv in results.items():
        for conv in TABLE_CONVENTIONS:
            for kind in ("trained", "untrained", "change"):
                r = by_conv[conv][kind]
                b, h = r["best_head"], r["head_pearson"]
                seed = by_conv[conv]["per_seed"]["pearson"] if kind == "trained" else None
                lines.append(
                    f"| {name} | {conv} | {world} | {kind} | {_ci(r['pooled'], 'pearson')} | "
                    f"{_ci(r['pooled'], 'spearman')} | {_ci(r['partial'], 'pearson')} | "
                    f"{_ci(r['partial'], 'spearman')} | ({b['layer']}, {b['head']}): {b['pearson']:+.3f} | "
                    f"{h['mean']:+.3f} ({h['min']:+.3f}, {h['max']:+.3f}) | "
                    + (f"{seed['mean']:+.3f} ± {seed['sd']:.3f} |" if seed else "— |")
                    + f" {paper[0]} / {paper[1]} ({attention}) |")
    return "\n".join(lines)


def heldout(pt: EnsembleResult, bundle: DataBundle, em_docs: int) -> list[dict]:
    """Per member: hFTA / sFTA on ``pt_test`` (every value occurrence) and generation EM on its first ``em_docs``
    biographies (T = 0.2, 32 new tokens, clean prompts, as ``runs/biography.pretrain`` reports them)."""
    evaluate = fta_evaluator(pt.graphdef, pt.rest, {"Original": bundle.eval["pt_test"]})
    prompts, _ = em_prompts(bundle.splits["pt_test"], bundle.world.people, bundle.tokenizer, max_docs=em_docs)
    out = []
    for e, seed in enumerate(pt.spec.seeds):
        params = member(pt.params_E, e)
        rec = {k: float(v) for k, v in evaluate(params, 0).items() if k in ("Original/hFTA", "Original/sFTA")}
        em = exact_match_rate(nnx.merge(pt.graphdef, params, pt.rest), prompts, bundle.tokenizer,
                              key=jax.random.key(seed))
        out.append(rec | {"Original/EM": float(em["EM"]), "seed": seed})
    return out


def panel(pt: EnsembleResult, bundle: DataBundle, vocab: dict, slots: np.ndarray, *, objects: str, min_count: int,
          measures: tuple[str, ...], num_boot: int) -> tuple[dict, dict]:
    """(results of :func:`analyse`, the z arrays) for the trained members and their initialisations."""
    mc = measure_corpus(bundle, vocab, slots, objects, min_count)
    z = [member_measures(pt.graphdef, member(pt.params_E, e), pt.rest, bundle, mc) for e in range(len(pt.spec.seeds))]
    graphdef, init_E, rest = split_members(ensemble_models(pt.spec, len(bundle.tokenizer)))
    z0 = [member_measures(graphdef, member(init_E, e), rest, bundle, mc) for e in range(len(pt.spec.seeds))]
    arrays = {f"{kind}_{m}_ELNM": np.stack([zz[m] for zz in zs]) for kind, zs in (("z", z), ("z_init", z0))
              for m in measures}
    arrays |= {f"{scope}_{k}": v for scope, sc in mc.scopes.items() for k, v in
               (("eligible", sc.eligible), ("covariates", sc.covariates))}
    arrays |= {f"{scope}_di_{c.replace('/', '_')}": v for scope, sc in mc.scopes.items() for c, v in sc.di.items()}
    return analyse(mc, z, z0, measures, num_boot), arrays


