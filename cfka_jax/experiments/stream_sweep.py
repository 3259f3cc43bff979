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

import argparse
import dataclasses
import pathlib

import numpy as np

from cfka_jax import jsonio
from cfka_jax.runs.stream import StreamSpec

CONFIGS = {
    "naive-rewarm": dict(methods=("naive",), rewarm="rewarm"),
    "naive-norewarm": dict(methods=("naive",), rewarm="none"),
    "replay5-rewarm": dict(methods=("replay",), alpha=0.95, rewarm="rewarm"),
    "replay25-rewarm": dict(methods=("replay",), alpha=0.75, rewarm="rewarm"),
    "replay5-norewarm": dict(methods=("replay",), alpha=0.95, rewarm="none"),
    "replay25-norewarm": dict(methods=("replay",), alpha=0.75, rewarm="none"),
    "ewc-rewarm": dict(methods=("ewc",), rewarm="rewarm"),
    "gpm-rewarm": dict(methods=("gpm",), rewarm="rewarm"),
    "stoc25-rewarm": dict(methods=("stoc",), alpha=0.75, rewarm="rewarm"),
}
"""Name → the StreamSpec fields it sets (the rest: preset, steps, seed, folders from the command line)."""

COLUMNS = ("avg_acc", "bwt", "bwt_pt", "fwt", "avg_forgetting", "fuar", "plasticity", "stability")


def jobs(names: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """Seed-major order: every configuration once before any gets its second seed."""
    return [(n, s) for s in seeds for n in names]


def spec_of(name: str, seed: int, args) -> StreamSpec:
    return StreamSpec(preset=args.preset, out=str(pathlib.Path(args.root) / f"{name}-seed{seed}"), stages=3,
                      stage_steps=args.stage_steps, seed=seed, pt_dir=args.pt_dir, cache_dir=args.cache_dir,
                      progress=False, **CONFIGS[name])


def run(args) -> None:
    from cfka_jax.experiments.stream import main

    names = args.configs.split(",") if args.configs else list(CONFIGS)
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        raise ValueError(f"--configs: unknown {unknown}; known {sorted(CONFIGS)}")
    i, n = (int(x) for x in args.worker.split("/"))
    for k, (name, seed) in enumerate(jobs(names, [int(s) for s in args.seeds.split(",")])):
        if k % n == i:
            print(f"[sweep] {name} seed {seed}", flush=True)
            main(spec_of(name, seed, args))


def table(root: pathlib.Path) -> str:
    """The mean (min–max over seeds) of every measure per configuration, ×100 (FUAR and stability as ratios)."""
    rows: dict[str, list[dict]] = {}
    for f in sorted(root.glob("*-seed*/stream.json")):
        summary = jsonio.read_json_object(f, "a stream summary (JSON object)")
        rows.setdefault(f.parent.name.rsplit("-seed", 1)[0], []).append(summary)
    lines = ["| stream | seeds | final Original (T0) | " + " | ".join(COLUMNS) + " |", "|" + "---|" * (len(COLUMNS) + 3)]
    out = {}
    for name in [n for n in CONFIGS if n in rows] + sorted(set(rows) - set(CONFIGS)):
        runs = rows[name]
        cells, out[name] = [], {}
        for col in ("final_T0",) + COLUMNS:
            vals = [r["matrix"][-1][0] if col == "final_T0" else r[col] for r in runs]
            vals = [v for v in vals if v is not None]
            scale = 1.0 if col in ("fuar", "stability") else 100.0
            if not vals:
                cells.append("n.d.")
                continue
            v = scale * np.asarray(vals)
            out[name][col] = [float(x) for x in v]
            fmt = "{:.2f}" if scale == 1.0 else "{:.1f}"
            cells.append(fmt.format(v.mean()) + (f" ({fmt.format(v.min())}–{fmt.format(v.max())})" if len(v) > 1
                                                 else ""))
        lines.append(f"| {name} | {len(runs)} | " + " | ".join(cells) + " |")
    jsonio.write_json_atomic(root / "table.json", out, indent=1)
    text = "\n".join(lines) + "\n"
    jsonio.write_text_atomic(root / "table.md", text)
    return text


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="stream_sweep", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--root", required=True)
    r.add_argument("--pt-dir", default=None)
    r.add_argument("--preset", default="small")
    r.add_argument("--stage-steps", type=int, default=None)
    r.add_argument("--seeds", default="0,1")
    r.add_argument("--configs", default=None, help=f"comma list of {', '.join(CONFIGS)} (default: all)")
    r.add_argument("--cache-dir", default="runs/data-cache")
    r.add_argument("--worker", default="0/1", help="i/n: run jobs k with k %% n == i")
    t = sub.add_parser("table")
    t.add_argument("--root", required=True)
    args = p.parse_args(argv)
    if args.command == "run":
        run(args)
    else:
        print(table(pathlib.Path(args.root)))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
