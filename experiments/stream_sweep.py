"""The 3-stage Biography stream for naive / EWC / GPM / real replay 5 % and 25 % / STOC, with and without re-warming.

Question: over several CPT stages, which methods keep earlier tasks (BWT, forgetting, FUAR) and still learn new
ones (plasticity)? Does re-warming plus a little replay do well (Ibrahim et al. 2024)? Every stream shares one
PT run; each configuration × seed is a resumable ``cfka stream`` folder ``<root>/<name>-seed<s>``.

    python -m cfka_jax.experiments.stream_sweep run --root runs/streams --pt-dir runs/streams/pt-small-qwen \\
        --preset small --stage-steps 40 --seeds 0,1 [--worker 0/2]
    python -m cfka_jax.experiments.stream_sweep table --root runs/streams     # table.md / table.json

``--worker i/n`` runs every n-th job starting at i (two processes share the list).
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags, Subcommands, script_main
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.stream import StreamSpec, read_summary

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


def spec_of(name: str, seed: int, args) -> StreamSpec:
    return StreamSpec(preset=args.preset, out=str(pathlib.Path(args.root) / f"{name}-seed{seed}"), stages=3,
                      stage_steps=args.stage_steps, seed=seed, pt_dir=args.pt_dir, cache_dir=args.cache_dir,
                      progress=False, **CONFIGS[name])


def run(cfg: RunConfig) -> None:
    """Runs this worker's share of the jobs (:func:`jobs`), each a resumable ``cfka stream`` folder (or the re-train
    reference)."""
    from cfka_jax.experiments.stream import main

    from cfka_jax.runs.retrain import RetrainSpec, retrain

    names = list(cfg.configs) or list(CONFIGS)
    i, n = cfg.worker_share()
    for k, (name, seed) in enumerate(jobs(names, list(cfg.seeds))):
        if k % n == i:
            print(f"[sweep] {name} seed {seed}", flush=True)
            if name == RETRAIN:
                retrain(RetrainSpec(preset=cfg.preset, out=str(pathlib.Path(cfg.root) / f"{name}-seed{seed}"),
                                    stages=3, seed=seed, cache_dir=cfg.cache_dir, progress=False))
            else:
                main(spec_of(name, seed, cfg))


def _scale(col: str) -> float:
    return 1.0 if col in ("fuar", "stability") else 100.0


def _cell(vals: list[float], scale: float) -> str:
    """Mean (min–max) of already-scaled values; 100 → one decimal, 1 → two."""
    if not vals:
        return "n.d."
    v, fmt = np.asarray(vals), "{:.2f}" if scale == 1.0 else "{:.1f}"
    return fmt.format(v.mean()) + (f" ({fmt.format(v.min())}–{fmt.format(v.max())})" if len(v) > 1 else "")


def _read(root: pathlib.Path) -> dict[str, list[dict]]:
    """Configuration name → its seeds' measures: ``final_T0`` and every column (None where undefined)."""
    rows: dict[str, list[dict]] = {}
    for f in sorted(root.glob("*-seed*/stream.json")):
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
    """The mean (min–max over seeds) of every measure per configuration, ×100 (FUAR and stability as ratios),
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

    def __post_init__(self):
        if not self.root:
            raise ValueError("--root: the sweep folder is required")
        if self.preset not in BIOGRAPHY:
            raise ValueError(f"--preset {self.preset!r}: choose from {', '.join(BIOGRAPHY)}")
        if self.stage_steps is not None and self.stage_steps < 1:
            raise ValueError(f"--stage-steps must be >= 1, got {self.stage_steps}")
        if not self.seeds:
            raise ValueError("--seeds: at least one seed")
        unknown = sorted(set(self.configs) - set(CONFIGS) - {RETRAIN})
        if unknown:
            raise ValueError(f"--configs: unknown {unknown}; known {sorted(CONFIGS) + [RETRAIN]}")
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
                 metavars={"root": "DIR", "pt_dir": "DIR", "cache_dir": "DIR", "worker": "I/N"}),
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
