"""The 3-stage Biography stream for naive / EWC / GPM / real replay 5 % and 25 % / STOC, with and without re-warming.

Question: over several CPT stages, which methods keep earlier tasks (BWT, forgetting, FUAR) and still learn new
ones (plasticity)? Does re-warming plus a little replay do well (Ibrahim et al. 2024)? With ``--pt-dir`` every
stream shares one PT run; each configuration × seed is a resumable ``cfka stream`` folder ``<root>/<name>-seed<s>``.

    python -m cfka_jax.experiments.stream_sweep run --root runs/streams --pt-dir runs/streams/pt-small-qwen \\
        --preset small --stage-steps 40 --seeds 0,1 [--worker 0/2]
    python -m cfka_jax.experiments.stream_sweep run --root runs/streams-s3 --pt-seeds 0,1 --preset small \\
        --seeds 0,1,2 --configs ewc-rewarm,naive-rewarm,... --record cfka/streams_small
    python -m cfka_jax.experiments.stream_sweep table --root runs/streams     # table.md / table.json

``--pt-seeds 0,1`` makes the PT model an axis (``experiments/replicates.py``): PT replicate ``k`` is its own PT run
from seed ``k`` in ``<pt-root>/pt-seed<k>/`` (trained first unless finished there; labelled ``s<k>``), and every
configuration × seed runs from each into ``<root>/pt<k>/<name>-seed<s>``, PT replicate by PT replicate. A finished
stream (its ``stream.json``) is skipped when the sweep starts again, after checking that its folder holds that
stream. ``--record NAME`` rewrites the produced result record ``results/NAME.json`` after every finished stream:
one row per (stream, PT model, seed) with ``final_original`` (R[T, 0]), ``avg_acc``, ``avg_forgetting`` and
``plasticity`` ×100, and one ``pt`` row per PT model (its Original sFTA / EM ×100); ``<root>/record.md`` holds
their mean (range, n) per stream.

``--worker i/n`` runs every n-th job starting at i (two processes share the list; with ``--pt-seeds`` the PT
replicates must have finished first).
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.cli_gen import Flags, Subcommands, script_main
from cfka_jax.experiments import replicates as rep
from cfka_jax.runs.folder import RunFolder, RunFolderError
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import PTSpec
from cfka_jax.runs.stream import StreamSpec, check_stream, read_summary

CONFIGS = {
    "naive-rewarm": dict(methods=("naive",), rewarm="rewarm"),
    "naive-norewarm": dict(methods=("naive",), rewarm="none"),
    "replay5-rewarm": dict(methods=("replay",), alpha=0.95, rewarm="rewarm"),
    "replay25-rewarm": dict(methods=("replay",), alpha=0.75, rewarm="rewarm"),
    "replay5-norewarm": dict(methods=("replay",), alpha=0.95, rewarm="none"),
    "replay25-norewarm": dict(methods=("replay",), alpha=0.75, rewarm="none"),
    "ewc-rewarm": dict(methods=("ewc",), rewarm="rewarm"),
    "gpm-rewarm": dict(methods=("gpm",), rewarm="rewarm"),
    "gpm-frozenemb-rewarm": dict(methods=("gpm",), rewarm="rewarm", gpm_embeddings="frozen"),
    "stoc25-rewarm": dict(methods=("stoc",), alpha=0.75, rewarm="rewarm"),
    "random25-rewarm": dict(methods=("random",), alpha=0.75, rewarm="rewarm"),
    "lamol25-rewarm": dict(methods=("lamol",), alpha=0.75, rewarm="rewarm"),
}
"""Name → the StreamSpec fields it sets (the rest: preset, steps, seed, folders from the command line)."""

REPLAY_PERCENTS = (0, 1, 5, 10, 25, 50)
PEAKS = (None, 3e-4, 1e-3, 3e-3)
"""The replay-fraction × re-warm-peak grid (``grid``): replay share in % of the tokens (0 = naive), and the peak
learning rate every stage re-warms to (None = no re-warming, stages after the first continue at the final rate;
1e-3 is the small preset's CPT peak)."""


def grid_name(percent: int, peak: float | None) -> str:
    """The configuration of one grid cell; the cells of the main list keep their names."""
    method = "naive" if percent == 0 else f"replay{percent}"
    if peak is None:
        return f"{method}-norewarm"
    return f"{method}-rewarm" if peak == 1e-3 else f"{method}-peak{peak:g}"


def _grid_configs() -> dict[str, dict]:
    out = {}
    for percent in REPLAY_PERCENTS:
        for peak in PEAKS:
            fields = dict(methods=("naive",) if percent == 0 else ("replay",), rewarm="none" if peak is None
                          else "rewarm")
            if percent:
                fields["alpha"] = round(1 - percent / 100, 4)
            if peak not in (None, 1e-3):
                fields["rewarm_peak"] = peak
            out[grid_name(percent, peak)] = fields
    return out


GRID = _grid_configs()
CONFIGS = {**CONFIGS, **{k: v for k, v in GRID.items() if k not in CONFIGS}}
RETRAIN = "retrain"
"""The full re-train reference (``runs/retrain.py``): one model from scratch on PT + every stage's data."""

COLUMNS = ("avg_acc", "bwt", "bwt_pt", "fwt", "avg_forgetting", "fuar", "plasticity", "stability")


def jobs(names: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """Seed-major order: every configuration once before any gets its second seed."""
    return [(n, s) for s in seeds for n in names]


def spec_of(name: str, seed: int, args, pt_seed: int | None = None) -> StreamSpec:
    """One stream: ``<root>/<name>-seed<s>`` from ``--pt-dir``, or with ``pt_seed`` (``--pt-seeds``)
    ``<root>/pt<k>/<name>-seed<s>`` from PT replicate k's run ``<pt-root>/pt-seed<k>``."""
    root, pt_dir = pathlib.Path(args.root), args.pt_dir
    if pt_seed is not None:
        root, pt_dir = root / f"pt{pt_seed}", str(rep.pt_folder(getattr(args, "pt_root", None) or args.root, pt_seed))
    return StreamSpec(preset=args.preset, out=str(root / f"{name}-seed{seed}"), stages=3,
                      stage_steps=args.stage_steps, seed=seed, pt_dir=pt_dir, cache_dir=args.cache_dir,
                      progress=False, **CONFIGS[name])


def pt_spec(cfg: RunConfig, pt_seed: int) -> PTSpec:
    """PT replicate ``pt_seed`` of ``--pt-seeds``: its own PT run from that seed, ``<pt-root>/pt-seed<k>``."""
    return PTSpec(preset=cfg.preset, out=str(rep.pt_folder(cfg.pt_root or cfg.root, pt_seed)), seed=pt_seed,
                  cache_dir=cfg.cache_dir, progress=False)


def plan(cfg: RunConfig) -> list[tuple[int | None, str, int]]:
    """Every job as (PT seed or None, configuration, seed): PT replicate by PT replicate, seed-major within one."""
    names = list(cfg.configs) or list(CONFIGS)
    return [(k, name, seed) for k in (cfg.pt_seeds or (None,)) for name, seed in jobs(names, list(cfg.seeds))]


def _pt_finished(spec: PTSpec) -> bool:
    folder = RunFolder(spec.out)
    return folder.final() is not None and folder.params_dir.is_dir()


def check_inputs(cfg: RunConfig) -> None:
    """Before anything is trained or written: ``--root`` / ``--pt-root`` are folders (or absent), every PT
    replicate's folder is empty or holds that very PT run, and with ``--worker i/n`` (n > 1) every PT replicate
    has finished (two workers would train the same one).

    Raises:
      RunFolderError / ValueError: naming the option and the folder.
    """
    for flag, path in (("--root", cfg.root), ("--pt-root", cfg.pt_root)):
        if path is not None and pathlib.Path(path).exists() and not pathlib.Path(path).is_dir():
            raise ValueError(f"{flag} {path} is a file, not a folder")
    for k in cfg.pt_seeds:
        spec = pt_spec(cfg, k)
        RunFolder(spec.out).check(spec, spec.scale)
        if cfg.worker_share()[1] > 1 and not _pt_finished(spec):
            raise RunFolderError(f"--worker {cfg.worker}: PT replicate {k} ({spec.out}) has not finished; train the "
                                 "PT replicates with one worker first (--worker 0/1), then share the streams")


def run(cfg: RunConfig) -> None:
    """Runs this worker's share of the jobs (:func:`plan`), each a resumable ``cfka stream`` folder (or the re-train
    reference); with ``--pt-seeds`` each PT replicate is trained first unless finished, and its streams' folders
    checked before any of them runs. A finished stream is skipped; ``--record`` is rewritten after every stream."""
    from cfka_jax.experiments.stream import main
    from cfka_jax.runs.biography import pretrain
    from cfka_jax.runs.retrain import RetrainSpec, retrain

    check_inputs(cfg)
    i, n = cfg.worker_share()
    jobs_all = plan(cfg)
    for pt in cfg.pt_seeds or (None,):
        if pt is not None and not _pt_finished(pt_spec(cfg, pt)):
            print(f"[sweep] PT replicate {rep.pt_label(pt)}: {pt_spec(cfg, pt).out}", flush=True)
            pretrain(pt_spec(cfg, pt))
        mine = [(name, seed) for j, (k, name, seed) in enumerate(jobs_all) if k == pt and j % n == i]
        for name, seed in mine:  # a folder of another run is refused before any stream of this PT model runs
            if name != RETRAIN:
                check_stream(spec_of(name, seed, cfg, pt))
        for name, seed in mine:
            print(f"[sweep] {name} seed {seed}" + ("" if pt is None else f" PT {rep.pt_label(pt)}"), flush=True)
            if name == RETRAIN:
                retrain(RetrainSpec(preset=cfg.preset, out=str(pathlib.Path(cfg.root) / f"{name}-seed{seed}"),
                                    stages=3, seed=seed, cache_dir=cfg.cache_dir, progress=False))
                continue
            spec = spec_of(name, seed, cfg, pt)
            if (pathlib.Path(spec.out) / "stream.json").exists():
                print(f"[sweep] finished before: {spec.out}", flush=True)
            else:
                clock = Clock()
                main(spec)
                rep.write_replicate(pathlib.Path(spec.out) / RESULT, {"stream": name, "pt_seed": pt, "seed": seed,
                                                                      "run": spec.out, **clock.elapsed()})
            write_sweep_record(cfg)


RESULT = "replicate.json"
"""A stream's wall and CPU seconds as the sweep ran it, in its folder (``experiments/replicates.py``)."""
RECORD_METRICS = ("final_original", "avg_acc", "avg_forgetting", "plasticity")
"""The record's columns per stream, ×100: R[T, 0] (the PT people after the last stage) and the summary's measures."""
CLOCK = Clock()
"""Wall and CPU time of this process (a produced record's provenance)."""


def collect(cfg: RunConfig) -> tuple[list[dict], dict]:
    """The record rows of every finished run of the plan (one ``pt`` row per finished PT replicate, one row per
    finished stream), and the seconds of each stream the sweep ran."""
    rows, seconds = [], {}
    for k in cfg.pt_seeds:
        final = RunFolder(pt_spec(cfg, k).out).final()
        if final is not None:
            rows.append({"stream": "pt", "pt": rep.pt_label(k), **{col: round(100 * float(final[key]), 2)
                         for key, col in (("Original/sFTA", "original_sfta"), ("Original/EM", "original_em"))
                         if final.get(key) is not None}})
    for k, name, seed in plan(cfg):
        if name == RETRAIN:
            continue
        out = pathlib.Path(spec_of(name, seed, cfg, k).out)
        if not (out / "stream.json").exists():
            continue
        summary = read_summary(out / "stream.json")  # every key used below, checked (file and key named)
        values = {"final_original": summary["matrix"][-1][0], **{c: summary[c] for c in RECORD_METRICS[1:]}}
        rows.append({"stream": name, "pt": rep.pt_label(k), "seed": seed,
                     **{c: round(100 * float(v), 2) for c, v in values.items()}})
        if (out / RESULT).exists():
            res = jsonio.read_json_object(out / RESULT)
            seconds[f"pt{k}/{out.name}"] = {"wall_s": res.get("wall_s"), "cpu_s": res.get("cpu_s")}
    return rows, seconds


def record_markdown(rows: list[dict]) -> str:
    """Per stream, the mean (range, n) of each record column over its runs (PT models × seeds)."""
    summary = rep.summary([r for r in rows if r["stream"] != "pt"], ("stream",), RECORD_METRICS)
    lines = ["| stream | " + " | ".join(RECORD_METRICS) + " |", "|---" * (len(RECORD_METRICS) + 1) + "|"]
    for name in dict.fromkeys(e["stream"] for e in summary):
        cells = {e["metric"]: rep.show(e) for e in summary if e["stream"] == name}
        lines.append(f"| {name} | " + " | ".join(cells.get(c, "–") for c in RECORD_METRICS) + " |")
    return "\n".join(lines) + "\n"


def write_sweep_record(cfg: RunConfig) -> pathlib.Path | None:
    """With ``--record``: the produced record of every finished stream (module docstring) and ``<root>/record.md``;
    None without ``--record`` or before any stream has finished."""
    if cfg.record is None:
        return None
    rows, seconds = collect(cfg)
    streams = [r for r in rows if r["stream"] != "pt"]
    if not streams:
        return None
    p, sched = BIOGRAPHY[cfg.preset], spec_of(streams[0]["stream"], 0, cfg, cfg.pt_seeds[0]).schedule
    regime = {"model": f"qwen port, preset {cfg.preset} (d = {p.model.hidden}, {p.model.layers} blocks), word-level "
                       "tokenizer",
              "world": f"{cfg.preset} preset ({p.people[0]} PT + {p.people[1]} CPT people); PT people, then 3 CPT "
                       "stages on disjoint groups of the CPT people" if p.people else cfg.preset,
              "dose": f"3 stages × {sched.steps} steps (batch {sched.batch}, warm-up {sched.warmup}, peak "
                      f"{sched.peak_lr:g} → {sched.min_lr:g}; 'norewarm' continues at the min LR); replay N = N % "
                      f"of the tokens; EWC λ = {StreamSpec.ewc_lambda:g}",
              "metric": "sFTA ×100 on each task's test biographies, final step of each stage; final_original = "
                        "R[3, 0], the PT people after the last stage",
              "pt_quality": {r["pt"]: {k: v for k, v in r.items() if k not in ("stream", "pt")}
                             for r in rows if r["stream"] == "pt"}}
    prov = provenance(config=dataclasses.asdict(cfg), seeds=sorted({r["seed"] for r in streams}),
                      pt_replicates=sorted({r["pt"] for r in streams}), clock=CLOCK,
                      command=rep.command_line(FLAGS.prog, __file__))
    prov.update(summary=rep.summary(streams, ("stream",), RECORD_METRICS), replicate_seconds=seconds,
                seeds_planned=list(cfg.seeds), pt_seeds_planned=list(cfg.pt_seeds))
    jsonio.write_text_atomic(pathlib.Path(cfg.root) / "record.md", record_markdown(rows))
    return write_record(cfg.results, cfg.record, rows=rows, regime=regime, provenance=prov)


def _scale(col: str) -> float:
    return 1.0 if col in ("fuar", "stability") else 100.0


def _cell(vals: list[float], scale: float) -> str:
    """Mean (min–max) of already-scaled values; 100 → one decimal, 1 → two."""
    if not vals:
        return "n.d."
    v, fmt = np.asarray(vals), "{:.2f}" if scale == 1.0 else "{:.1f}"
    return fmt.format(v.mean()) + (f" ({fmt.format(v.min())}–{fmt.format(v.max())})" if len(v) > 1 else "")


def _read(root: pathlib.Path) -> dict[str, list[dict]]:
    """Configuration name → its runs' measures: ``final_T0`` and every column (None where undefined); the runs are
    the seeds, and with ``--pt-seeds`` (``<root>/pt<k>/``) every PT replicate's seeds."""
    rows: dict[str, list[dict]] = {}
    for f in sorted([*root.glob("*-seed*/stream.json"), *root.glob("pt[0-9]*/*-seed*/stream.json")]):
        summary = read_summary(f)  # every key used below, checked (file and key named)
        rows.setdefault(f.parent.name.rsplit("-seed", 1)[0], []).append(
            {"final_T0": summary["matrix"][-1][0], **{c: summary[c] for c in COLUMNS}})
    for f in sorted(root.glob(f"{RETRAIN}-seed*/retrain.json")):
        summary = jsonio.read_json_object(f, "a re-train summary (JSON object)")
        jsonio.require_keys(summary, ("final_T0", "avg_acc"), str(f))
        problems = jsonio.field_problems(summary, {"final_T0": float, "avg_acc": float})
        if problems:
            raise ValueError(f"{f}: key " + "; key ".join(problems))
        rows.setdefault(RETRAIN, []).append({"final_T0": summary["final_T0"], "avg_acc": summary["avg_acc"],
                                             **{c: None for c in COLUMNS if c != "avg_acc"}})
    return rows


def table(root: pathlib.Path) -> str:
    """The mean (min–max over runs: seeds, and PT replicates) of every measure per configuration, ×100 (FUAR and stability as ratios),
    then the replay-fraction × re-warm-peak grid of final Original, ACC and forgetting (seed means)."""
    rows = _read(root)
    lines = ["| stream | seeds | final Original (T0) | " + " | ".join(COLUMNS) + " |", "|" + "---|" * (len(COLUMNS) + 3)]
    out = {}
    for name in [n for n in (*CONFIGS, RETRAIN) if n in rows] + sorted(set(rows) - set(CONFIGS) - {RETRAIN}):
        out[name] = {col: [_scale(col) * float(r[col]) for r in rows[name] if r[col] is not None]
                     for col in ("final_T0",) + COLUMNS}
        cells = [_cell(out[name][col], _scale(col)) for col in ("final_T0",) + COLUMNS]
        lines.append(f"| {name} | {len(rows[name])} | " + " | ".join(cells) + " |")
    for col, title in (("final_T0", "final Original (T0)"), ("avg_acc", "ACC"), ("avg_forgetting", "forgetting")):
        lines += ["", f"{title}, replay share (rows) × re-warm peak (columns; none = no re-warming), ×100:", "",
                  "| replay | " + " | ".join("none" if pk is None else f"{pk:g}" for pk in PEAKS) + " |",
                  "|" + "---|" * (len(PEAKS) + 1)]
        for percent in REPLAY_PERCENTS:
            cells = [_cell(out.get(grid_name(percent, pk), {}).get(col, []), 100.0) for pk in PEAKS]
            lines.append(f"| {percent} % | " + " | ".join(cells) + " |")
    jsonio.write_json_atomic(root / "table.json", out, indent=1)
    text = "\n".join(lines) + "\n"
    jsonio.write_text_atomic(root / "table.md", text)
    return text


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Run the sweep's streams (each configuration × seed a resumable ``cfka stream`` folder under --root)."""

    root: str = ""
    """the sweep folder: <root>/<name>-seed<s> per job"""
    pt_dir: str | None = None
    """the shared PT run folder (default: each stream's <out>/pt-<preset>-<arch>)"""
    pt_seeds: tuple[int, ...] = ()
    """PT replicates instead of --pt-dir, comma-separated: PT run k from seed k in <pt-root>/pt-seed<k> (trained
    unless finished there; pt = s<k> in the record), streams in <root>/pt<k>/"""
    pt_root: str | None = None
    """where the PT replicates of --pt-seeds live (default: --root)"""
    preset: str = "small"
    """the Biography preset"""
    stage_steps: int | None = None
    """CPT steps per stage (default: the preset's)"""
    seeds: tuple[int, ...] = (0, 1)
    """seeds, comma-separated"""
    configs: tuple[str, ...] = ()
    """comma list of the configurations (default: the streams)"""
    cache_dir: str = "runs/data-cache"
    """where generated worlds and packs are cached"""
    worker: str = "0/1"
    """i/n: run jobs k with k % n == i"""
    record: str | None = None
    """also rewrite the produced result record results/RECORD.json after every stream (needs --pt-seeds)"""
    results: str = "results"
    """the folder of result records"""

    def __post_init__(self):
        if not self.root:
            raise ValueError("--root: the sweep folder is required")
        if self.preset not in BIOGRAPHY:
            raise ValueError(f"--preset {self.preset!r}: choose from {', '.join(BIOGRAPHY)}")
        if self.stage_steps is not None and self.stage_steps < 1:
            raise ValueError(f"--stage-steps must be >= 1, got {self.stage_steps}")
        rep.check_seed_list(self.seeds, "--seeds")
        rep.check_seed_list(self.pt_seeds, "--pt-seeds", allow_empty=True)
        unknown = sorted(set(self.configs) - set(CONFIGS) - {RETRAIN})
        if unknown:
            raise ValueError(f"--configs: unknown {unknown}; known {sorted(CONFIGS) + [RETRAIN]}")
        if self.pt_seeds and self.pt_dir is not None:
            raise ValueError("--pt-dir and --pt-seeds: choose one (one shared PT run, or PT replicates trained "
                             "under --pt-root)")
        if self.pt_root is not None and not self.pt_seeds:
            raise ValueError("--pt-root is where the PT replicates of --pt-seeds live; give --pt-seeds")
        if self.pt_seeds and RETRAIN in self.configs:
            raise ValueError(f"--configs {RETRAIN} starts from no PT model; run it without --pt-seeds")
        if self.record is not None and not self.pt_seeds:
            raise ValueError("--record needs --pt-seeds: the record's rows name their PT model (s<k>), on which the "
                             "verdicts pair runs with the seed")
        if self.record is not None and (not self.record or self.record.startswith("/")
                                        or ".." in pathlib.PurePosixPath(self.record).parts):
            raise ValueError(f"--record must be a relative name under --results without '..', got {self.record!r}")
        self.worker_share()

    def worker_share(self) -> tuple[int, int]:
        """``(i, n)`` of ``--worker i/n``.

        Raises:
          ValueError: not two integers ``i/n`` with 0 <= i < n, naming --worker.
        """
        parts = self.worker.split("/")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts) or not 0 <= int(parts[0]) < int(parts[1]):
            raise ValueError(f"--worker {self.worker!r}: expected i/n with 0 <= i < n, e.g. 0/2")
        return int(parts[0]), int(parts[1])


@dataclasses.dataclass(frozen=True)
class TableConfig:
    """Gather the sweep's stream folders into table.md / table.json (seed means)."""

    root: str = ""
    """the sweep folder"""

    def __post_init__(self):
        if not self.root:
            raise ValueError("--root: the sweep folder is required")


FLAGS = Subcommands("python -m cfka_jax.experiments.stream_sweep", {
    "run": Flags(RunConfig, prog="python -m cfka_jax.experiments.stream_sweep run", required=("root",),
                 choices={"preset": lambda: list(BIOGRAPHY), "configs": lambda: [*CONFIGS, RETRAIN]},
                 help={"configs": f"comma list of {', '.join([*CONFIGS, RETRAIN])} (default: the streams)"},
                 metavars={"root": "DIR", "pt_dir": "DIR", "pt_root": "DIR", "cache_dir": "DIR", "worker": "I/N",
                           "record": "NAME", "results": "DIR"}),
    "table": Flags(TableConfig, prog="python -m cfka_jax.experiments.stream_sweep table", required=("root",),
                   metavars={"root": "DIR"}),
}, description=__doc__.split("\n\n")[0])
"""The command line generated from :class:`RunConfig` and :class:`TableConfig` (``cfka_jax/cli_gen.py``)."""


def command(parsed: tuple[str, RunConfig | TableConfig]) -> int:
    """Runs ``run`` or prints the ``table``."""
    name, cfg = parsed
    if name == "run":
        run(cfg)
    else:
        print(table(pathlib.Path(cfg.root)))
    return 0


def cli(argv: list[str] | None = None) -> int:
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
