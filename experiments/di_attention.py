"""The Diversity Index against the attention of trained multi-layer ports (spec cfka_stoc.md §2.6, §2.8).

    cfka di-attention --preset small --attention softmax --seeds 8 --out runs/di-small-softmax
    cfka di-attention --preset small --attention linear --seeds 8 --out runs/di-small-linear
    (or python -m cfka_jax.experiments.di_attention ...; docs/theory_vs_lms.md lists the commands behind its numbers)

Reproduces the paper's two panels (linear attention: Pearson −0.8277 / Spearman −0.8776; softmax: −0.7842 /
−0.8467; "Pearson < −0.8 in multi-layer LMs"). N seeds of the preset's port (softmax or the theory's causal
linear attention) are pre-trained on the Biography PT population in one jitted program (``runs/ensemble.py``;
kept in ``OUT/pt`` and reused when the command is run again), then, for every member:

* DI of every token type from the ``pt_train`` corpus's own (token, object) counts under the four conventions
  (centred / un-centred × co-occurring / all objects; ``lm_theory/diversity.py``) and the attention the member pays
  to each token type on the same examples (per layer and pooled; ``lm_theory/attention.py``);
* Pearson and Spearman with bootstrap intervals over token types (those in ≥ ``min_count`` contexts), pooled and
  per layer; summaries over seeds, and the correlation of the seed-averaged attention;
* the STOC link: overlap of the tokens STOC selects on ``cpt_train`` with the lowest-DI tokens;
* retention: naive CPT of every member (``OUT/cpt``), per-fact retention against the theory's prediction.

The same correlations for the untrained members (``init_control``) separate what training adds from what the
positions of token types in their contexts already give, and ``by_slot`` repeats them within each slot.
Writes ``OUT/di_attention.json``, ``OUT/attention.npz`` (z per member, layer and token type, trained and at
initialisation; DI per convention; slots), ``OUT/table.md`` (the correlation table beside the paper's numbers) and
``OUT/scatter.png`` (one point per token type, coloured by slot: name, relation, template, object).
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.data.pipeline import DataBundle, build_data
from cfka_jax.lm_theory import biography as bio
from cfka_jax.lm_theory import retention as ret
from cfka_jax.lm_theory.attention import attention_mass, layer_kinds, per_type
from cfka_jax.lm_theory.cooccurrence import CoOccurrence, count_cooccurrence
from cfka_jax.lm_theory.diversity import CONVENTIONS, diversity_index
from cfka_jax.lm_theory.stats import correlate, seed_summary
from cfka_jax.lm_theory.stoc_link import overlap, selection_counts
from cfka_jax.lm_theory.measures import MEASURES
from cfka_jax.runs.ensemble import (STREAMS, EnsembleResult, EnsembleSpec, continual_ensemble, ensemble_models,
                                    load_checkpoint, load_ensemble, pretrain_ensemble, save_ensemble)
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import ARCHS
from cfka_jax.models.layers import ATTENTION_KINDS
from cfka_jax.cli_gen import Flags
from cfka_jax.train.ensemble import member, split_members
from cfka_jax.experiments import di_kinds as dk
from cfka_jax.experiments import di_measures as dm

PAPER = {"linear": (-0.8277, -0.8776), "softmax": (-0.7842, -0.8467)}
"""The paper's panels (spec §2.8): (Pearson, Spearman)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """One panel (module docstring). ``pt_steps`` / ``cpt_steps`` shorten the preset's phases (warm-up scaled)."""

    preset: str = "smoke"
    """Biography scale (runs/presets.py BIOGRAPHY)."""
    attention: str = "softmax"
    """the ports' softmax attention or the theory's causal linear attention"""
    seeds: int = 8
    """ensemble size N (seeds 0 … N−1)"""
    arch: str = "qwen"
    """model family (models/family.py)"""
    out: str = "runs/di-attention"
    """run folder (OUT/pt, OUT/cpt, di_attention.json, attention.npz, table.md, scatter.png)"""
    cache_dir: str = "runs/data-cache"
    """where generated worlds and packs are cached"""
    pt_steps: int | None = None
    """shorten PT (warm-up scaled); default: the preset's"""
    cpt_steps: int | None = None
    """shorten the naive CPT of the retention check"""
    objects: str = "value"
    """what counts as a token's object in the DI counts"""
    min_count: int = 20
    """minimum contexts holding a token type"""
    num_boot: int = 1000
    """bootstrap resamples per interval"""
    retention: bool = True
    """run the naive-CPT retention check"""
    streams: str = "per_seed"
    """one data stream per seed, or one shared by all members"""
    stoc_fraction: float = 0.1
    """share of tokens STOC selects in the STOC link"""
    measures: tuple[str, ...] = MEASURES
    """comma-separated attention measures (lm_theory/measures.py); empty: none"""
    legacy: bool = True
    """the original panel (context attention table, scatter, STOC link, retention)"""
    pt_checkpoint: bool = False
    """measure the newest checkpoint of a PT still in progress (OUT/pt/ckpt)"""
    record: str = ""
    """results root: write the per-layer-kind record cfka/di_attention_<arch>.json there (needs the context
    measure); empty: none"""

    def __post_init__(self):
        self.spec()  # validates preset, arch, attention, seeds, steps and streams
        bad = [m for m in self.measures if m not in MEASURES]
        if bad or len(set(self.measures)) != len(self.measures):
            raise ValueError(f"measures must be distinct names from {MEASURES}, got {self.measures!r}")
        if self.objects not in bio.OBJECT_KINDS:
            raise ValueError(f"objects must be one of {bio.OBJECT_KINDS}, got {self.objects!r}")
        if self.record and "context" not in self.measures:
            raise ValueError("record needs the 'context' measure (--measures)")
        if self.min_count < 1 or self.num_boot < 1:
            raise ValueError(f"min_count and num_boot must be >= 1, got {self.min_count}, {self.num_boot}")

    def spec(self) -> EnsembleSpec:
        if not isinstance(self.seeds, int) or self.seeds < 1:
            raise ValueError(f"seeds must be an integer >= 1, got {self.seeds!r}")
        return EnsembleSpec(preset=self.preset, arch=self.arch, seeds=tuple(range(self.seeds)),
                            attention=self.attention, streams=self.streams, pt_steps=self.pt_steps,
                            cpt_steps=self.cpt_steps, log_every=25)


def trained(cfg: Config, bundle: DataBundle, phase: str, pt: EnsembleResult | None = None) -> EnsembleResult:
    """The phase's ensemble from ``OUT/<phase>`` when present (same spec), else trained and saved there; training
    checkpoints to ``OUT/<phase>/ckpt`` and resumes from it when killed."""
    path, spec = pathlib.Path(cfg.out) / phase, cfg.spec()
    if (path / "ensemble.json").exists():
        return load_ensemble(path, spec, bundle, phase=phase, parent=pt)  # made from this bundle and PT ensemble
    ckpt = path / "ckpt"
    if cfg.pt_checkpoint and phase == "pt":
        return load_checkpoint(ckpt, spec, bundle, phase)
    result = (pretrain_ensemble(spec, bundle, ckpt_dir=ckpt) if phase == "pt"
              else continual_ensemble(spec, pt, bundle, ckpt_dir=ckpt))
    save_ensemble(path, result)
    return result


@dataclasses.dataclass(frozen=True)
class Corpus:
    """The DI side of one panel: examples, counts, DI per convention, slots, eligible token types."""

    examples: bio.Examples
    counts: CoOccurrence
    di: dict
    slots: np.ndarray
    eligible: np.ndarray


def corpus(cfg: Config, bundle: DataBundle, vocab: dict) -> Corpus:
    ex = bio.examples(bundle, "pt_train", vocab, cfg.objects)
    packed, _ = bundle.eval["pt_train"]
    co = count_cooccurrence(ex.contexts(packed.tokens), ex.objects, num_tokens=len(bundle.tokenizer),
                            num_objects=len(vocab))
    slots = bio.token_slots(bundle, "pt_train")
    eligible = (co.n_s >= cfg.min_count) & (slots != bio.SLOTS.index("other"))
    di = {c.name: np.asarray(diversity_index(co, c), np.float64) for c in CONVENTIONS}
    return Corpus(ex, co, di, slots, eligible)


def member_attention(result: EnsembleResult, e: int, bundle: DataBundle, c: Corpus) -> np.ndarray:
    """z^l_s of member e, (L, M)."""
    packed, _ = bundle.eval["pt_train"]
    ex = c.examples
    mass = attention_mass(result.graphdef, member(result.params_E, e), result.rest, packed, ex.chunk, ex.query,
                          ex.start, num_tokens=len(bundle.tokenizer))
    return per_type(mass, c.counts.n_s)[0]


def init_attention(cfg: Config, bundle: DataBundle, c: Corpus) -> np.ndarray:
    """z^l_s of every member at its initialisation, (E, L, M): the control for what the trained attention adds
    (an untrained port's attention already depends on where a token type sits in its contexts)."""
    graphdef, params_E, rest = split_members(ensemble_models(cfg.spec(), len(bundle.tokenizer)))
    packed, ex = bundle.eval["pt_train"][0], c.examples
    return np.stack([per_type(attention_mass(graphdef, member(params_E, e), rest, packed, ex.chunk, ex.query,
                                             ex.start, num_tokens=len(bundle.tokenizer)), c.counts.n_s)[0]
                     for e in range(len(cfg.spec().seeds))])


def correlations(c: Corpus, z_LM: np.ndarray, num_boot: int) -> dict:
    """{convention: {"pooled": Correlation, "layers": [Correlation per layer]}} over the eligible token types."""
    keep, out = c.eligible, {}
    for name, di in c.di.items():
        out[name] = {"pooled": correlate(di[keep], z_LM.mean(0)[keep], num_boot=num_boot).as_dict(),
                     "layers": [correlate(di[keep], z[keep], num_boot=num_boot).as_dict() for z in z_LM]}
    return out


def by_slot(c: Corpus, z_M: np.ndarray, num_boot: int) -> dict:
    """{convention: {slot: Correlation}} within each slot (name, relation, template, object) with ≥ 3 types."""
    out = {}
    for name, di in c.di.items():
        out[name] = {}
        for i, slot in enumerate(bio.SLOTS[:4]):
            sel = c.eligible & (c.slots == i)
            if sel.sum() >= 3:
                out[name][slot] = correlate(di[sel], z_M[sel], num_boot=num_boot).as_dict()
    return out


def training_change(npz: str | pathlib.Path, num_boot: int = 1000) -> dict:
    """DI against what training changed, from ``OUT/attention.npz``: {convention: {"delta": Correlation of
    z_trained − z_init, "log_ratio": Correlation of ln(z_trained / z_init)}} (seed-mean, pooled layers).

        python -c "from cfka_jax.experiments.di_attention import training_change as t; print(t('OUT/attention.npz'))"
    """
    d = jsonio.read_npz(npz, ("eligible", "z_ELM", "z_init_ELM"))
    keep, z, z0 = d["eligible"], d["z_ELM"].mean((0, 1)), d["z_init_ELM"].mean((0, 1))
    return {k[3:]: {"delta": correlate(d[k][keep], (z - z0)[keep], num_boot=num_boot).as_dict(),
                    "log_ratio": correlate(d[k][keep], np.log(z[keep] / z0[keep]), num_boot=num_boot).as_dict()}
            for k in d if k.startswith("di_")}


def stoc_link(result: EnsembleResult, e: int, bundle: DataBundle, c: Corpus, fraction: float) -> dict:
    """Overlap of STOC's selections on ``cpt_train`` (reference switches) with the lowest-DI tokens."""
    selected, total = selection_counts(result.model(e), bundle.splits["cpt_train"].docs(),
                                       num_tokens=len(bundle.tokenizer))
    di = c.di[CONVENTIONS[0].name]
    return overlap(di, selected, total, c.eligible, fraction=fraction)


def retention(pt: EnsembleResult, cpt: EnsembleResult, bundle: DataBundle, vocab: dict, cfg: Config) -> list[dict]:
    """Per member: measured per-fact retention after naive CPT against the theory's prediction."""
    m = len(bundle.tokenizer)
    counts = {}
    for split in ("pt_train", "cpt_train"):
        ex = bio.examples(bundle, split, vocab, cfg.objects)
        counts[split] = count_cooccurrence(ex.contexts(bio.packed_split(bundle, split)[0].tokens), ex.objects,
                                           num_tokens=m, num_objects=len(vocab))
    test = bio.examples(bundle, "pt_test", vocab, cfg.objects)
    packed = bundle.eval["pt_test"][0]
    log_pt, log_cpt = ret.predicted_log_probs(counts["pt_train"], counts["cpt_train"],
                                              ret.presence(test.contexts(packed.tokens), m), test.objects)
    out = []
    for e in range(len(cfg.spec().seeds)):
        soft = [ret.example_soft(r.graphdef, member(r.params_E, e), r.rest, packed, test.chunk, test.query)
                for r in (pt, cpt)]
        res = ret.compare(test.facts(), soft[0], soft[1], log_pt, log_cpt, num_boot=cfg.num_boot)
        out.append(res | {"Original/sFTA_pt": float(soft[0].mean()), "Original/sFTA_cpt": float(soft[1].mean())})
    return out


def summarise(per_seed: list[dict], seed_mean: dict) -> dict:
    """Seed summaries of the pooled and per-layer correlations, next to the seed-averaged attention's."""
    out = {}
    for name in seed_mean:
        layers = len(seed_mean[name]["layers"])
        out[name] = {stat: {"pooled": seed_summary([s[name]["pooled"][stat] for s in per_seed]),
                            "layers": [seed_summary([s[name]["layers"][i][stat] for s in per_seed])
                                       for i in range(layers)]} for stat in ("pearson", "spearman")}
        out[name]["seed_mean_attention"] = seed_mean[name]
    return out


def table(cfg: Config, summary: dict, control: dict | None = None) -> str:
    """The correlation table beside the paper's four numbers (markdown); with ``control``, rows of the same
    correlations for the untrained members (seed-mean attention at initialisation)."""
    pp, ps = PAPER[cfg.attention]
    lines = [f"| panel ({cfg.attention}, {cfg.preset}, {cfg.seeds} seeds) | DI convention | Pearson (mean ± sd "
             f"over seeds) | Spearman | Pearson of seed-mean attention [95% CI] | Spearman [95% CI] | paper "
             f"Pearson | paper Spearman |", "|---|---|---|---|---|---|---|---|"]
    ci = lambda r, k: f"{r[k]:.3f} [{r[k + '_ci'][0]:.3f}, {r[k + '_ci'][1]:.3f}]"  # noqa: E731
    for name, s in summary.items():
        m = s["seed_mean_attention"]["pooled"]
        lines.append(f"| pooled layers | {name} | {s['pearson']['pooled']['mean']:.3f} ± "
                     f"{s['pearson']['pooled']['sd']:.3f} | {s['spearman']['pooled']['mean']:.3f} ± "
                     f"{s['spearman']['pooled']['sd']:.3f} | {ci(m, 'pearson')} | {ci(m, 'spearman')} | "
                     f"{pp:.4f} | {ps:.4f} |")
    for name, r in (control or {}).items():
        m = r["pooled"]
        lines.append(f"| untrained (init control) | {name} | — | — | {ci(m, 'pearson')} | {ci(m, 'spearman')} | "
                     f"{pp:.4f} | {ps:.4f} |")
    return "\n".join(lines)


def scatter(cfg: Config, c: Corpus, z_mean: np.ndarray, out: pathlib.Path) -> None:
    """DI (each convention) against the seed-mean pooled attention, one point per token type, coloured by slot."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 8))
    keep = c.eligible
    for ax, (name, di) in zip(axes.flat, c.di.items()):
        for i, slot in enumerate(bio.SLOTS[:4]):
            sel = keep & (c.slots == i)
            ax.scatter(di[sel], z_mean[sel], s=10, alpha=0.7, label=f"{slot} ({int(sel.sum())})")
        r = correlate(di[keep], z_mean[keep], num_boot=1)
        ax.set(xlabel=f"DI ({name})", ylabel="attention (seed mean, pooled)",
               title=f"Pearson {r.pearson:.2f}, Spearman {r.spearman:.2f}")
        ax.legend(fontsize=7)
    fig.suptitle(f"{cfg.attention} attention, {cfg.preset} preset, {cfg.seeds} seeds; paper: Pearson "
                 f"{PAPER[cfg.attention][0]}, Spearman {PAPER[cfg.attention][1]}")
    fig.tight_layout()
    fig.savefig(out / "scatter.png", dpi=110)
    plt.close(fig)


def legacy(cfg: Config, pt: EnsembleResult, bundle: DataBundle, vocab: dict, c: Corpus, out: pathlib.Path
           ) -> dict:
    """The original panel (issue 14): head-averaged context attention, STOC link, retention, table, scatter."""
    members = range(len(cfg.spec().seeds))
    z = np.stack([member_attention(pt, e, bundle, c) for e in members])
    per_seed = [correlations(c, z[e], cfg.num_boot) for e in members]
    summary = summarise(per_seed, correlations(c, z.mean(0), cfg.num_boot))
    z0 = init_attention(cfg, bundle, c)
    control = correlations(c, z0.mean(0), cfg.num_boot)
    jsonio.write_npz_atomic(out / "attention.npz", {
        "z_ELM": z, "z_init_ELM": z0, "slots": c.slots, "eligible": c.eligible, "n_s": c.counts.n_s,
        **{f"di_{k.replace('/', '_')}": v for k, v in c.di.items()}}, compressed=True)
    stoc = [stoc_link(pt, e, bundle, c, cfg.stoc_fraction) for e in members]
    res = {"token_types": {s: int((c.eligible & (c.slots == i)).sum()) for i, s in enumerate(bio.SLOTS)},
           "examples": int(len(c.examples.objects)), "mean_context_length": c.counts.mean_length,
           "summary": summary, "per_seed": per_seed, "init_control": control,
           "by_slot": by_slot(c, z.mean(0).mean(0), cfg.num_boot),
           "init_by_slot": by_slot(c, z0.mean(0).mean(0), cfg.num_boot),
           "stoc": {"per_seed": stoc, "overlap": seed_summary([s["overlap"] for s in stoc]),
                    "spearman_rate_di": seed_summary([s["spearman_rate_di"] for s in stoc])}}
    if cfg.retention:
        cpt = trained(cfg, bundle, "cpt", pt)
        rows = retention(pt, cpt, bundle, vocab, cfg)
        rho = [r["retention"]["spearman"] for r in rows if "retention" in r]
        res["retention"] = {"per_seed": rows, "spearman": seed_summary(rho) if rho else None}
        res["cpt_training"] = {"cpt_seconds": cpt.seconds, "cpt_nonfinite_steps": cpt.nonfinite.tolist()}
    scatter(cfg, c, z.mean(0).mean(0), out)
    jsonio.write_text_atomic(out / "table.md", table(cfg, summary, control) + "\n")
    return res


def regime(cfg: Config, pt: EnsembleResult, heldout: list[dict]) -> str:
    """The panel's training regime, for table titles: PT steps done of the preset's, and held-out sFTA."""
    sfta = float(np.mean([h["Original/sFTA"] for h in heldout]))
    below = "; BELOW 0.7 held-out sFTA" if sfta < 0.7 else ""
    return (f"{cfg.preset}, PT {int(pt.steps[-1])}/{BIOGRAPHY[cfg.preset].pt.steps} steps, held-out sFTA "
            f"{sfta:.2f}{below}")


def run(cfg: Config) -> dict:
    clock, out = Clock(), pathlib.Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    bundle = build_data(cfg.spec().scale.data_config(), cfg.cache_dir)
    vocab = bio.object_vocabulary(bundle, cfg.objects)
    pt, c = trained(cfg, bundle, "pt"), corpus(cfg, bundle, vocab)
    held = dm.heldout(pt, bundle, cfg.spec().scale.em_docs)
    res = {"config": dataclasses.asdict(cfg), "paper": dict(zip(("pearson", "spearman"), PAPER[cfg.attention])),
           "heldout": held, "regime": regime(cfg, pt, held),
           "training": {"pt_step": int(pt.steps[-1]), "pt_seconds": pt.seconds,
                        "pt_final_loss": pt.losses[-1].tolist(), "pt_nonfinite_steps": pt.nonfinite.tolist()}}
    if cfg.measures:
        res["measures"], arrays = dm.panel(pt, bundle, vocab, c.slots, objects=cfg.objects, min_count=cfg.min_count,
                                           measures=cfg.measures, num_boot=cfg.num_boot)
        jsonio.write_npz_atomic(out / "measures.npz", {"slots": c.slots, **arrays}, compressed=True)
        jsonio.write_text_atomic(out / "table_measures.md", dm.table(res["measures"], world=cfg.preset,
                                                                     attention=cfg.attention,
                                                                     paper=PAPER[cfg.attention],
                                                                     regime=res["regime"]) + "\n")
        if "context" in cfg.measures:  # linear and full-attention layers apart (experiments/di_kinds.py)
            kinds = layer_kinds(pt.model(0))
            res["layer_kinds"], res["by_kind"] = list(kinds), dk.kind_rows(arrays, kinds, pt.spec.seeds, held,
                                                                           num_boot=cfg.num_boot)
            jsonio.write_text_atomic(out / "table_kinds.md", dk.table(res["by_kind"]) + "\n")
            if cfg.record:
                write_record(cfg.record, dk.RECORD.format(arch=cfg.arch), rows=res["by_kind"],
                             regime=dk.regime(cfg.preset, cfg.arch, kinds, int(pt.steps[-1]),
                                              BIOGRAPHY[cfg.preset].pt.steps, cfg.attention),
                             provenance=provenance(config=dataclasses.asdict(cfg), seeds=pt.spec.seeds, clock=clock))
    if cfg.legacy:
        res |= legacy(cfg, pt, bundle, vocab, c, out)
    jsonio.write_json_atomic(out / "di_attention.json", res, indent=1)
    return res


FLAGS = Flags(Config, prog="cfka di-attention", description=__doc__.split("\n\n")[0],
              choices={"preset": lambda: list(BIOGRAPHY), "attention": lambda: ATTENTION_KINDS,
                       "arch": lambda: list(ARCHS), "objects": lambda: list(bio.OBJECT_KINDS),
                       "streams": lambda: STREAMS, "measures": lambda: MEASURES},
              names={"num_boot": "bootstrap"}, aliases={"legacy": ("--skip-legacy",)}, required=("out",),
              hidden=("stoc_fraction",))
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def parse(argv: list[str] | None) -> Config:
    return FLAGS.parse(argv)


def main(argv: list[str] | None = None) -> int:
    return command(parse(argv))


def command(cfg: Config) -> int:
    """Runs the panel and prints its tables: ``cfka di-attention``'s run function."""
    res = run(cfg)
    print(f"regime: {res['regime']}")
    if "measures" in res:
        print(dm.table(res["measures"], world=cfg.preset, attention=cfg.attention, paper=PAPER[cfg.attention],
                       regime=res["regime"]))
    if "by_kind" in res:
        print(dk.table(res["by_kind"]))
    if not cfg.legacy:
        return 0
    print(table(cfg, res["summary"], res["init_control"]))
    print(f"STOC overlap (top {cfg.stoc_fraction:.0%} selected vs lowest DI): {res['stoc']['overlap']['mean']:.3f} "
          f"± {res['stoc']['overlap']['sd']:.3f}, chance {res['stoc']['per_seed'][0]['chance']:.3f}")
    if "retention" in res and res["retention"]["spearman"] is not None:
        s = res["retention"]["spearman"]
        print(f"retention: Spearman(predicted, measured) {s['mean']:.3f} ± {s['sd']:.3f} over {s['n']} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
