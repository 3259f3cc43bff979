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

import argparse
import json
import pathlib

import numpy as np

from cfka_jax import jsonio
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.stream import METRICS, STREAM_METHODS, StreamSpec, run_stream
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cfka stream", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="smoke", choices=list(BIOGRAPHY))
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--method", default="naive",
                   help=f"one of {', '.join(STREAM_METHODS)}, or a comma list with one per stage")
    p.add_argument("--alpha", type=float, default=0.95, help="new-data fraction of replay stages (0.95 = 5 %% replay)")
    p.add_argument("--rewarm", default="rewarm", choices=REWARM,
                   help="rewarm: every stage warms up and decays again; none: later stages continue at the min LR")
    p.add_argument("--rewarm-peak", type=float, default=None, help="peak LR of each stage (default: the preset's)")
    p.add_argument("--decay", default="cosine", choices=DECAYS, help="cosine, or constant then decay")
    p.add_argument("--stage-steps", type=int, default=None, help="steps per stage (default: CPT steps / stages)")
    p.add_argument("--ewc-lambda", type=float, default=1e3)
    p.add_argument("--gpm-threshold", type=float, default=0.97, help="GPM energy threshold ε in (0, 1)")
    p.add_argument("--metric", default="sFTA", choices=METRICS)
    p.add_argument("--seed", type=int, default=0, help="CPT data order and replay draws (the PT run is shared)")
    p.add_argument("--pt-dir", default=None, help="a finished PT run folder (default: <out>/pt-<preset>-qwen)")
    p.add_argument("--cache-dir", default="runs/data-cache")
    p.add_argument("--ckpt-every", type=int, default=None)
    p.add_argument("--out", default="runs/stream-smoke")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event files to <out>/tb")
    p.add_argument("--wandb", default=None, metavar="PROJECT", help="also log to this W&B project (wandb installed)")
    return p


def spec_from_args(args: argparse.Namespace) -> StreamSpec:
    return StreamSpec(preset=args.preset, out=args.out, stages=args.stages,
                      methods=tuple(m.strip() for m in args.method.split(",")), alpha=args.alpha, rewarm=args.rewarm,
                      rewarm_peak=args.rewarm_peak, decay=args.decay, stage_steps=args.stage_steps,
                      ewc_lambda=args.ewc_lambda, gpm_threshold=args.gpm_threshold, metric=args.metric,
                      seed=args.seed, pt_dir=args.pt_dir, cache_dir=args.cache_dir, ckpt_every=args.ckpt_every,
                      progress=not args.no_progress)


def main(spec: StreamSpec, tracking: TrackingConfig = TrackingConfig()) -> dict:
    """Runs the stream; writes ``stream.json``, ``matrix.md`` and ``matrix.png``; returns the summary."""
    tracker = Tracker(tracking)
    try:
        result = run_stream(spec, tracker=tracker)
    finally:
        tracker.close()
    out = pathlib.Path(spec.out)
    summary = jsonio.read_json_object(out / "stream.json", "a stream summary (JSON object)")
    jsonio.require_keys(summary, ("tasks",), str(out / "stream.json"))
    (out / "matrix.md").write_text(matrix_markdown(result.matrix, summary["tasks"], spec.metric))
    title = f"{','.join(spec.methods)} α={spec.alpha} {spec.rewarm} seed {spec.seed}: {spec.metric}"
    plot_matrix(result.matrix, summary["tasks"], spec.metric, out / "matrix.png", title)
    return summary


def cli(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spec = spec_from_args(args)
    tracking = TrackingConfig(tensorboard=str(pathlib.Path(args.out) / "tb") if args.tensorboard else None,
                              wandb_project=args.wandb, run_name=pathlib.Path(args.out).name)
    summary = main(spec, tracking)
    print(pathlib.Path(args.out, "matrix.md").read_text())
    print(json.dumps({k: v for k, v in summary.items() if k not in ("matrix", "spec", "stages_final")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
