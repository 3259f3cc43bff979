"""Where can the prompt matter? STOC vs Random vs LAMOL on a shared-name world, with position controls (issue #23).

    python -m cfka_jax.experiments.stoc_regime --preset names150 --pt-dir runs/pt-names150-qwen --out runs/stoc-regime
    python -m cfka_jax.experiments.stoc_regime ... --train --seeds 0,1        # + CPT at α = 0.5 per kind and naive
    python -m cfka_jax.experiments.stoc_regime --preset names150 --pt-seeds 0,1 --seeds 0,1,2 --train --naive \
        --out runs/regime-s3 --record cfka/stoc_names150_s3  # PT replicates trained here, 2 × 3 runs per cell

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

PT replicates (``--pt-seeds 0,1`` instead of ``--pt-dir``): PT model ``k`` is trained here from seed ``k`` into
``<pt-root>/pt-seed<k>/`` (default ``--pt-root``: ``--out``; resumed, and skipped once finished; at
``--pt-preset``, default ``--preset``, so that a dose variant shares its base's PT models) and its study is
``<out>/pt<k>/``, laid out as a ``--pt-dir`` study's ``--out``; every cell runs for each (PT seed, seed) pair.
``table.json`` / ``table.md`` in ``--out`` then hold every PT model's rows (column PT = ``s<k>``) and, in
``table.json``, the mean and spread per kind over both axes. ``--record NAME`` writes one row per (kind, PT model,
seed) (``pt`` = ``--pt-label``, or ``s<k>`` with ``--pt-seeds``) and the mean and spread over both axes in
``provenance.summary`` (``experiments/replicates.py``). The command line is generated from :class:`RegimeConfig`
(``cfka_jax/cli_gen.py``; ``--config FILE`` too).
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
from cfka_jax.experiments import replicates as rep
from cfka_jax.experiments.replay_retention import occurrence_soft
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.data.pipeline import build_data
from cfka_jax.data.sharing import format_sharing, interfered_facts, name_sharing
from cfka_jax.data.tokenize import BPE_MIN_VOCAB
from cfka_jax.eval.coverage import corpus_measures
from cfka_jax.runs.biography import build_model, continual, pretrain
from cfka_jax.runs.folder import RunFolder, RunFolderError
from cfka_jax.runs.presets import BIOGRAPHY, lookup, override
from cfka_jax.runs.replay import (
    ReplaySwitches,
    checkpoint_made_from,
    ensure_replay,
    replay_made_from,
    synthetic_replay_config,
)
from cfka_jax.runs.specs import ARCHS, UPDATES, CPTSpec, PTSpec
from cfka_jax.train.step import make_eval_logits, master_params
from cfka_jax.values import float_arg, int_arg

KINDS = {"stoc_j1": ("stoc", {}), "stoc_nq": ("stoc", {"score_norm": "n_queries"}), "first_k": ("first_k", {}),
         "random": ("random", {}), "random_no_eos": ("random_no_eos", {}), "random_vocab": ("random_vocab", {}),
         "lamol": ("lamol", {})}
MEASURES = ("prompts_at_0", "names_real_old", "names_new", "names_invented", "pt_fact_coverage",
            "true_values_per_mention", "voiced/interfered", "voiced/rest")


@dataclasses.dataclass(frozen=True)
class RegimeConfig:
    """Where can the prompt matter? STOC vs Random vs LAMOL on a shared-name world, with position controls."""

    preset: str = "names150"
    """a Biography preset (names150: shared names)"""
    pt_dir: str | None = None
    """the PT run folder (cfka pt --preset P --out DIR); or --pt-seeds"""
    out: str = "runs/stoc-regime"
    """study folder (corpora, CPT runs, table.json, table.md)"""
    kinds: tuple[str, ...] = tuple(KINDS)
    """comma-separated subset of the replay kinds"""
    seeds: tuple[int, ...] = (0,)
    """comma-separated corpus / CPT seeds"""
    pt_seeds: tuple[int, ...] = ()
    """PT replicates instead of --pt-dir: one PT run per seed, trained here into <pt-root>/pt-seed<k>/ (default: none)"""
    pt_root: str | None = None
    """--pt-seeds: the folder of the PT replicates (default: --out); studies of one PT preset may share it"""
    pt_preset: str | None = None
    """--pt-seeds: the preset the PT replicates are trained at (default: --preset); a dose variant shares its base's
    PT (--preset names600x4 --pt-preset names600)"""
    sources: int = 10_000
    """first cpt_train documents used as sources"""
    alpha: float = 0.5
    """new-data fraction of the CPT runs, in (0, 1)"""
    train: bool = False
    """also run CPT per kind, with the retention split"""
    naive: bool = False
    """also run naive CPT (the control), per seed"""
    report: bool = False
    """only collect what is finished into table.md/json"""
    pt_checkpoint: bool = False
    """prompt the PT run's newest training checkpoint"""
    arch: str = "qwen"
    """the PT run's model family"""
    update: str = "full"
    """CPT update mode (full, freeze, lora)"""
    lora_rank: int | None = None
    """LoRA rank (default: the preset's)"""
    freeze_layers: int | None = None
    """frozen bottom blocks (default: the preset's)"""
    bpe_vocab: int | None = None
    """the PT run's BPE tokenizer size (cfka pt --bpe-vocab)"""
    cache_dir: str = "runs/data-cache"
    """data cache folder"""
    progress: bool = True
    """progress bars"""
    record: str | None = None
    """also write the produced result record results/RECORD.json"""
    pt_label: str | None = None
    """the PT model's label in the record (e.g. its PT seed: s0); --pt-seeds labels its own s<k>"""
    results: str = "results"
    """the folder of result records"""

    @property
    def scale(self):
        """The preset with the run's BPE tokenizer (what the PT run of ``pt_dir`` was trained with)."""
        return override(BIOGRAPHY[self.preset], {"bpe_vocab": self.bpe_vocab} if self.bpe_vocab is not None else {})

    def __post_init__(self):
        if self.preset not in BIOGRAPHY:
            raise ValueError(f"--preset must be one of {sorted(BIOGRAPHY)}, got {self.preset!r}")
        if not set(self.kinds) <= set(KINDS) or len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"--kinds must be distinct names from {list(KINDS)}, got {list(self.kinds)}")
        if not self.kinds and not (self.naive or self.report):
            raise ValueError("--kinds is empty and --naive is not set: nothing to run")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError(f"--seeds must be distinct integers >= 0, got {list(self.seeds)}")
        rep.check_seed_list(self.pt_seeds, "--pt-seeds", allow_empty=True)
        if self.sources < 1 or not 0.0 < self.alpha < 1.0:
            raise ValueError(f"--sources must be >= 1 and --alpha in (0, 1), got {self.sources}, {self.alpha}")
        if (self.train or self.naive) and self.pt_checkpoint:
            raise ValueError("--train / --naive need the finished PT run; drop --pt-checkpoint")
        if self.arch not in ARCHS or self.update not in UPDATES:
            raise ValueError(f"--arch in {ARCHS}, --update in {UPDATES}; got {self.arch!r}, {self.update!r}")
        if self.record is not None and not self.pt_label and not self.pt_seeds:
            raise ValueError("--record needs --pt-label (which PT model, e.g. the PT seed: s0, s1): records pair runs "
                             "by PT model and seed")
        self._check_pt_source()
        PTSpec(preset=self.preset, arch=self.arch, bpe_vocab=self.bpe_vocab)  # --bpe-vocab below the alphabet
        if self.train or self.naive:  # every CPT cell's spec (update options, LoRA rank), before anything runs
            for seed in self.seeds:
                for kind in (*(self.kinds if self.train else ()), *((None,) if self.naive else ())):
                    cell_spec(self, kind, seed)
        elif self.update != "full" or self.lora_rank is not None or self.freeze_layers is not None:
            raise ValueError("--update / --lora-rank / --freeze-layers set the CPT runs of --train / --naive; give "
                             "one of those or drop them")


    def _check_pt_source(self) -> None:
        """One PT source: ``--pt-dir`` (one PT run) or ``--pt-seeds`` (PT replicates trained here)."""
        if (self.pt_dir is None) == (not self.pt_seeds):
            raise ValueError("give --pt-dir DIR (one finished PT run) or --pt-seeds K,K (PT replicates trained into "
                             "<pt-root>/pt-seed<k>/), " + ("not both" if self.pt_dir else "got neither"))
        if self.pt_seeds and (self.pt_checkpoint or self.pt_label):
            raise ValueError("--pt-seeds trains its PT replicates and labels them s<k>: drop "
                             + ("--pt-checkpoint (it prompts one PT run still training: use --pt-dir)"
                                if self.pt_checkpoint else "--pt-label"))
        if (self.pt_root is not None or self.pt_preset is not None) and not self.pt_seeds:
            raise ValueError("--pt-root / --pt-preset say where and at which preset --pt-seeds trains its PT "
                             "replicates; add --pt-seeds or drop them")
        if self.pt_preset is not None:
            a, b = BIOGRAPHY[self.preset], lookup(BIOGRAPHY, self.pt_preset, "Biography")
            if (a.pt, a.data_config(), a.model) != (b.pt, b.data_config(), b.model):
                raise ValueError(f"--pt-preset {self.pt_preset} trains another PT model than --preset {self.preset} "
                                 "starts from (its PT schedule, data or model differ)")


def studies(cfg: RegimeConfig) -> list[RegimeConfig]:
    """One study per PT model: ``cfg`` itself with ``--pt-dir``; with ``--pt-seeds``, PT replicate k's (PT run
    ``<pt-root>/pt-seed<k>``, study folder ``<out>/pt<k>``, label ``s<k>``; its record is the whole study's)."""
    if not cfg.pt_seeds:
        return [cfg]
    root = cfg.pt_root or cfg.out
    return [dataclasses.replace(cfg, pt_dir=str(rep.pt_folder(root, k)), out=str(pathlib.Path(cfg.out) / f"pt{k}"),
                                pt_label=rep.pt_label(k), pt_seeds=(), pt_root=None, pt_preset=None, record=None)
            for k in cfg.pt_seeds]


def pt_spec(cfg: RegimeConfig, pt_seed: int) -> PTSpec:
    """PT replicate ``pt_seed`` of ``--pt-seeds``: its own PT run from that seed, ``<pt-root>/pt-seed<k>``."""
    return PTSpec(preset=cfg.pt_preset or cfg.preset, out=str(rep.pt_folder(cfg.pt_root or cfg.out, pt_seed)),
                  arch=cfg.arch,
                  seed=pt_seed, cache_dir=cfg.cache_dir, progress=cfg.progress, bpe_vocab=cfg.bpe_vocab)


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

    With ``--pt-seeds``: every PT replicate's folder is empty or holds that very PT run (trained or resumed later),
    and ``--pt-root`` is a folder (or absent).

    Raises:
      RunFolderError / ValueError: naming the option and the folder.
    """
    if pathlib.Path(cfg.out).exists() and not pathlib.Path(cfg.out).is_dir():
        raise ValueError(f"--out {cfg.out} is a file, not a study folder")
    if cfg.pt_seeds:
        if cfg.pt_root is not None and pathlib.Path(cfg.pt_root).exists() and not pathlib.Path(cfg.pt_root).is_dir():
            raise ValueError(f"--pt-root {cfg.pt_root} is a file, not a folder")
        for k in cfg.pt_seeds:
            spec = pt_spec(cfg, k)
            RunFolder(spec.out).check(spec, spec.scale)
        return
    folder = RunFolder(cfg.pt_dir)
    if cfg.pt_checkpoint:
        if folder.read_json("config.json") is None or not (folder.checkpoints.is_dir() or folder.params_dir.is_dir()):
            raise RunFolderError(f"--pt-dir {cfg.pt_dir} holds no PT run with a checkpoint (config.json and "
                                 f"checkpoints/); train one with `cfka pt --preset {cfg.preset} --out {cfg.pt_dir}`")
    elif folder.final() is None or not folder.params_dir.is_dir():
        raise RunFolderError(f"--pt-dir {cfg.pt_dir} holds no finished PT run (final.json and params/); train it with "
                             f"`cfka pt --preset {cfg.preset} --out {cfg.pt_dir}`")


def train_pts(cfg: RegimeConfig, data) -> None:
    """``--pt-seeds``: trains (or resumes) every PT replicate whose folder holds no finished run."""
    for k in cfg.pt_seeds:
        spec = pt_spec(cfg, k)
        folder = RunFolder(spec.out)
        if folder.final() is None or not folder.params_dir.is_dir():
            print(f"[stoc-regime] PT replicate {rep.pt_label(k)}: {spec.out}")
            pretrain(spec, data)


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
    done = rep.finished(split_path, out, spec)  # refuses a folder of another run
    if done is not None and RunFolder(out).final() is not None:
        return {**RunFolder(out).final(), **done}
    run = continual(spec, data=data)
    split = retention_split(run, data)
    jsonio.write_json_atomic(split_path, split, indent=1)
    return {**run.final, **split}


def markdown(rows: list[dict]) -> str:
    """One line per corpus / CPT run; a first column PT when the rows come from several PT models."""
    by_pt = any("pt" in r for r in rows)
    head = ["PT"] * by_pt + [
        "kind", "seed", "PT step", "distinct prompts", "prompts at 0 (%)", "names real old (%)", "names new (%)",
        "names invented (%)", "old facts voiced (%)", "true values / mention (%)", "voiced interfered (%)",
        "voiced rest (%)", "Original sFTA", "Original EM", "Continual sFTA", "retention interfered",
        "retention rest"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    pct = lambda r, k: f"{100 * r[k]:.1f}" if k in r else "–"  # noqa: E731
    for r in rows:
        cells = [str(r.get("pt"))] * by_pt + [r["kind"], str(r["seed"]), str(r.get("pt_step", "–")),
                                              str(r.get("distinct_prompts", "–"))]
        cells += [pct(r, k) for k in MEASURES]
        cells += [pct(r, k) for k in ("Original/sFTA", "Original/EM", "Continual/sFTA", "retention/interfered",
                                      "retention/rest")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main_cfg(cfg: RegimeConfig) -> list[dict]:
    """Runs (or resumes) the study: with ``--pt-seeds``, the PT replicates first, then every PT model's study;
    the record is rewritten as each CPT cell finishes. Returns the collected rows."""
    check_inputs(cfg)
    data = build_data(cfg.scale.data_config(), cfg.cache_dir)
    sharing = name_sharing(data.world)
    print(f"[stoc-regime] world {cfg.preset}: {format_sharing(sharing)}")
    train_pts(cfg, data)
    for study in studies(cfg):
        rows = run_study(study, data, top=cfg)
        print(markdown(rows))
    return report(cfg, sharing)


def run_study(cfg: RegimeConfig, data, top: RegimeConfig) -> list[dict]:
    """Every corpus (and with ``--train`` / ``--naive`` every CPT cell) of one PT model; ``top``'s record is
    rewritten after each cell."""
    model, step = pt_model(cfg, len(data.tokenizer))
    rows = []
    for seed in cfg.seeds:
        for kind in cfg.kinds:
            row = measure_corpus(cfg, kind, seed, model, step, data)
            if cfg.train:
                row.update(train_cell(cfg, kind, seed, data))
                write_study_record(top)
            rows.append(row)
            print(f"[stoc-regime] {cfg.pt_label or ''} {kind} seed {seed}: "
                  + ", ".join(f"{k} {row[k]:.3f}" for k in MEASURES))
        if cfg.naive:
            rows.append({"kind": "naive", "seed": seed, **train_cell(cfg, None, seed, data)})
            write_study_record(top)
    return rows


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


def collect_all(cfg: RegimeConfig) -> list[dict]:
    """:func:`collect` of the study, or with ``--pt-seeds`` of every PT model's study, each row with its ``pt``."""
    if not cfg.pt_seeds:
        return collect(pathlib.Path(cfg.out))
    return [{"pt": study.pt_label, **r} for study in studies(cfg) for r in collect(pathlib.Path(study.out))]


def report(cfg: RegimeConfig, sharing: dict | None = None) -> list[dict]:
    """``table.json`` / ``table.md`` of everything finished in ``cfg.out`` (nothing is trained); ``table.json``
    also holds the mean and spread per kind over PT models and seeds."""
    out = pathlib.Path(cfg.out)
    rows = collect_all(cfg)
    if sharing is None:
        sharing = name_sharing(build_data(cfg.scale.data_config(), cfg.cache_dir).world)
    jsonio.write_json_atomic(out / "table.json", {"preset": cfg.preset, "sharing": sharing, "rows": rows,
                                                  "summary": rep.summary(rows, ("kind",), list(RECORD_METRICS))},
                             indent=1)
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
    rows = [{"kind": {"stoc_j1": "stoc"}.get(r["kind"], r["kind"]), "pt": r.get("pt", cfg.pt_label),
             "seed": r["seed"],
             **{new: round(100 * float(r[old]), 2) for old, new in RECORD_METRICS.items() if r.get(old) is not None}}
            for r in collect_all(cfg) if r.get("Original/sFTA") is not None]
    if not rows:
        return None
    quality = {study.pt_label: _pt_quality(study.pt_dir) for study in studies(cfg)}
    regime = {"model": f"Biography port ({cfg.arch}, preset {cfg.preset})", "world": cfg.preset,
              "dose": f"the preset's CPT steps, α = {cfg.alpha}, {cfg.update} update",
              "pt_quality": quality if cfg.pt_seeds else quality[cfg.pt_label]}
    prov = provenance(config=dataclasses.asdict(cfg), seeds=sorted({r["seed"] for r in rows}),
                      pt_replicates=sorted({r["pt"] for r in rows}), clock=CLOCK,
                      command=rep.command_line(FLAGS.prog, __file__))
    prov.update(summary=rep.summary(rows, ("kind",), list(RECORD_METRICS.values())), seeds_planned=list(cfg.seeds),
                pt_seeds_planned=list(cfg.pt_seeds))
    return write_record(cfg.results, cfg.record, rows=rows, regime=regime, provenance=prov)


def _pt_quality(pt_dir: str) -> dict:
    pt = RunFolder(pt_dir).final() or {}
    return {k: round(100 * float(v), 2) for k, v in pt.items()
            if k in ("Original/sFTA", "Original/EM", "Train/sFTA") and v is not None}


FLAGS = Flags(
    RegimeConfig, prog="cfka stoc-regime", required=("out",),
    choices={"preset": lambda: list(BIOGRAPHY), "pt_preset": lambda: list(BIOGRAPHY), "kinds": lambda: list(KINDS), "arch": lambda: list(ARCHS),
             "update": lambda: list(UPDATES)},
    parsers={"sources": int_arg(lo=1), "alpha": float_arg(lo=0.0, hi=1.0, lo_open=True, hi_open=True),
             "lora_rank": int_arg(lo=1), "freeze_layers": int_arg(lo=0), "bpe_vocab": int_arg(lo=BPE_MIN_VOCAB)},
    metavars={"pt_dir": "DIR", "out": "DIR", "pt_root": "DIR", "cache_dir": "DIR", "results": "DIR",
              "record": "NAME", "pt_label": "LABEL"})
"""The command line generated from :class:`RegimeConfig`."""


def parse(argv: list[str] | None = None) -> RegimeConfig:
    return FLAGS.parse(argv)


def command(cfg: RegimeConfig) -> int:
    report(cfg) if cfg.report else main_cfg(cfg)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m cfka_jax.experiments.stoc_regime`` (``cfka stoc-regime``): a bad value, a missing or malformed
    input is one line naming the option, file or folder, exit 2, before any data is built (``CFKA_TRACEBACK=1``:
    the traceback; ``cli_gen.script_main``)."""
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
