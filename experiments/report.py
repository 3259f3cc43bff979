"""Compare run folders: one markdown table (each metric at step 0, final, best) and one figure per metric.

    cfka report RUN_DIR [RUN_DIR ...] [--metrics Original/sFTA,Continual/sFTA,loss] [--out DIR]

A RUN_DIR is any run folder with a ``metrics.jsonl`` (``cfka pt`` / ``cpt`` / ...), or a ``cfka stream`` folder,
whose stages (``stage1/``, ``stage2/``, ...) are joined into one history at global steps. Default metrics: every
eval metric named ``<set>/<metric>`` (no per-attribute breakdowns) that some run has, plus the train ``loss``.
"Best" is the maximum, except for losses and perplexities (names holding ``loss``, ``nll`` or ``ppl``: minimum).
Writes ``DIR/report.md`` and ``DIR/<metric>.png`` (runs overlaid, labelled by folder name).
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
from cfka_jax.train.loop import MetricsLog


def history(run_dir: pathlib.Path) -> list[dict]:
    """The run's records (a stream's stages joined, steps offset by the steps of earlier stages).

    Raises:
      ValueError: the folder does not exist or holds no metrics log.
    """
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: not a folder")
    if (run_dir / "metrics.jsonl").exists():
        return MetricsLog(run_dir / "metrics.jsonl").records()
    stages = sorted((p for p in run_dir.glob("stage*") if (p / "metrics.jsonl").exists()),
                    key=lambda p: int(re.sub(r"\D", "", p.name) or 0))
    if not stages:
        raise ValueError(f"{run_dir}: no metrics.jsonl (neither a run folder nor a stream folder)")
    out, offset = [], 0
    for stage in stages:
        records = MetricsLog(stage / "metrics.jsonl").records()
        out += [{**r, "step": offset + int(r.get("step", 0))} for r in records if offset == 0 or r.get("step")]
        offset += max((int(r.get("step", 0)) for r in records), default=0)
    return out


def series(records: list[dict], metric: str) -> list[tuple[int, float]]:
    """(step, value) of ``metric`` (an eval metric, or a train metric such as ``loss``), in step order."""
    kind = "train" if "/" not in metric else "eval"
    return [(int(r["step"]), float(r[metric])) for r in records if r.get("kind") == kind and metric in r
            and isinstance(r[metric], (int, float))]


def default_metrics(histories: dict[str, list[dict]]) -> list[str]:
    names = {k for recs in histories.values() for r in recs if r.get("kind") == "eval" for k in r
             if k.count("/") == 1 and isinstance(r[k], (int, float)) and not k.endswith("/n")}
    return sorted(names) + ["loss"]


def lower_is_better(metric: str) -> bool:
    return any(s in metric.lower() for s in ("loss", "nll", "ppl"))


def report_table(histories: dict[str, list[dict]], metrics: list[str]) -> str:
    """The markdown table: one row per (metric, run) with the value at the first logged step, the final one and
    the best (and its step)."""
    lines = ["| metric | run | first (step) | final (step) | best (step) |", "|---|---|---|---|---|"]
    for metric in metrics:
        for name, recs in histories.items():
            s = series(recs, metric)
            if not s:
                lines.append(f"| {metric} | {name} | – | – | – |")
                continue
            best = (min if lower_is_better(metric) else max)(s, key=lambda x: x[1])
            lines.append(f"| {metric} | {name} | {s[0][1]:.4f} ({s[0][0]}) | {s[-1][1]:.4f} ({s[-1][0]}) | "
                         f"{best[1]:.4f} ({best[0]}) |")
    return "\n".join(lines) + "\n"


def plot_metric(histories: dict[str, list[dict]], metric: str, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for name, recs in histories.items():
        s = series(recs, metric)
        if s:
            ax.plot([x for x, _ in s], [y for _, y in s], marker="o" if len(s) < 30 else None, ms=3, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(run_dirs: list[str], out: str, metrics: list[str] | None = None) -> str:
    """Writes ``out/report.md`` and one PNG per metric; returns the markdown.

    Raises:
      ValueError: no run folder, a folder without metrics, two folders with the same name, or a named metric no
        run has.
    """
    if not run_dirs:
        raise ValueError("cfka report needs at least one RUN_DIR")
    paths = [pathlib.Path(d) for d in run_dirs]
    names = [p.name or str(p) for p in paths]
    if len(set(names)) != len(names):
        names = [str(p) for p in paths]
    histories = {n: history(p) for n, p in zip(names, paths)}
    metrics = metrics or default_metrics(histories)
    missing = [m for m in metrics if not any(series(h, m) for h in histories.values())]
    if missing:
        raise ValueError(f"--metrics: no run has {missing}; available: {default_metrics(histories)}")
    out_dir = pathlib.Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = "# Run report\n\nRuns: " + ", ".join(f"`{p}`" for p in paths) + "\n\n" + report_table(histories, metrics)
    for metric in metrics:
        file = re.sub(r"[^A-Za-z0-9_.-]+", "_", metric) + ".png"
        plot_metric(histories, metric, out_dir / file)
        text += f"\n![{metric}]({file})\n"
    jsonio.write_text_atomic(out_dir / "report.md", text)
    return text


@dataclasses.dataclass(frozen=True)
class Config:
    """``cfka report``'s configuration (module docstring)."""

    run_dirs: tuple[str, ...] = ()
    """run folders (metrics.jsonl, or a cfka stream folder)"""
    metrics: tuple[str, ...] = ()
    """comma list (default: every <set>/<metric> eval metric + loss)"""
    out: str = "runs/report"
    """folder for report.md and one PNG per metric"""

    def __post_init__(self):
        if not self.run_dirs:
            raise ValueError("cfka report needs at least one RUN_DIR")


FLAGS = Flags(Config, prog="cfka report", description=__doc__.split("\n\n")[0], positional=("run_dirs",),
              metavars={"run_dirs": "RUN_DIR [RUN_DIR ...]", "metrics": "METRIC,...", "out": "DIR"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def command(cfg: Config) -> int:
    """Writes and prints the report: ``cfka report``'s run function."""
    print(main(list(cfg.run_dirs), cfg.out, list(cfg.metrics) or None))
    return 0


def cli(argv: list[str] | None = None) -> int:
    return command(parse(argv))


if __name__ == "__main__":
    raise SystemExit(cli())
