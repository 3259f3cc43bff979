"""Where can the prompt matter? STOC vs Random vs LAMOL on a shared-name world, with position controls (issue #23).

    python -m cfka_jax.experiments.stoc_regime --preset names150 --pt-dir runs/h23/pt-names150-qwen --out runs/h23/regime
    python -m cfka_jax.experiments.stoc_regime ... --train --seeds 0,1        # + CPT at α = 0.5 per kind and naive

The paper's claim (spec §9): STOC 51.5 Original sFTA against Random 17.7 and LAMOL 19.9 (α = 0.5, full update).
On a world whose name parts are shared as in the paper's 100k world (preset ``names150``: every new person's first
name and 96 % of their "First M." prefixes belong to old people; ``data/sharing.name_sharing``, printed first),
one PT model is prompted by each kind with the same span length (3), count (3 per source), budget and sampler:

    stoc_j1   STOC, token score ÷ (j + 1) (reference)       stoc_nq        STOC, ÷ (L − j)
    first_k   the first 3 spans of each source (position only, what ÷ (j + 1) picks without attention)
    random    3 random-position spans (may hold EOS)        random_no_eos  the same without EOS
    random_vocab  3 spans of random vocabulary ids           lamol          the EOS token alone

Per corpus (the drawn replay sequences, ``eval/coverage.corpus_measures``): where the prompts sit (share at
position 0, mean start), the share of written full names that are real old people / new people / invented, the
old facts voiced, true values per name mention, and the voiced share of the *interfered* old facts (sharing a value
or a "First M." prefix with the new data, ``data/sharing.interfered_facts``) vs the rest. With ``--train``, each
kind (and naive CPT) trains the preset's CPT from the PT model, and the per-fact retention (Original sFTA per test
occurrence, final step) is split the same way. Every corpus and run is its own folder (a killed study resumes);
``table.json`` and ``table.md`` in ``--out``. ``--pt-checkpoint`` prompts the PT run's newest training checkpoint
instead of its final parameters (labelled with its step; for a PT run still training). Every corpus records the
PT run's identity and the step it was sampled at (``runs/replay.replay_made_from`` / ``checkpoint_made_from``); a
corpus in ``--out`` made from another PT run is refused with one line naming ``--out`` and the folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib

import numpy as np
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.data.pipeline import build_data
from cfka_jax.data.tokenize import BPE_MIN_VOCAB
from cfka_jax.data.sharing import format_sharing, interfered_facts, name_sharing
from cfka_jax.eval.coverage import corpus_measures
from cfka_jax.runs.biography import build_model, continual
from cfka_jax.runs.folder import RunFolder, RunFolderError
from cfka_jax.runs.presets import BIOGRAPHY, override
from cfka_jax.runs.replay import (ReplaySwitches, checkpoint_made_from, ensure_replay, replay_made_from,
                                  synthetic_replay_config)
from cfka_jax.runs.specs import ARCHS, CPTSpec, PTSpec, UPDATES
from cfka_jax.values import float_arg, int_arg
from cfka_jax.train.step import make_eval_logits, master_params
from cfka_jax.experiments.replay_retention import occurrence_soft

KINDS = {"stoc_j1": ("stoc", {}), "stoc_nq": ("stoc", {"score_norm": "n_queries"}), "first_k": ("first_k", {}),
         "random": ("random", {}), "random_no_eos": ("random_no_eos", {}), "random_vocab": ("random_vocab", {}),
         "lamol": ("lamol", {})}
MEASURES = ("prompts_at_0", "names_real_old", "names_new", "names_invented", "pt_fact_coverage",
            "true_values_per_mention", "voiced/interfered", "voiced/rest")


@dataclasses.dataclass(frozen=True)
class RegimeConfig:
    preset: str = "names150"
    pt_dir: str = "runs/h23/pt-names150-qwen"
    out: str = "runs/h23/regime"
    kinds: tuple[str, ...] = tuple(KINDS)
    seeds: tuple[int, ...] = (0,)
    sources: int = 10_000
    alpha: float = 0.5
    train: bool = False
    naive: bool = False
    pt_checkpoint: bool = False
    arch: str = "qwen"
    update: str = "full"
    lora_rank: int | None = None
    freeze_layers: int | None = None
    bpe_vocab: int | None = None
    cache_dir: str = "runs/data-cache"
    progress: bool = True
    record: str | None = None
    pt_label: str | None = None
    results: str = "results"

    @property
    def scale(self):
        """The preset with the run's BPE tokenizer (what the PT run of ``pt_dir`` was trained with)."""
        return override(BIOGRAPHY[self.preset], {"bpe_vocab": self.bpe_vocab} if self.bpe_vocab is not None else {})

    def __post_init__(self):
        if self.preset not in BIOGRAPHY:
            raise ValueError(f"--preset must be one of {sorted(BIOGRAPHY)}, got {self.preset!r}")
        if not set(self.kinds) <= set(KINDS) or len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"--kinds must be distinct names from {list(KINDS)}, got {list(self.kinds)}")
        if not self.kinds and not self.naive:
            raise ValueError("--kinds is empty and --naive is not set: nothing to run")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError(f"--seeds must be distinct integers >= 0, got {list(self.seeds)}")
        if self.sources < 1 or not 0.0 < self.alpha < 1.0:
            raise ValueError(f"--sources must be >= 1 and --alpha in (0, 1), got {self.sources}, {self.alpha}")
        if (self.train or self.naive) and self.pt_checkpoint:
            raise ValueError("--train / --naive need the finished PT run; drop --pt-checkpoint")
        if self.arch not in ARCHS or self.update not in UPDATES:
            raise ValueError(f"--arch in {ARCHS}, --update in {UPDATES}; got {self.arch!r}, {self.update!r}")
        if self.record is not None and not self.pt_label:
            raise ValueError("--record needs --pt-label (which PT model, e.g. the PT seed: s0, s1): records pair runs "
                             "by PT model and seed")
        PTSpec(preset=self.preset, arch=self.arch, bpe_vocab=self.bpe_vocab)  # --bpe-vocab below the alphabet
        if self.train or self.naive:  # every CPT cell's spec (update options, LoRA rank), before anything runs
            for seed in self.seeds:
                for kind in (*(self.kinds if self.train else ()), *((None,) if self.naive else ())):
                    cell_spec(self, kind, seed)
        elif self.update != "full" or self.lora_rank is not None or self.freeze_layers is not None:
            raise ValueError("--update / --lora-rank / --freeze-layers set the CPT runs of --train / --naive; give "
                             "one of those or drop them")


def cell_spec(cfg: RegimeConfig, kind: str | None, seed: int) -> CPTSpec:
    """The CPT spec of one cell (``kind`` None: naive) from the PT run (validated on construction)."""
    out = pathlib.Path(cfg.out) / f"cpt-{kind or 'naive'}-seed{seed}"
    return CPTSpec(preset=cfg.preset, out=str(out), method=KINDS[kind][0] if kind else "naive", alpha=cfg.alpha,
                   arch=cfg.arch, seed=seed, pt_dir=cfg.pt_dir, cache_dir=cfg.cache_dir, progress=cfg.progress,
                   update=cfg.update, lora_rank=cfg.lora_rank, freeze_layers=cfg.freeze_layers,
                   bpe_vocab=cfg.bpe_vocab,
                   **({"replay": switches(cfg, kind),
                       "replay_dir": str(pathlib.Path(cfg.out) / f"replay-{kind}-seed{seed}")} if kind else {}))


def check_inputs(cfg: RegimeConfig) -> None:
    """Before any data is built or anything written: ``--pt-dir`` holds a finished PT run (with ``--pt-checkpoint``:
    a run with a training checkpoint or exported parameters), and ``--out`` is a folder (or absent).

    Raises:
      RunFolderError / ValueError: naming the option and the folder.
    """
    folder = RunFolder(cfg.pt_dir)
    if cfg.pt_checkpoint:
        if folder.read_json("config.json") is None or not (folder.checkpoints.is_dir() or folder.params_dir.is_dir()):
            raise RunFolderError(f"--pt-dir {cfg.pt_dir} holds no PT run with a checkpoint (config.json and "
                                 f"checkpoints/); train one with `cfka pt --preset {cfg.preset} --out {cfg.pt_dir}`")
    elif folder.final() is None or not folder.params_dir.is_dir():
        raise RunFolderError(f"--pt-dir {cfg.pt_dir} holds no finished PT run (final.json and params/); train it with "
                             f"`cfka pt --preset {cfg.preset} --out {cfg.pt_dir}`")
    if pathlib.Path(cfg.out).exists() and not pathlib.Path(cfg.out).is_dir():
        raise ValueError(f"--out {cfg.out} is a file, not a study folder")


def switches(cfg: RegimeConfig, kind: str) -> ReplaySwitches:
    return ReplaySwitches(num_source_seqs=cfg.sources, **KINDS[kind][1])


def pt_model(cfg: RegimeConfig, vocab_size: int):
    """(the PT model, its step): final parameters, or the newest training checkpoint with ``pt_checkpoint``."""
    p, folder = cfg.scale, RunFolder(cfg.pt_dir)
    graphdef, params, rest = nnx.split(build_model(p, cfg.arch, vocab_size, seed=0), nnx.Param, ...)
    load = folder.checkpoint_params if cfg.pt_checkpoint else folder.load_params
    params, step = load(master_params(params))
    return nnx.merge(graphdef, params, rest), int(step)


def prompt_positions(corpus) -> dict:
    starts = np.array([p.start for p in corpus.prompts if p.source >= 0])
    return {"prompts_at_0": float(np.mean(starts == 0)) if len(starts) else 0.0,
            "prompt_mean_start": float(starts.mean()) if len(starts) else 0.0}


def measure_corpus(cfg: RegimeConfig, kind: str, seed: int, model, step: int, data) -> dict:
    """Build (or reuse) one corpus and measure it; ``<folder>/measures.json``."""
    tag = "" if not cfg.pt_checkpoint else f"-pt{step}"
    folder = pathlib.Path(cfg.out) / f"replay-{kind}-seed{seed}{tag}"
    rcfg = synthetic_replay_config(KINDS[kind][0], data.config.seq_len, switches(cfg, kind), seed)
    made_from = (checkpoint_made_from(data, cfg.pt_dir, step) if cfg.pt_checkpoint  # the PT run and its step
                 else replay_made_from(data, cfg.pt_dir))  # what train_cell's CPT checks
    corpus = ensure_replay(folder, model, data, rcfg, made_from=made_from, flag="--out")
    texts = data.tokenizer.batch_decode([s.tolist() for s in corpus.sequences])
    s = corpus.stats
    m = {"kind": kind, "seed": seed, "pt_step": step, **prompt_positions(corpus),
         **corpus_measures(texts, data.world), "distinct_prompts": s["num_unique_prompts"],
         "prompts": s["num_prompts"], "minhash_dropped": s["minhash_dropped"], "drawn": s["num_sequences"],
         "replay_folder": str(folder)}
    jsonio.write_json_atomic(folder / "measures.json", m, indent=1)
    return m


def retention_split(run, data) -> dict:
    """Original sFTA of the final parameters over interfered old facts vs the rest (per test occurrence)."""
    packed, targets = data.eval["pt_test"]
    split = interfered_facts(data.world)
    pids = data.splits["pt_test"].pid[targets.doc]
    flag = np.array([split[(int(p), int(a))]["interfered"] for p, a in zip(pids, targets.attr)])
    soft = occurrence_soft(make_eval_logits(run.graphdef, run.rest), run.params, packed, targets)
    return {"retention/interfered": float(soft[flag].mean()) if flag.any() else float("nan"),
            "retention/rest": float(soft[~flag].mean()) if (~flag).any() else float("nan"),
            "occurrences/interfered": int(flag.sum()), "occurrences/rest": int((~flag).sum())}


def train_cell(cfg: RegimeConfig, kind: str | None, seed: int, data) -> dict:
    """One CPT run (``kind`` None: naive) from the PT run; final metrics plus the retention split."""
    spec = cell_spec(cfg, kind, seed)
    out = pathlib.Path(spec.out)
    split_path = out / "retention_split.json"
    if split_path.exists() and RunFolder(out).final() is not None:
        return {**RunFolder(out).final(), **jsonio.read_json_object(split_path)}
    run = continual(spec, data=data)
    split = retention_split(run, data)
    jsonio.write_json_atomic(split_path, split, indent=1)
    return {**run.final, **split}


def markdown(rows: list[dict]) -> str:
    head = ["kind", "seed", "PT step", "distinct prompts", "prompts at 0 (%)", "names real old (%)", "names new (%)",
            "names invented (%)", "old facts voiced (%)", "true values / mention (%)", "voiced interfered (%)",
            "voiced rest (%)", "Original sFTA", "Original EM", "Continual sFTA", "retention interfered",
            "retention rest"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    pct = lambda r, k: f"{100 * r[k]:.1f}" if k in r else "–"  # noqa: E731
    for r in rows:
        cells = [r["kind"], str(r["seed"]), str(r.get("pt_step", "–")), str(r.get("distinct_prompts", "–"))]
        cells += [pct(r, k) for k in MEASURES]
        cells += [pct(r, k) for k in ("Original/sFTA", "Original/EM", "Continual/sFTA", "retention/interfered",
                                      "retention/rest")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main_cfg(cfg: RegimeConfig) -> list[dict]:
    check_inputs(cfg)
    data = build_data(cfg.scale.data_config(), cfg.cache_dir)
    sharing = name_sharing(data.world)
    print(f"[stoc-regime] world {cfg.preset}: {format_sharing(sharing)}")
    model, step = pt_model(cfg, len(data.tokenizer))
    rows = []
    for seed in cfg.seeds:
        for kind in cfg.kinds:
            row = measure_corpus(cfg, kind, seed, model, step, data)
            if cfg.train:
                row.update(train_cell(cfg, kind, seed, data))
                write_study_record(cfg)
            rows.append(row)
            print(f"[stoc-regime] {kind} seed {seed}: " + ", ".join(f"{k} {row[k]:.3f}" for k in MEASURES))
        if cfg.naive:
            rows.append({"kind": "naive", "seed": seed, **train_cell(cfg, None, seed, data)})
            write_study_record(cfg)
    print(markdown(rows))
    return report(cfg, sharing)


def collect(out: pathlib.Path) -> list[dict]:
    """Every finished corpus (``measures.json``) and CPT run (final + retention split) in ``out``, as rows."""
    rows = {}
    for path in sorted(out.glob("replay-*/measures.json")):
        m = jsonio.read_json_object(path)
        rows[(m["kind"], m["seed"], m["pt_step"])] = m
    for path in sorted(out.glob("cpt-*-seed*/retention_split.json")):
        final = RunFolder(path.parent).final()
        if final is None:
            continue
        kind, _, seed = path.parent.name[len("cpt-"):].rpartition("-seed")
        base = next((r for (k, s, _), r in rows.items() if k == kind and s == int(seed)), None)
        row = base if base is not None else rows.setdefault((kind, int(seed), None), {"kind": kind, "seed": int(seed)})
        row.update({**final, **jsonio.read_json_object(path)})
    order = list(KINDS) + ["naive"]
    return sorted(rows.values(), key=lambda r: (order.index(r["kind"]), r["seed"], r.get("pt_step") or 0))


def report(cfg: RegimeConfig, sharing: dict | None = None) -> list[dict]:
    """``table.json`` / ``table.md`` of everything finished in ``cfg.out`` (nothing is trained)."""
    out = pathlib.Path(cfg.out)
    rows = collect(out)
    if sharing is None:
        sharing = name_sharing(build_data(cfg.scale.data_config(), cfg.cache_dir).world)
    jsonio.write_json_atomic(out / "table.json", {"preset": cfg.preset, "sharing": sharing, "rows": rows}, indent=1)
    jsonio.write_text_atomic(out / "table.md", f"world {cfg.preset}: {format_sharing(sharing)}\n\n"
                             + markdown(rows) + "\n")
    write_study_record(cfg)
    return rows


RECORD_METRICS = {"Original/sFTA": "original_sfta", "Original/EM": "original_em", "Continual/sFTA": "continual_sfta",
                  "retention/interfered": "retention_interfered", "retention/rest": "retention_rest",
                  "voiced/interfered": "voiced_interfered", "voiced/rest": "voiced_rest",
                  "pt_fact_coverage": "old_facts_voiced", "names_real_old": "names_real_old"}
"""Study measures → record columns (×100, as the paper reports them)."""
CLOCK = Clock()
"""Wall and CPU time of this process (a produced record's provenance)."""


def write_study_record(cfg: RegimeConfig):
    """The produced record ``cfg.record`` (``results/<name>.json``) of every finished CPT cell in ``cfg.out``: one row
    per (kind, seed) with the PT model's label; rewritten as cells finish, so nothing measured is lost. No-op
    without ``--record``."""
    if cfg.record is None:
        return None
    rows = [{"kind": {"stoc_j1": "stoc"}.get(r["kind"], r["kind"]), "pt": cfg.pt_label, "seed": r["seed"],
             **{new: round(100 * float(r[old]), 2) for old, new in RECORD_METRICS.items() if r.get(old) is not None}}
            for r in collect(pathlib.Path(cfg.out)) if r.get("Original/sFTA") is not None]
    if not rows:
        return None
    pt = RunFolder(cfg.pt_dir).final() or {}
    regime = {"model": f"Biography port ({cfg.arch}, preset {cfg.preset})", "world": cfg.preset,
              "dose": f"the preset's CPT steps, α = {cfg.alpha}, {cfg.update} update",
              "pt_quality": {k: round(100 * float(v), 2) for k, v in pt.items()
                             if k in ("Original/sFTA", "Original/EM", "Train/sFTA") and v is not None}}
    seeds = sorted({r["seed"] for r in rows})
    return write_record(cfg.results, cfg.record, rows=rows, regime=regime,
                        provenance=provenance(config=dataclasses.asdict(cfg), seeds=seeds,
                                              pt_replicates=[cfg.pt_label], clock=CLOCK))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="names150", help="a Biography preset (names150: shared names)")
    ap.add_argument("--pt-dir", required=True, help="the PT run folder (cfka pt --preset P --out DIR)")
    ap.add_argument("--out", required=True, help="study folder (corpora, CPT runs, table.json, table.md)")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    ap.add_argument("--seeds", default=(0,), type=_seeds, help="comma-separated corpus / CPT seeds")
    ap.add_argument("--sources", type=int_arg(lo=1), default=10_000, help="first cpt_train documents used as sources")
    ap.add_argument("--alpha", type=float_arg(lo=0.0, hi=1.0, lo_open=True, hi_open=True), default=0.5)
    ap.add_argument("--train", action="store_true", help="also run CPT per kind, with the retention split")
    ap.add_argument("--naive", action="store_true", help="also run naive CPT (the control), per seed")
    ap.add_argument("--report", action="store_true", help="only collect what is finished into table.md/json")
    ap.add_argument("--pt-checkpoint", action="store_true", help="prompt the PT run's newest training checkpoint")
    ap.add_argument("--arch", default="qwen", choices=ARCHS, help="the PT run's model family")
    ap.add_argument("--update", default="full", choices=UPDATES, help="CPT update mode (full, freeze, lora)")
    ap.add_argument("--lora-rank", type=int_arg(lo=1), default=None, help="LoRA rank (default: the preset's)")
    ap.add_argument("--freeze-layers", type=int_arg(lo=0), default=None,
                    help="frozen bottom blocks (default: the preset's)")
    ap.add_argument("--bpe-vocab", type=int_arg(lo=BPE_MIN_VOCAB), default=None,
                    help="the PT run's BPE tokenizer size (cfka pt --bpe-vocab)")
    ap.add_argument("--cache-dir", default="runs/data-cache")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--record", default=None, help="also write the produced result record results/RECORD.json")
    ap.add_argument("--pt-label", default=None, help="the PT model's label in the record (e.g. its PT seed: s0)")
    ap.add_argument("--results", default="results", help="the folder of result records")
    a = ap.parse_args(argv)
    try:
        cfg = RegimeConfig(preset=a.preset, pt_dir=a.pt_dir, out=a.out, kinds=tuple(k for k in a.kinds.split(",") if k),
                           seeds=a.seeds, sources=a.sources, alpha=a.alpha,
                           train=a.train, naive=a.naive or a.report, pt_checkpoint=a.pt_checkpoint, cache_dir=a.cache_dir,
                           progress=not a.no_progress, arch=a.arch, update=a.update, lora_rank=a.lora_rank,
                           freeze_layers=a.freeze_layers, bpe_vocab=a.bpe_vocab, record=a.record,
                           pt_label=a.pt_label, results=a.results)
    except ValueError as err:
        ap.error(str(err))  # exit 2, naming the flag
    try:
        report(cfg) if a.report else main_cfg(cfg)
    except (ValueError, OSError) as err:  # a missing or malformed input: one line naming it, exit 2
        if os.environ.get("CFKA_TRACEBACK"):
            raise
        ap.exit(2, f"{ap.prog}: error: {err}\n")
    return 0


def _seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: comma-separated integers >= 0, no repeats (argparse names the option on an error)."""
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers >= 0, got {text!r}") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"distinct integers >= 0, got {text!r}")
    return seeds


if __name__ == "__main__":
    raise SystemExit(main())
