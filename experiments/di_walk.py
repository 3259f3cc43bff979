"""Where the Diversity Index law breaks: a walk from the theory's model to the Biography ports (spec cfka_stoc.md
§2.6, §2.8; claim ``cfka.di-walk``).

    cfka di-walk --seeds 3 --out runs/di-walk            (writes results/cfka/di_walk.json as each step finishes)
    (or python -m cfka_jax.experiments.di_walk ...; docs/results/di_walk.md shows the table)

The law (Pearson(DI, attention) ≤ −0.8) holds in the single-layer linear-attention theory model on its enumerated
fact world (``theory/world.MULTI_RELATION``) and fails on the Biography ports. The walk changes one thing at a time,
each step keeping the changes before it, and measures DI against received attention at every step with ``seeds``
members (``runs/world_ensemble.py``: one jitted program, AdamW):

  0 ``theory``     the theory model itself: per-block GD from a small init (the lemma's setting,
                   ``experiments/di_optimizer.py``'s first cell), float64, the theory's DI over its context tokens;
  0a ``theory-adam``, 0f ``theory-factorised-gd``, 0b ``theory-factorised``  the same model under Adam, with the
                   factorised parameters of a port under GD, and factorised under Adam (``di_optimizer``'s cells):
                   the theory's side of the step to a port, one change and then both;
  1 ``1L-linear``  a port with ONE block and causal linear attention on the world written as token sequences
                   (``data/theory_text.py``: one fact per context, the loss on the object only);
  2 ``2L-linear``, ``4L-linear``  several blocks (2 carried on);
  3 ``softmax``    softmax attention;
  3b ``lm-loss``   next-token loss on every token (the language-model objective);
  4 ``packed``     several facts per document, packed into chunks that cut documents;
  5 ``templates``  the facts in sentence templates (relation words shared by relations, a sentence end), each
                   fact rendered several times;
  6 ``biography``  the Biography world itself: the small-preset softmax ports of ``cfka di-attention``
                   (record ``cfka/di_attention_trained``; 3 blocks of width 96, 2 seeds).

At a port step, DI and attention are ``cfka di-attention``'s (``lm_theory/text_world.py``): DI from the corpus's own
counts (project default: centred, co-occurring objects; and the quoted un-centred / all form), z_s the pooled
attention of the query on token type s over the context from the document start, bootstrap intervals over token
types. Each row also holds the same correlation over the subject-name and relation types only (``slots_*``: the template
and query tokens sit in every context and carry the theory's highest DI), the untrained members' Pearson (what
position alone gives), the share of the query's attention on itself / its sentence / earlier sentences / earlier
documents, and the mean z of each kind of token. ``OUT/steps/<name>.npz`` keeps z per member (trained and at
initialisation, layer × token type), the DI and the token kinds.

Writes ``OUT/steps/<name>.json`` per finished step (a rerun skips it when its definition is unchanged),
``OUT/table.md`` and the record ``RESULTS/cfka/di_walk.json`` (rows one per (step, seed)) after every step.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import numpy as np

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, load_records, provenance, write_record
from cfka_jax.cli_gen import Flags
from cfka_jax.data.theory_text import Rendering, packed, render
from cfka_jax.lm_theory import text_world as tw
from cfka_jax.lm_theory.stats import correlate
from cfka_jax.runs.world_ensemble import PortSpec, build_models, train_world_ensemble
from cfka_jax.theory.world import MULTI_RELATION, make_world
from cfka_jax.train.ensemble import member, split_members

RECORD = "cfka/di_walk"
BIOGRAPHY_RECORD = "cfka/di_attention_trained"
LAW = -0.8
KINDS = ("name", "relation", "template", "query", "word", "end", "object")
THEORY_CELLS = {"theory": 0, "theory-adam": 3, "theory-factorised-gd": 7, "theory-factorised": 8}
"""The theory steps: their cells of ``experiments/di_optimizer.CELLS``."""
SLOT_KINDS = ("name", "relation")
"""The token types whose DI varies in the theory's world (the template and query tokens sit in every context)."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of the walk: what changes, the port and the rendering (``port`` None: the theory model or the
    Biography record)."""

    index: str
    name: str
    change: str
    port: PortSpec | None = None
    rendering: Rendering | None = None


def walk(train_steps: int, facts: int, width: int) -> tuple[Step, ...]:
    """The steps in order (module docstring), at ``train_steps`` AdamW steps, ``facts`` renderings, width D."""
    base = PortSpec(layers=1, attention="linear", hidden=width, heads=2, kv_heads=1, intermediate=2 * width,
                    seq_len=7, objective="object", steps=train_steps, warmup=max(1, train_steps // 20), peak_lr=1e-2)
    plain = Rendering(facts=facts)
    p2 = dataclasses.replace(base, layers=2)
    soft = dataclasses.replace(p2, attention="softmax")
    lm = dataclasses.replace(soft, objective="all")
    pk = dataclasses.replace(lm, seq_len=32, batch=16)  # 512 tokens a step (plain: 32 × 7)
    tm = dataclasses.replace(lm, seq_len=64, batch=8)
    return (
        Step("0", "theory", "the single-layer theory model (per-block GD, small init, float64)"),
        Step("0a", "theory-adam", "the theory model's (Y, Z) under Adam (lr 1e-2) from a small init (float64)"),
        Step("0f", "theory-factorised-gd", "the theory model with factorised parameters (E, W_Q, W_K, W_V, W_O) "
             "under GD (lr 0.1) from init 0.3 (float64)"),
        Step("0b", "theory-factorised", "the theory model with factorised parameters (E, W_Q, W_K, W_V, W_O) "
             "under Adam from init 0.3, as a port is parametrised and trained (float64)"),
        Step("1", "1L-linear", "a port: one block, causal linear attention, one fact per context, object loss",
             base, plain),
        Step("2a", "2L-linear", "two blocks", p2, plain),
        Step("2b", "4L-linear", "four blocks (side step; two are carried on)", dataclasses.replace(base, layers=4),
             plain),
        Step("3", "softmax", "softmax attention", soft, plain),
        Step("3b", "lm-loss", "next-token loss on every token", lm, plain),
        Step("4", "packed", "4 facts per document, packed into chunks of 32", pk,
             dataclasses.replace(plain, facts_per_doc=4)),
        Step("5", "templates", "sentence templates (3 variants per relation, 3 shared words, a sentence end), "
             "each fact rendered 4 times", tm, dataclasses.replace(plain, facts_per_doc=4, templates=3, repeats=4)),
        Step("6", "biography", "the Biography world (small preset, softmax, 3 blocks of width 96; record "
             f"{BIOGRAPHY_RECORD})"),
    )


NAMES = tuple(s.name for s in walk(1, 4, 32))


@dataclasses.dataclass(frozen=True)
class Config:
    """The walk (module docstring)."""

    out: str = "runs/di-walk"
    """run folder (steps/<name>.json, table.md)"""
    results: str = "results"
    """the result-records folder the record cfka/di_walk is written under"""
    seeds: int = 3
    """members per step (seeds 0 … N−1)"""
    steps: tuple[str, ...] = NAMES
    """comma-separated steps to run, in walk order"""
    train_steps: int = 1500
    """AdamW steps of every port"""
    facts: int = 4096
    """fact renderings per corpus"""
    width: int = 32
    """port width D (MLP 2D, 2 query heads, 1 KV head)"""
    theory_steps: int = 60_000
    """full-batch GD steps of the theory model (step 0)"""
    min_count: int = 20
    """minimum contexts holding a token type"""
    num_boot: int = 1000
    """bootstrap resamples per interval"""

    def __post_init__(self):
        if not isinstance(self.seeds, int) or self.seeds < 1:
            raise ValueError(f"seeds must be an integer >= 1, got {self.seeds!r}")
        bad = [s for s in self.steps if s not in NAMES]
        if bad or not self.steps or len(set(self.steps)) != len(self.steps):
            raise ValueError(f"steps must be distinct names from {NAMES}, got {self.steps!r}")
        if self.min_count < 1 or self.num_boot < 1 or self.theory_steps < 1 or self.width < 2 or self.width % 2:
            raise ValueError("min_count, num_boot and theory_steps must be >= 1 and width an even number >= 2")
        walk(self.train_steps, self.facts, self.width)  # validates the ports and renderings


def _corr_row(r: dict, prefix: str = "") -> dict:
    return {f"{prefix}pearson": r["pearson"], f"{prefix}pearson_lo": r["pearson_ci"][0],
            f"{prefix}pearson_hi": r["pearson_ci"][1], f"{prefix}spearman": r["spearman"],
            f"{prefix}spearman_lo": r["spearman_ci"][0], f"{prefix}spearman_hi": r["spearman_ci"][1]}


def theory_step(cfg: Config, step: Step) -> list[dict]:
    """Steps 0, 0a, 0f, 0b: a cell of ``di_optimizer`` (:data:`THEORY_CELLS`) per seed (float64 inside), against the
    theory's own DI of its world (centred, the 23 context tokens)."""
    from cfka_jax.experiments.di_optimizer import CELLS, ETA_Y, ETA_Z, train
    from cfka_jax.theory.diversity import diversity_index
    from cfka_jax.theory.optimum import query_attention

    rows = []
    with jax.enable_x64(True):  # a theory check: float64, as di_optimizer and check_diversity run it
        world = make_world(MULTI_RELATION)
        nx = world.context_tokens.shape[0]
        di = np.asarray(diversity_index(world, ETA_Y, ETA_Z)[:nx], np.float64)
        for seed in range(cfg.seeds):
            yz, kl = train(CELLS[THEORY_CELLS[step.name]], world, cfg.theory_steps, seed)
            att = np.abs(np.asarray(query_attention(yz.Z, world), np.float64)[:nx])
            r = correlate(di, att, num_boot=cfg.num_boot).as_dict()
            sub = np.isin(np.asarray(world.token_kinds[:nx]), SLOT_KINDS)
            rs = correlate(di[sub], att[sub], num_boot=cfg.num_boot).as_dict()
            rows.append({"seed": seed, **_corr_row(r), **_corr_row(rs, "slots_"), "final_kl": kl,
                         "token_types": nx, **{f"z_{k}": float(att[np.asarray(world.token_kinds[:nx]) == k].mean())
                                               for k in KINDS if k in world.token_kinds[:nx]}})
    return rows


def _kind_means(corpus, c: tw.CorpusDI, z_M: np.ndarray) -> dict:
    kinds = np.asarray(corpus.kinds)
    return {f"z_{k}": float(z_M[c.eligible & (kinds == k)].mean()) for k in KINDS
            if (c.eligible & (kinds == k)).any()}


def port_step(cfg: Config, step: Step, log=print) -> list[dict]:
    """A port step: train the members, then DI vs attention per member (module docstring)."""
    seeds = tuple(range(cfg.seeds))
    corpus = render(make_world(MULTI_RELATION), step.rendering)
    ens = train_world_ensemble(step.port, corpus, seeds, log=log)
    pk, ex = packed(corpus, step.port.seq_len)
    doc = tw.corpus_di(pk, ex, corpus, span="document", min_count=cfg.min_count)
    fact = tw.corpus_di(pk, ex, corpus, span="fact", min_count=cfg.min_count)
    g0, p0, r0 = split_members(build_models(step.port, corpus.vocab_size, seeds))
    final = ens.final_loss()
    rows, arrays = [], {"kinds": np.asarray(corpus.kinds), "eligible": doc.eligible, "n_s": doc.n_s,
                        **{f"di_{k.replace('/', '_')}": v for k, v in doc.di.items()}}
    for e, seed in enumerate(seeds):
        z = tw.received_attention(ens.graphdef, ens.params(e), ens.rest, pk, ex, doc)
        main = tw.correlations(doc, z, num_boot=cfg.num_boot)
        own = tw.correlations(fact, tw.received_attention(ens.graphdef, ens.params(e), ens.rest, pk, ex, fact),
                              num_boot=cfg.num_boot)
        z0 = tw.received_attention(g0, member(p0, e), r0, pk, ex, doc)
        init = tw.correlations(doc, z0, num_boot=cfg.num_boot)
        arrays[f"z_{seed}"], arrays[f"z_init_{seed}"] = z, z0
        rows.append({"seed": seed, **_corr_row(main["centred/cooccur"]),
                     **_corr_row(_slots(corpus, doc, z.mean(0), cfg.num_boot), "slots_"),
                     "pearson_quoted": main["uncentred/all"]["pearson"],
                     "spearman_quoted": main["uncentred/all"]["spearman"],
                     "pearson_fact_span": own["centred/cooccur"]["pearson"],
                     "pearson_init": init["centred/cooccur"]["pearson"],
                     "pearson_layers": [lay["pearson"] for lay in main["layers"]],
                     "final_loss": float(final[e]), "nonfinite_steps": int(ens.nonfinite[e]),
                     "token_types": int(doc.eligible.sum()), "train_seconds": round(ens.seconds, 1),
                     **tw.diagnostics(ens.graphdef, ens.params(e), ens.rest, pk, ex, corpus),
                     **_kind_means(corpus, doc, z.mean(0))})
    out = pathlib.Path(cfg.out) / "steps"
    jsonio.write_npz_atomic(out / f"{step.name}.npz", arrays, compressed=True)
    return rows


def _slots(corpus, c: tw.CorpusDI, z_M: np.ndarray, num_boot: int) -> dict:
    """The default DI's correlation over the eligible subject-name and relation types only."""
    keep = c.eligible & np.isin(np.asarray(corpus.kinds), SLOT_KINDS)
    return correlate(c.di["centred/cooccur"][keep], z_M[keep], num_boot=num_boot).as_dict()


def biography_step(cfg: Config, step: Step) -> list[dict]:
    """Step 6 from the di-attention record: softmax, small world, context measure, centred/cooccur DI, trained
    (seed-mean attention's correlation with its intervals; the per-seed mean and sd over its 2 seeds), and the
    quoted (un-centred / all) DI's and the untrained ports' Pearson."""
    rec = load_records(cfg.results)[BIOGRAPHY_RECORD]
    r = rec.select(attention="softmax", world="small", measure="context", di="centred/cooccur", ports="trained")[0]
    init = rec.select(attention="softmax", world="small", measure="context", di="centred/cooccur",
                      ports="untrained")[0]
    quoted = rec.select(attention="softmax", world="small", measure="context", di="uncentred/all", ports="trained")[0]
    return [{"seed": "mean of 2", "pearson": r["pearson"], "pearson_lo": r["pearson_lo"],
             "pearson_hi": r["pearson_hi"], "spearman": r["spearman"], "spearman_lo": r["spearman_lo"],
             "spearman_hi": r["spearman_hi"], "per_seed_pearson_mean": r["per_seed_pearson_mean"],
             "per_seed_pearson_sd": r["per_seed_pearson_sd"], "pearson_init": init["pearson"],
             "pearson_quoted": quoted["pearson"],
             "source": BIOGRAPHY_RECORD}]


def definition(cfg: Config, step: Step) -> dict:
    """What a finished step was made from (a rerun with a different one re-runs the step)."""
    return {"step": dataclasses.asdict(step), "seeds": cfg.seeds, "min_count": cfg.min_count,
            "num_boot": cfg.num_boot, "theory_steps": cfg.theory_steps if step.name.startswith("theory") else None}


def finished(cfg: Config, step: Step) -> list[dict] | None:
    """The rows of ``OUT/steps/<name>.json`` when it was made from this step's definition, else None."""
    path = pathlib.Path(cfg.out) / "steps" / f"{step.name}.json"
    if not path.exists():
        return None
    saved = jsonio.read_json_object(path, "a finished di-walk step")
    jsonio.require_keys(saved, ("definition", "rows"), str(path))
    return saved["rows"] if saved["definition"] == _plain(definition(cfg, step)) else None


def run_step(cfg: Config, step: Step, log=print) -> list[dict]:
    """The step's rows, from ``OUT/steps/<name>.json`` when it holds this definition, else measured and saved."""
    saved = finished(cfg, step)
    if saved is not None:
        log(f"[di-walk] step {step.index} {step.name}: finished earlier ({cfg.out})")
        return saved
    path, made = pathlib.Path(cfg.out) / "steps" / f"{step.name}.json", definition(cfg, step)
    log(f"[di-walk] step {step.index} {step.name}: {step.change}")
    clock = Clock()
    if step.name.startswith("theory"):
        rows = theory_step(cfg, step)
    elif step.name == "biography":
        rows = biography_step(cfg, step)
    else:
        rows = port_step(cfg, step, log)
    rows = [{"step": step.index, "name": step.name, **r} for r in rows]
    jsonio.write_json_atomic(path, {"definition": _plain(made), "rows": rows, **clock.elapsed()}, indent=1)
    return rows


def _plain(obj):
    """``obj`` as it reads back from JSON (tuples as lists)."""
    import json
    return json.loads(json.dumps(obj))


def summary(rows: list[dict]) -> list[dict]:
    """Per step in walk order: Pearson per seed, whether every seed reaches the law (≤ −0.8) and whether every
    seed's interval lies at or below it."""
    out = []
    for name in dict.fromkeys(r["name"] for r in rows):
        rs = [r for r in rows if r["name"] == name]
        p = [r["pearson"] for r in rs]
        out.append({"step": rs[0]["step"], "name": name, "pearson": p, "held": all(v <= LAW for v in p),
                    "held_interval": all(r["pearson_hi"] <= LAW for r in rs)})
    return out


def table(rows: list[dict], steps: tuple[Step, ...]) -> str:
    """The walk's table (markdown): one line per step, seeds' Pearson / Spearman with their intervals."""
    change = {s.name: s.change for s in steps}
    f = lambda r, k: f"{r[k]:+.3f} [{r[k + '_lo']:+.3f}, {r[k + '_hi']:+.3f}]"  # noqa: E731
    lines = ["| step | change | seed | Pearson [95% CI] | Spearman [95% CI] | untrained Pearson | final loss | "
             "attention on query / own sentence / earlier sentences |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        loss = f"{r['final_loss']:.3f}" if "final_loss" in r else (f"KL {r['final_kl']:.1e}" if "final_kl" in r
                                                                  else "—")
        share = (f"{r['on_query']:.2f} / {r['on_own_sentence']:.2f} / {r['on_earlier_sentences']:.2f}"
                 if "on_query" in r else "—")
        init = f"{r['pearson_init']:+.3f}" if "pearson_init" in r else "—"
        lines.append(f"| {r['step']} {r['name']} | {change.get(r['name'], '')} | {r['seed']} | {f(r, 'pearson')} | "
                     f"{f(r, 'spearman')} | {init} | {loss} | {share} |")
    return "\n".join(lines)


def _range(values) -> str:
    v = np.asarray(values, np.float64)
    return f"{v.mean():+.2f} ({v.min():+.2f} … {v.max():+.2f})" if v.size > 1 else f"{v[0]:+.2f}"


def step_table(rows: list[dict]) -> str:
    """One line per step (markdown): the seeds' Pearson as mean (min … max), the widest interval's ends, Spearman,
    the names-and-relations-only Pearson, the quoted (un-centred, all objects) DI's, the untrained members',
    the query's attention on itself, the mean z of the query token against the names', and the final loss."""
    lines = ["| step | Pearson, mean (min … max) | interval ends (lowest lo, highest hi) | Spearman | names + "
             "relations only | quoted DI | untrained | attention on the query itself | z query / z names | final "
             "loss |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["name"] for r in rows):
        rs = [r for r in rows if r["name"] == name]
        col = lambda k: _range([r[k] for r in rs]) if all(k in r for r in rs) else "—"  # noqa: E731
        ratio = (_range([r["z_query"] / r["z_name"] for r in rs]).replace("+", "")
                 if all("z_query" in r and "z_name" in r for r in rs) else "—")
        loss = (_range([r["final_loss"] for r in rs]).replace("+", "") if "final_loss" in rs[0] else
                f"KL {max(r['final_kl'] for r in rs):.1e}" if "final_kl" in rs[0] else "—")
        ends = f"[{min(r['pearson_lo'] for r in rs):+.2f}, {max(r['pearson_hi'] for r in rs):+.2f}]"
        lines.append(f"| {rs[0]['step']} {name} ({len(rs)}) | {col('pearson')} | {ends} | {col('spearman')} | "
                     f"{col('slots_pearson')} | {col('pearson_quoted')} | "
                     f"{col('pearson_init')} | {col('on_query').replace('+', '')} | {ratio} | {loss} |")
    return "\n".join(lines)


def regime(cfg: Config) -> dict:
    return {"world": "theory/world.MULTI_RELATION (8 objects, 2 relations, 19 subject-name tokens), drawn and "
                     f"written as token sequences, {cfg.facts} fact renderings per corpus (data/theory_text.py)",
            "model": f"Qwen2-style ports of width {cfg.width} (MLP {2 * cfg.width}, 2 query / 1 KV heads), 1, 2 or 4 "
                     "blocks; step 0 the single-layer theory model; step 6 the small-preset Biography ports",
            "dose": f"{cfg.train_steps} AdamW steps (peak lr 1e-2, warm-up and cosine; 224–512 tokens a step), "
                    f"{cfg.seeds} seeds per step; theory model {cfg.theory_steps} full-batch steps (GD or Adam)",
            "measure": "Pearson / Spearman of DI (centred, co-occurring objects) against the query's pooled "
                       "attention per token type, over the context from the document start; 95 % bootstrap "
                       f"intervals over token types ({cfg.num_boot} resamples); slots_*: over the subject-name and "
                       "relation types only"}


def run(cfg: Config, log=print) -> list[dict]:
    """Runs the chosen steps in walk order, writing the table and the record after each; the record also holds
    the steps of the same walk finished by earlier runs into ``OUT``."""
    clock, steps = Clock(), walk(cfg.train_steps, cfg.facts, cfg.width)
    out = pathlib.Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    done = {s.name: finished(cfg, s) for s in steps if s.name not in cfg.steps}
    for step in (s for s in steps if s.name in cfg.steps):
        done[step.name] = run_step(cfg, step, log)
        rows = [r for s in steps if done.get(s.name) for r in done[s.name]]
        jsonio.write_text_atomic(out / "table.md", step_table(rows) + "\n\n" + table(rows, steps) + "\n")
        write_record(cfg.results, RECORD, rows=rows, regime=regime(cfg),
                     provenance=provenance(config=dataclasses.asdict(cfg), seeds=range(cfg.seeds), clock=clock))
    return [r for s in steps if done.get(s.name) for r in done[s.name]]


FLAGS = Flags(Config, prog="cfka di-walk", description=__doc__.split("\n\n")[0],
              choices={"steps": lambda: list(NAMES)}, names={"num_boot": "bootstrap"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def parse(argv: list[str] | None) -> Config:
    return FLAGS.parse(argv)


def command(cfg: Config) -> int:
    """Runs the walk and prints its table: ``cfka di-walk``'s run function."""
    rows = run(cfg)
    print(table(rows, walk(cfg.train_steps, cfg.facts, cfg.width)))
    print(step_table(rows))
    for s in summary(rows):
        print(f"step {s['step']} {s['name']}: law held by every seed: {s['held']} (intervals: {s['held_interval']})")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(parse(argv))


if __name__ == "__main__":
    raise SystemExit(main())
