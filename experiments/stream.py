"""One continual task stream on the Biography world: PT, then T CPT stages; the accuracy matrix and its measures.

Claim measured: how much of each earlier task a method keeps over several CPT stages (BWT, forgetting, FUAR) and
how much it learns (plasticity), in the measures continual-learning users report (``cfka_jax/eval/cl_metrics.py``).

    cfka stream --preset smoke|small --stages 3 --method naive|replay|ewc|gpm|stoc[,...] [--alpha 0.95]
                [--rewarm rewarm|none] [--rewarm-peak LR] [--decay cosine|constant] [--stage-steps N]
                [--tensorboard] [--wandb PROJECT] --out DIR

Writes ``DIR/stream.json`` (the matrix, every measure, the spec), ``DIR/matrix.md`` and ``DIR/matrix.png`` (the
heat map), and, with ``--tensorboard``, event files in ``DIR/tb`` (``tensorboard --logdir DIR/tb``).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import ARCHS
from cfka_jax.runs.stream import GPM_EMBEDDINGS, METRICS, STREAM_METHODS, StreamSpec, check_stream, read_summary, run_stream
from cfka_jax.train.optim import DECAYS, REWARM
from cfka_jax.train.tracking import Tracker, TrackingConfig


def matrix_markdown(matrix, tasks: list[str], metric: str) -> str:
    """R[i, j] as a markdown table ×100: rows = after stage i (0 = PT), columns = task j."""
    head = f"| {metric} ×100: after ↓ / task → | " + " | ".join(tasks) + " |"
    lines = [head, "|" + "---|" * (len(tasks) + 1)]
    for i, row in enumerate(np.asarray(matrix)):
        name = "PT" if i == 0 else f"stage {i}"
        lines.append(f"| {name} | " + " | ".join(f"{100 * v:.1f}" for v in row) + " |")
    return "\n".join(lines) + "\n"


def plot_matrix(matrix, tasks: list[str], metric: str, path: pathlib.Path, title: str = "") -> None:
    """The heat map of R[i, j] with each cell's value written in it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = np.asarray(matrix)
    fig, ax = plt.subplots(figsize=(1.3 + 0.9 * r.shape[1], 1.0 + 0.7 * r.shape[0]))
    im = ax.imshow(r, cmap="viridis", vmin=0.0, vmax=max(1e-6, float(r.max())))
    for (i, j), v in np.ndenumerate(r):
        ax.text(j, i, f"{100 * v:.1f}", ha="center", va="center", color="w" if v < 0.6 * r.max() else "k",
                fontsize=8)
    ax.set_xticks(range(r.shape[1]), [t.split(" (")[0] for t in tasks], fontsize=8)
    ax.set_yticks(range(r.shape[0]), ["PT"] + [f"stage {i}" for i in range(1, r.shape[0])], fontsize=8)
    ax.set_xlabel("task")
    ax.set_ylabel("model after")
    ax.set_title(title or f"{metric} (R[i, j])", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


@dataclasses.dataclass(frozen=True)
class Config(StreamSpec):
    """``cfka stream``'s configuration: the stream (``runs/stream.StreamSpec``) and where its run is logged."""

    tensorboard: bool = False
    """also write TensorBoard event files to <out>/tb"""
    wandb: str | None = None
    """also log to this W&B project (wandb installed)"""

    def spec(self) -> StreamSpec:
        return StreamSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(StreamSpec)})

    def tracking(self) -> TrackingConfig:
        return TrackingConfig(tensorboard=str(pathlib.Path(self.out) / "tb") if self.tensorboard else None,
                              wandb_project=self.wandb, run_name=pathlib.Path(self.out).name)


FLAGS = Flags(Config, prog="cfka stream", description=__doc__.split("\n\n")[0],
              choices={"preset": lambda: list(BIOGRAPHY),
                       "rewarm": lambda: REWARM, "decay": lambda: DECAYS, "metric": lambda: METRICS,
                       "arch": lambda: list(ARCHS), "gpm_embeddings": lambda: GPM_EMBEDDINGS},
              names={"methods": "method"},
              help={"preset": "Biography scale (runs/presets.py BIOGRAPHY)", "stages": "number T of CPT stages",
                    "methods": "one method, or a comma list with one per stage: a name of the one registry "
                               "(runs/method.py) or a '+' composition such as 'stoc + ewc' (options in a name are "
                               "separated by spaces: 'lwf(T=2 weight=0.5)'); the stream runs "
                               + ", ".join(STREAM_METHODS),
                    "alpha": "new-data fraction of replay stages (0.95 = 5 % replay)",
                    "rewarm": "rewarm: every stage warms up and decays again; none: later stages continue at the "
                              "min LR",
                    "rewarm_peak": "peak LR of each stage (default: the preset's)",
                    "decay": "cosine, or constant then decay",
                    "stage_steps": "steps per stage (default: CPT steps / stages)",
                    "ewc_lambda": "EWC strength λ >= 0", "gpm_threshold": "GPM energy threshold ε in (0, 1)",
                    "gpm_embeddings": "GPM stages: the input embedding (tied: also the head) trains unprojected "
                                      "(free) or not at all (frozen)",
                    "metric": "the accuracy in the matrix", "arch": "model family (models/family.py)",
                    "seed": "CPT data order and replay draws (the PT run is shared)",
                    "pt_dir": "a finished PT run folder (default: <out>/pt-<preset>-<arch>)",
                    "cache_dir": "where generated worlds and packs are cached",
                    "ckpt_every": "checkpoint interval in steps", "progress": "progress bars",
                    "out": "run folder (stream.json, matrix.md, matrix.png, tb/)"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def main(spec: StreamSpec, tracking: TrackingConfig = TrackingConfig()) -> dict:
    """Runs the stream; writes ``stream.json``, ``matrix.md`` and ``matrix.png``; returns the summary."""
    check_stream(spec)  # before the tracker opens anything in --out
    tracker = Tracker(tracking)
    try:
        result = run_stream(spec, tracker=tracker)
    finally:
        tracker.close()
    out = pathlib.Path(spec.out)
    summary = read_summary(out / "stream.json")
    jsonio.write_text_atomic(out / "matrix.md", matrix_markdown(result.matrix, summary["tasks"], spec.metric))
    title = f"{','.join(spec.methods)} α={spec.alpha} {spec.rewarm} seed {spec.seed}: {spec.metric}"
    plot_matrix(result.matrix, summary["tasks"], spec.metric, out / "matrix.png", title)
    return summary


def cli(argv: list[str] | None = None) -> int:
    return command(parse(argv))


def command(cfg: Config) -> int:
    """Runs the stream and prints its matrix and measures: ``cfka stream``'s run function."""
    summary = main(cfg.spec(), cfg.tracking())
    print(pathlib.Path(cfg.out, "matrix.md").read_text())
    print(json.dumps({k: v for k, v in summary.items() if k not in ("matrix", "spec", "stages_final")}, indent=1))
    return 0
