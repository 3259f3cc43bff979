"""The Biography CPT comparison table: PT, then Naive / EWC / real replay ('all', 'half') / Freeze / LoRA CPT, over
PT replicates and CPT seeds.

    python -m cfka_jax.experiments.biography_table --preset small --out runs/table-small
    python -m cfka_jax.experiments.biography_table --preset small --ewc-lambda 1e6 --ewc-sweep 1e4,1e8 \\
        --pt-seeds 0,1 --seeds 0,1,2 --out runs/bio-s3 --record cfka/biography_small
    python -m cfka_jax.experiments.biography_table --preset small --cells naive-lora --lora-lr-scales 3,10 \\
        --pt-seeds 0,1 --seeds 0,1,2 --pt-root runs/bio-s3 --out runs/bio-lora-lr --record cfka/biography_lora_lr

The claims it measures (``cfka claims``): cfka.all-vs-half, cfka.full-vs-freeze, cfka.lora-worst-low-alpha and
cfka.ewc-lm (the Biography cells). Every PT replicate ``k`` of ``--pt-seeds`` is its own PT run from seed ``k``
in ``<out>/pt-seed<k>/``; every CPT cell of ``--cells`` (:data:`CELLS`) runs from each PT replicate with each
CPT seed of ``--seeds``, into ``<out>/cpt-<cell>/pt<k>-seed<s>/`` (the ewc cell also at every λ of
``--ewc-sweep``, ``<out>/cpt-ewc-full-lambda<λ>/``; the LoRA cell at every learning-rate scale x of
``--lora-lr-scales``, its CPT peak and floor learning rates the preset's × x, ``<out>/cpt-naive-lora-lr<x>/``, the
scale 1 being ``<out>/cpt-naive-lora/``). ``--pt-root`` puts the PT replicates in another folder than ``--out``
(trained there when absent, reused when finished), so that a study of more cells starts from another study's PT
models. Each finished replicate leaves
``replicate.json`` there (atomically); a study started again skips those (``experiments/replicates.py``).

Written as replicates finish: ``table.md`` (per cell the mean and range over every run of Original sFTA/hFTA/EM,
what is kept of the PT test biographies, and Continual sFTA/hFTA/EM, what is learned of the CPT ones, at the final
step, plus the PT row) and ``table.json`` (one row per run, the summary), and with ``--record NAME`` the produced
result record ``results/NAME.json`` (``claims/results.write_record``): one row per run (``kind``, ``update``,
``pt`` = ``s<k>``, ``seed``, values ×100; ``ewc_lambda`` on EWC rows, ``lr_scale`` on LoRA rows of a scale other
than 1, absent meaning 1) in the shape of ``cfka/biography_small``, the mean and spread over both axes in
``provenance.summary``.

The command line is generated from :class:`TableConfig` (``cfka_jax/cli_gen.py``; ``--config FILE`` too).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

from cfka_jax.experiments import replicates as rep

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.data.pipeline import build_data
from cfka_jax.data.tokenize import BPE_MIN_VOCAB
from cfka_jax.runs.biography import continual, pretrain
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.method import resolve
from cfka_jax.runs.presets import BIOGRAPHY, lookup
from cfka_jax.runs.specs import ARCHS, CPTSpec, PTSpec
from cfka_jax.values import float_arg, floats_arg

VARIANTS = (
    ("naive", "full", None),
    ("ewc", "full", None),
    ("replay-all", "full", 0.5),
    ("replay-half", "full", 0.5),
    ("naive", "freeze", None),
    ("naive", "lora", None),
)
"""The cells of the paper's table: (method, update, replay α or None)."""
METHOD_VARIANTS = (
    ("lwf", "full", None),
    ("nullspace", "full", None),
    ("stoc + lwf", "full", 0.5),
)
"""More methods of the one registry beside the paper's cells (``--cells``; not run by default): distillation
towards the PT model (LwF), updates projected off the old facts' keys (null-space), and LwF with STOC replay."""
CELLS = {f"{m.replace(' ', '')}-{u}": (m, u, a) for m, u, a in VARIANTS + METHOD_VARIANTS}
"""``--cells`` names (the cell's folder ``<out>/cpt-<name>/``) → (method, update, α)."""
DEFAULT_CELLS = tuple(f"{m}-{u}" for m, u, _ in VARIANTS)
"""The cells run when ``--cells`` is not given: the paper's six."""
COLUMNS = ("Original/sFTA", "Original/hFTA", "Original/EM", "Continual/sFTA", "Continual/hFTA", "Continual/EM")
RECORD_KIND = {"naive": "naive", "ewc": "ewc", "replay-all": "real_all", "replay-half": "real_half",
               "lwf": "lwf", "nullspace": "nullspace", "stoc + lwf": "stoc_lwf"}
"""Method → the record's ``kind`` (the names of ``cfka/biography_small``)."""
METRICS = {c: c.lower().replace("/", "_") for c in COLUMNS} | {"Train/sFTA": "train_sfta"}
"""Final metric → record column (×100, as the paper reports them)."""
FACTORS = ("kind", "update", "ewc_lambda", "lr_scale")
"""What tells the cells of the record apart (the summary's cells)."""
RESULT = "replicate.json"
"""A finished replicate's result file, in its run folder."""
CLOCK = Clock()
"""Wall and CPU time of this process (a produced record's provenance)."""


@dataclasses.dataclass(frozen=True)
class TableConfig:
    """The Biography CPT comparison table: PT, then Naive / EWC / real replay ('all', 'half') / Freeze / LoRA CPT,
    over PT replicates and CPT seeds."""

    preset: str = "small"
    """a Biography preset (runs/presets.BIOGRAPHY)"""
    out: str | None = None
    """study folder (default: runs/table-<preset>): pt-seed<k>/, cpt-<cell>/pt<k>-seed<s>/, table.md, table.json"""
    arch: str = "qwen"
    """model family of the PT and CPT runs"""
    bpe_vocab: int | None = None
    """a BPE tokenizer of this size for every PT and CPT run instead of the preset's word-level one: new people's
    names then share pieces with old ones (what the freeze cell's frozen embeddings need)"""
    ewc_lambda: float = 1e3
    """EWC strength λ >= 0 of the ewc cell"""
    ewc_sweep: tuple[float, ...] = ()
    """more EWC strengths: the ewc cell runs at each of these too (folders cpt-ewc-full-lambda<λ>/)"""
    lora_lr_scales: tuple[float, ...] = (1.0,)
    """learning-rate scales x > 0 of the LoRA cell: it runs at each, its CPT peak and floor lr the preset's × x
    (folders cpt-naive-lora-lr<x>/; x = 1 is cpt-naive-lora/; default: 1 only)"""
    seeds: tuple[int, ...] = (0,)
    """CPT seeds: every cell runs once per seed from every PT replicate"""
    pt_seeds: tuple[int, ...] = (0,)
    """PT replicates: one PT run per seed, <pt-root>/pt-seed<k>/ (pt = s<k> in the record)"""
    pt_root: str | None = None
    """the folder of the PT replicates (default: --out): trained there when absent, reused when finished; studies
    of one preset may share it"""
    cells: tuple[str, ...] = DEFAULT_CELLS
    """the CPT cells to run (default: the paper's six)"""
    cache_dir: str = "runs/data-cache"
    """data cache folder"""
    progress: bool = True
    """progress bars"""
    record: str | None = None
    """also write the produced result record results/RECORD.json (e.g. cfka/biography_small)"""
    results: str = "results"
    """the folder of result records"""

    def __post_init__(self):
        lookup(BIOGRAPHY, self.preset, "Biography")
        rep.check_seed_list(self.seeds, "--seeds")
        rep.check_seed_list(self.pt_seeds, "--pt-seeds")
        if self.bpe_vocab is not None and (isinstance(self.bpe_vocab, bool) or self.bpe_vocab < BPE_MIN_VOCAB):
            raise ValueError(f"--bpe-vocab must be an integer >= {BPE_MIN_VOCAB}, got {self.bpe_vocab}")
        if not self.cells or len(set(self.cells)) != len(self.cells) or not set(self.cells) <= set(CELLS):
            raise ValueError(f"--cells must be distinct names from {list(CELLS)}, got {list(self.cells)}")
        if self.record is not None and (not self.record or self.record.startswith("/")
                                        or ".." in pathlib.PurePosixPath(self.record).parts):
            raise ValueError(f"--record must be a relative name under --results without '..', got {self.record!r}")
        if self.ewc_sweep and ("ewc-full" not in self.cells or self.ewc_lambda in self.ewc_sweep
                               or len(set(self.ewc_sweep)) != len(self.ewc_sweep)):
            raise ValueError(f"--ewc-sweep runs the ewc-full cell at more λ than --ewc-lambda {self.ewc_lambda:g}: "
                             f"distinct values other than it, with ewc-full among --cells; got "
                             f"{','.join(f'{x:g}' for x in self.ewc_sweep)}")
        check_scales(self.lora_lr_scales, [c for c in self.cells if CELLS[c][1] == "lora"])
        for k in self.pt_seeds:  # every run's spec (method, update, λ, lr, arch), before anything runs
            pt_spec(self, k)
            for s in self.seeds:
                for cell, lam, scale in cell_runs(self):
                    cell_spec(self, cell, k, s, lam, scale)

    @property
    def folder(self) -> pathlib.Path:
        return pathlib.Path(self.out or f"runs/table-{self.preset}")


def check_scales(scales: tuple[float, ...], lora_cells: list[str]) -> None:
    """``--lora-lr-scales``: distinct finite numbers > 0, other than the default 1 only with a LoRA cell.

    Raises:
      ValueError: naming the option and the values.
    """
    shown = ",".join(map(repr, scales)) or "nothing"
    if not scales or len(set(scales)) != len(scales) or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0 for x in scales):
        raise ValueError(f"--lora-lr-scales must be distinct finite numbers > 0, got {shown}")
    if tuple(scales) != (1.0,) and not lora_cells:
        raise ValueError(f"--lora-lr-scales scales the learning rate of the LoRA cell: add naive-lora to --cells "
                         f"(got {shown})")


def pt_root(cfg: TableConfig) -> pathlib.Path:
    """The folder of the PT replicates: ``--pt-root``, default ``--out``."""
    return pathlib.Path(cfg.pt_root) if cfg.pt_root is not None else cfg.folder


def pt_spec(cfg: TableConfig, pt_seed: int) -> PTSpec:
    """PT replicate ``pt_seed``: its own PT run from that seed, ``<pt-root>/pt-seed<k>``."""
    return PTSpec(preset=cfg.preset, out=str(rep.pt_folder(pt_root(cfg), pt_seed)), arch=cfg.arch, seed=pt_seed,
                  bpe_vocab=cfg.bpe_vocab, cache_dir=cfg.cache_dir, progress=cfg.progress)


def penalised(cell: str) -> bool:
    """Whether the cell's method fills the penalty hook (EWC), asked of the one registry: its strength is the
    cell's ``--ewc-lambda`` (and each ``--ewc-sweep`` value) and the record carries it."""
    return resolve(CELLS[cell][0], "biography").hooks.penalty is not None


def cell_runs(cfg: TableConfig) -> list[tuple[str, float | None, float]]:
    """The CPT cells as run: (cell, EWC λ of the run (None: ``--ewc-lambda``), learning-rate scale), the ewc cell
    once per λ, the LoRA cell once per scale of ``--lora-lr-scales``."""
    return [(cell, lam, scale) for cell in cfg.cells
            for lam in ((None, *cfg.ewc_sweep) if penalised(cell) else (None,))
            for scale in (cfg.lora_lr_scales if CELLS[cell][1] == "lora" else (1.0,))]


def cell_folder(cfg: TableConfig, cell: str, lam: float | None, scale: float = 1.0) -> pathlib.Path:
    """``<out>/cpt-<cell>``; ``<out>/cpt-<cell>-lambda<λ>`` for the λ of ``--ewc-sweep``, ``<out>/cpt-<cell>-lr<x>``
    for a learning-rate scale x other than 1."""
    return cfg.folder / (f"cpt-{cell}" + ("" if lam is None else f"-lambda{lam:g}")
                         + ("" if scale == 1 else f"-lr{scale:g}"))


def cell_spec(cfg: TableConfig, cell: str, pt_seed: int, seed: int, lam: float | None = None,
              scale: float = 1.0) -> CPTSpec:
    """One CPT replicate: ``cell`` (at EWC strength ``lam``, default ``--ewc-lambda``; at learning-rate scale
    ``scale``: CPT peak and floor lr = the preset's × scale, the preset's own when 1) from PT replicate ``pt_seed``
    with CPT seed ``seed`` (validated on construction)."""
    method, update, alpha = CELLS[cell]
    sched = BIOGRAPHY[cfg.preset].cpt
    lr = {} if scale == 1 else {"lr": float(f"{sched.peak_lr * scale:.12g}"),  # 3e-4, not 3.0000000000000003e-4
                                "min_lr": float(f"{sched.min_lr * scale:.12g}")}
    return CPTSpec(preset=cfg.preset, out=str(cell_folder(cfg, cell, lam, scale) / f"pt{pt_seed}-seed{seed}"),
                   method=method, update=update, alpha=alpha or 0.5,
                   ewc_lambda=cfg.ewc_lambda if lam is None else lam, arch=cfg.arch, seed=seed,
                   bpe_vocab=cfg.bpe_vocab, pt_dir=str(rep.pt_folder(pt_root(cfg), pt_seed)), cache_dir=cfg.cache_dir,
                   progress=cfg.progress, **lr)


def check_inputs(cfg: TableConfig) -> None:
    """Before any data is built or anything written: ``--out`` is a folder (or absent), and every run folder of
    the study is empty or holds that very run.

    Raises:
      RunFolderError / ValueError: naming the option or the folder.
    """
    if cfg.folder.exists() and not cfg.folder.is_dir():
        raise ValueError(f"--out {cfg.folder} is a file, not a study folder")
    if cfg.pt_root is not None and pathlib.Path(cfg.pt_root).exists() and not pathlib.Path(cfg.pt_root).is_dir():
        raise ValueError(f"--pt-root {cfg.pt_root} is a file, not a folder")
    for k in cfg.pt_seeds:
        spec = pt_spec(cfg, k)
        RunFolder(spec.out).check(spec, spec.scale)
        for s in cfg.seeds:
            for cell, lam, scale in cell_runs(cfg):
                spec = cell_spec(cfg, cell, k, s, lam, scale)
                RunFolder(spec.out).check(spec, spec.scale)


def run_pt(cfg: TableConfig, pt_seed: int, data):
    """PT replicate ``pt_seed``: (its result, the run in memory or None when it had finished before)."""
    spec = pt_spec(cfg, pt_seed)
    path = pathlib.Path(spec.out) / RESULT
    done = rep.finished(path, spec.out, spec)
    if done is not None:
        return done, None
    clock = Clock()
    run = pretrain(spec, data)
    return rep.write_replicate(path, {"pt_seed": pt_seed, "run": spec.out, "final": run.final,
                                      **clock.elapsed()}), run


def run_cell(cfg: TableConfig, cell: str, lam: float | None, scale: float, pt_seed: int, seed: int, pt,
             data) -> dict:
    """One CPT replicate (skipped when its result file is there); its result."""
    spec = cell_spec(cfg, cell, pt_seed, seed, lam, scale)
    path = pathlib.Path(spec.out) / RESULT
    done = rep.finished(path, spec.out, spec)
    if done is not None:
        return done
    clock = Clock()
    run = continual(spec, pt, data)
    return rep.write_replicate(path, {"cell": cell, "ewc_lambda": spec.ewc_lambda,
                                      **({} if scale == 1 else {"lr_scale": scale, "lr": spec.lr,
                                                                "min_lr": spec.min_lr}),
                                      "pt_seed": pt_seed, "seed": seed, "run": spec.out,
                                      "final": run.final, **clock.elapsed()})


def main_cfg(cfg: TableConfig) -> list[dict]:
    """Runs (or resumes) every replicate; rewrites the table (and the record) as each one finishes. Returns the
    record rows."""
    check_inputs(cfg)
    data = build_data(pt_spec(cfg, cfg.pt_seeds[0]).scale.data_config(), cfg.cache_dir)  # with --bpe-vocab
    for k in cfg.pt_seeds:
        _, pt = run_pt(cfg, k, data)
        write_outputs(cfg)
        for s in cfg.seeds:
            for cell, lam, scale in cell_runs(cfg):
                run_cell(cfg, cell, lam, scale, k, s, pt, data)
                write_outputs(cfg)
    rows = write_outputs(cfg)
    print(markdown(rows))
    return rows


def _values(final: dict) -> dict:
    return {col: round(100 * float(final[key]), 2) for key, col in METRICS.items() if final.get(key) is not None}


def collect(cfg: TableConfig) -> tuple[list[dict], dict]:
    """The record rows of every finished replicate of the config's plan, and the seconds of each."""
    rows, seconds = [], {}
    for k in cfg.pt_seeds:
        path = rep.pt_folder(pt_root(cfg), k) / RESULT
        if path.exists():
            res = jsonio.read_json_object(path)
            rows.append({"kind": "pt", "update": "full", "pt": rep.pt_label(k), **_values(res["final"])})
            seconds[f"pt{k}"] = {"wall_s": res.get("wall_s"), "cpu_s": res.get("cpu_s")}
        for s in cfg.seeds:
            for cell, lam, scale in cell_runs(cfg):
                spec = cell_spec(cfg, cell, k, s, lam, scale)
                path = pathlib.Path(spec.out) / RESULT
                if not path.exists():
                    continue
                res = jsonio.read_json_object(path)
                method, update, alpha = CELLS[cell]
                extra = {"ewc_lambda": spec.ewc_lambda} if penalised(cell) else {"alpha": alpha} if alpha else {}
                extra |= {} if scale == 1 else {"lr_scale": scale}
                rows.append({"kind": RECORD_KIND[method], "update": update, "pt": rep.pt_label(k), "seed": s,
                             **_values(res["final"]), **extra})
                seconds[f"{cell_folder(cfg, cell, lam, scale).name[4:]}/pt{k}-seed{s}"] = {"wall_s": res.get("wall_s"),
                                                                                    "cpu_s": res.get("cpu_s")}
    return rows, seconds


def markdown(rows: list[dict]) -> str:
    """Per cell, the mean (range, n) of each column over its runs."""
    cols = [METRICS[c] for c in COLUMNS]
    summary = rep.summary(rows, FACTORS, cols)
    lines = ["| run | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for key in dict.fromkeys(tuple(r.get(f) for f in FACTORS) for r in rows):
        kind, update, lam, scale = key
        cells = {e["metric"]: rep.show(e) for e in summary if tuple(e[f] for f in FACTORS) == key}
        name = "PT" if kind == "pt" else (f"{kind} {update}" + (f" λ={lam:g}" if lam is not None else "")
                                          + (f" lr×{scale:g}" if scale is not None else ""))
        lines.append(f"| {name} | " + " | ".join(cells.get(c, "–") for c in cols) + " |")
    return "\n".join(lines)


def write_outputs(cfg: TableConfig) -> list[dict]:
    """``table.md``, ``table.json`` and (with ``--record``) the record, of every finished replicate."""
    rows, seconds = collect(cfg)
    if not rows:
        return rows
    summary = rep.summary(rows, FACTORS, [*METRICS.values()])
    jsonio.write_json_atomic(cfg.folder / "table.json", {"preset": cfg.preset, "seeds": list(cfg.seeds),
                                                          "pt_seeds": list(cfg.pt_seeds), "rows": rows,
                                                          "summary": summary}, indent=1)
    jsonio.write_text_atomic(cfg.folder / "table.md", markdown(rows) + "\n")
    if cfg.record is not None:
        write_table_record(cfg, rows, summary, seconds)
    return rows


def write_table_record(cfg: TableConfig, rows: list[dict], summary: list[dict], seconds: dict) -> pathlib.Path:
    """The produced record ``cfg.record`` of the finished replicates (module docstring)."""
    p = BIOGRAPHY[cfg.preset]
    pts = {r["pt"]: {k: v for k, v in r.items() if k not in ("kind", "update", "pt")}
           for r in rows if r["kind"] == "pt"}
    tok = "word-level tokenizer" if cfg.bpe_vocab is None else f"BPE tokenizer of {cfg.bpe_vocab} tokens"
    regime = {"model": f"{cfg.arch} port, preset {cfg.preset} (d = {p.model.hidden}, {p.model.layers} blocks), {tok}",
              "world": f"{cfg.preset} preset ({p.people[0]} PT + {p.people[1]} CPT people)" if p.people else cfg.preset,
              "dose": f"PT {p.pt.steps} steps; CPT {p.cpt.steps} steps of {p.cpt.batch} × "
                      f"{p.data_config().seq_len} tokens"
                      + ("; replay α = 0.5" if any(CELLS[c][2] for c in cfg.cells) else "")
                      + ("; EWC λ = " + ", ".join(f"{x:g}" for x in (cfg.ewc_lambda, *cfg.ewc_sweep))
                         if any(penalised(c) for c in cfg.cells) else "")
                      + (f"; LoRA CPT lr (peak {p.cpt.peak_lr:g}, floor {p.cpt.min_lr:g}) × "
                         + ", ".join(f"{x:g}" for x in cfg.lora_lr_scales)
                         if tuple(cfg.lora_lr_scales) != (1.0,) else ""),
              "pt_quality": pts}
    cpt_rows = [r for r in rows if r["kind"] != "pt"]
    prov = provenance(config=dataclasses.asdict(cfg), seeds=sorted({r["seed"] for r in cpt_rows}),
                      pt_replicates=sorted({r["pt"] for r in rows}), clock=CLOCK,
                      command=rep.command_line(FLAGS.prog, __file__))
    prov.update(summary=summary, replicate_seconds=seconds, seeds_planned=list(cfg.seeds),
                pt_seeds_planned=list(cfg.pt_seeds))
    return write_record(cfg.results, cfg.record, rows=rows, regime=regime, provenance=prov)


FLAGS = Flags(TableConfig, prog="cfka bio-table",
              choices={"preset": lambda: list(BIOGRAPHY), "arch": lambda: list(ARCHS), "cells": lambda: list(CELLS)},
              parsers={"ewc_lambda": float_arg(lo=0.0), "ewc_sweep": floats_arg(lo=0.0),
                       "lora_lr_scales": floats_arg(lo=0.0, lo_open=True)},
              metavars={"out": "DIR", "pt_root": "DIR", "cache_dir": "DIR", "results": "DIR", "record": "NAME"},
              help={"cells": "the CPT cells to run, of " + ", ".join(CELLS) + " (default: the paper's six)"})
"""The command line generated from :class:`TableConfig`."""


def parse(argv: list[str] | None = None) -> TableConfig:
    return FLAGS.parse(argv)


def command(cfg: TableConfig) -> int:
    main_cfg(cfg)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m cfka_jax.experiments.biography_table`` (``cfka bio-table``): a bad value or input is one line
    naming it, exit 2 (``CFKA_TRACEBACK=1``: the traceback; ``cli_gen.script_main``)."""
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
