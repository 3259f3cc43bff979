"""The cFKA main table: STOC vs LAMOL vs Random generative replay on the Biography world (spec cfka_stoc.md §9).

    cfka stoc-table --preset smoke|small|paper --out DIR

One PT run, three replay corpora built from the PT model (``replay-stoc``, ``replay-lamol``, ``replay-random``),
then CPT for α ∈ {0.5, 0.67, 0.8, 0.9} × {Random, LAMOL, STOC} × {Full, Freeze}, plus Naive and real replay 'all'
(α = 0.5). Runs are resumable and executed most-informative first (the paper's rows, then the rest), so an
interrupted table still holds the comparisons that matter. Writes ``table.md`` (Original sFTA, Original EM,
Continual sFTA at the final step, ×100, beside the paper's Pythia-160M numbers, plus each corpus's build
statistics), ``table.json`` and ``original_sfta.png`` (Original sFTA over CPT steps per method).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib

from cfka_jax import jsonio
from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.biography import continual, pretrain
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import CPTSpec, PTSpec
from cfka_jax.eval.coverage import fact_coverage
from cfka_jax.runs.replay import GENERATIVE, ReplaySwitches

PAPER_KINDS = ("stoc", "random", "lamol")
"""The table's default kinds (the paper's); the prompt controls of ``GENERATIVE`` are accepted by ``--kinds``."""

ALPHAS = (0.5, 0.67, 0.8, 0.9)
UPDATES = ("full", "freeze")
KIND_NAMES = {"random": "Random", "lamol": "LAMOL", "stoc": "STOC"}
PAPER = {  # spec §9, Pythia-160M: (Original sFTA, Original EM, Continual sFTA)
    (0.5, "random", "full"): (17.68, 3.14, 90.37), (0.5, "lamol", "full"): (19.90, 5.95, 92.58),
    (0.5, "stoc", "full"): (51.54, 29.84, 90.47), (0.67, "random", "freeze"): (21.02, 6.43, 91.67),
    (0.67, "lamol", "freeze"): (21.69, 9.47, 92.62), (0.67, "stoc", "freeze"): (53.80, 32.83, 92.04),
    (0.9, "lamol", "freeze"): (18.88, 7.58, 92.06), (0.9, "stoc", "freeze"): (40.54, 21.62, 91.96),
}
COLUMNS = ("Original/sFTA", "Original/EM", "Continual/sFTA")


@dataclasses.dataclass(frozen=True)
class Row:
    """One CPT run of the table."""

    method: str
    update: str
    alpha: float | None

    @property
    def name(self) -> str:
        kind = KIND_NAMES.get(self.method, self.method)
        return f"{kind} α={self.alpha} {self.update}" if self.alpha is not None else f"{kind} {self.update}"

    @property
    def folder(self) -> str:
        return f"cpt-{self.method}-{self.update}" + (f"-a{self.alpha}" if self.alpha is not None else "")


def table_rows(alphas=ALPHAS, kinds=PAPER_KINDS, updates=UPDATES) -> list[Row]:
    """Baselines, then the paper's rows, then the remaining grid (execution order)."""
    grid = [Row(k, u, a) for a in alphas for k in kinds for u in updates]
    paper = [r for r in grid if (r.alpha, r.method, r.update) in PAPER]
    rest = sorted((r for r in grid if r not in paper), key=lambda r: (r.update != "full", r.alpha, r.method))
    return [Row("naive", "full", None), Row("replay-all", "full", 0.5)] + paper + rest


@dataclasses.dataclass(frozen=True)
class TableConfig:
    preset: str = "small"
    out: str = "runs/stoc-small"
    arch: str = "qwen"
    alphas: tuple[float, ...] = ALPHAS
    kinds: tuple[str, ...] = PAPER_KINDS
    updates: tuple[str, ...] = UPDATES
    eval_every: int | None = None  # None: 8 evaluations per CPT run (every 50 steps at the small preset)
    replay: ReplaySwitches = ReplaySwitches()
    cache_dir: str = "runs/data-cache"
    progress: bool = True
    mesh: str | None = None

    def __post_init__(self):
        if not set(self.kinds) <= set(GENERATIVE) or not set(self.updates) <= set(UPDATES):
            raise ValueError(f"kinds must be within {GENERATIVE} and updates within {UPDATES}, "
                             f"got {self.kinds}, {self.updates}")
        if not all(0.0 < a < 1.0 for a in self.alphas):
            raise ValueError(f"every alpha must be in (0, 1), got {self.alphas}")


def _cell(final: dict, col: str) -> str:
    return f"{100 * final[col]:.1f}" if col in final else "–"


def markdown(results: dict[Row, dict], pt: dict) -> str:
    head = "| run | " + " | ".join(COLUMNS) + " | paper " + " | paper ".join(COLUMNS) + " |"
    lines = [head, "|---" * (2 * len(COLUMNS) + 1) + "|",
             "| PT | " + " | ".join(_cell(pt, c) for c in COLUMNS) + " |" + " – |" * len(COLUMNS)]
    for row, final in results.items():
        paper = PAPER.get((row.alpha, row.method, row.update))
        cells = [_cell(final, c) for c in COLUMNS] + ([f"{v:.2f}" for v in paper] if paper else ["–"] * 3)
        lines.append(f"| {row.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def corpus_coverage(folder: pathlib.Path, world) -> dict | None:
    """What the drawn sequences of the replay corpus in ``folder`` say about the world (``fact_coverage``), or
    None when the corpus has not been built."""
    from datasets import load_from_disk

    if not (folder / "config.json").exists():
        return None
    texts = load_from_disk(str(folder / "candidates"))["text"]
    return fact_coverage([texts[i] for i in load_from_disk(str(folder / "replay"))["candidate"]], world.people)


def replay_markdown(out: pathlib.Path, switches: ReplaySwitches, kinds, world) -> str:
    """Build statistics of each corpus and what its drawn sequences say about the world (``fact_coverage``),
    with real replay 'all' as the reference row."""
    keys = ("num_prompts", "num_unique_prompts", "num_candidates", "minhash_dropped", "num_sequences",
            "num_unique_sequences", "replay_tokens", "total_s")
    facts = ("pt_people_named", "cpt_people_named", "pt_fact_coverage", "true_values_per_mention")
    lines = ["| corpus | " + " | ".join(keys + facts) + " |", "|---" * (len(keys) + len(facts) + 1) + "|"]
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    for kind in kinds:
        folder = out / f"replay-{kind}{switches.tag}"
        cov = corpus_coverage(folder, world)
        if cov is not None:
            s = jsonio.read_json_object(folder / "stats.json", "replay statistics (JSON object)")
            jsonio.require_keys(s, keys, str(folder / "stats.json"))
            lines.append(f"| {KIND_NAMES[kind]} | " + " | ".join(fmt(s[k]) for k in keys) + " | "
                         + " | ".join(fmt(cov[k]) for k in facts) + " |")
    cov = fact_coverage([b.text for b in world.replay_pool("all")], world.people)
    lines.append("| real 'all' | " + " | ".join("–" for _ in keys) + " | " + " | ".join(fmt(cov[k]) for k in facts)
                 + " |")
    return "\n".join(lines)


def plot_original(out: pathlib.Path, results: dict[Row, dict], histories: dict[Row, list]) -> None:
    """Original sFTA over CPT steps, one panel per update mode, one line per method and α."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 6.5), sharey=True)
    colors = {"random": "tab:gray", "lamol": "tab:blue", "stoc": "tab:red", "naive": "black",
              "replay-all": "tab:green"}
    styles = {None: "-", 0.5: "-", 0.67: "--", 0.8: "-.", 0.9: ":"}
    for ax, update in zip(axes, UPDATES):
        for row in results:
            if row.update != update and row.method not in ("naive", "replay-all"):
                continue
            evals = [r for r in histories[row] if r.get("kind") == "eval"]
            ax.plot([e["step"] for e in evals], [100 * e["Original/sFTA"] for e in evals], styles[row.alpha],
                    color=colors[row.method], label=row.name, lw=1.5)
        ax.set(title=f"CPT update: {update}", xlabel="CPT step", ylabel="Original sFTA (×100)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.tight_layout()
    fig.savefig(out / "original_sfta.png", dpi=120)
    plt.close(fig)


def report(cfg: TableConfig) -> dict:
    """Rewrite table.md / table.json / the plot from the finished run folders, training nothing."""
    out = pathlib.Path(cfg.out)
    pt = RunFolder(out / f"pt-{cfg.preset}-{cfg.arch}").final()
    if pt is None:
        raise ValueError(f"{out}: no finished PT run (pt-{cfg.preset}-{cfg.arch}/final.json); nothing to report")
    finished = [row for row in table_rows(cfg.alphas, cfg.kinds, cfg.updates)
                if RunFolder(out / row.folder).final() is not None]
    results = {row: RunFolder(out / row.folder).final() for row in finished}
    histories = {row: RunFolder(out / row.folder).metrics.records() for row in finished}
    _write(out, cfg, results, histories, pt, build_data(BIOGRAPHY[cfg.preset].data_config(), cfg.cache_dir).world)
    print((out / "table.md").read_text())
    return {row.name: final for row, final in results.items()}


def main(cfg: TableConfig) -> dict:
    out = pathlib.Path(cfg.out)
    pt_dir = out / f"pt-{cfg.preset}-{cfg.arch}"
    data = build_data(BIOGRAPHY[cfg.preset].data_config(), cfg.cache_dir)
    pt = pretrain(PTSpec(preset=cfg.preset, out=str(pt_dir), arch=cfg.arch, cache_dir=cfg.cache_dir,
                         progress=cfg.progress, mesh=cfg.mesh), data)
    results: dict[Row, dict] = {}
    histories: dict[Row, list] = {}
    for row in table_rows(cfg.alphas, cfg.kinds, cfg.updates):
        spec = CPTSpec(preset=cfg.preset, out=str(out / row.folder), method=row.method, update=row.update,
                       alpha=row.alpha or 0.5, arch=cfg.arch, pt_dir=str(pt_dir), cache_dir=cfg.cache_dir,
                       progress=cfg.progress, replay=cfg.replay, mesh=cfg.mesh,
                       eval_every=cfg.eval_every or max(1, BIOGRAPHY[cfg.preset].cpt.steps // 8))
        run = continual(spec, pt, data)
        results[row], histories[row] = run.final, run.history
        print(f"[stoc-table] {row.name}: " + ", ".join(f"{c} {_cell(run.final, c)}" for c in COLUMNS))
        _write(out, cfg, results, histories, pt.final, data.world)  # an interrupted table keeps its finished rows
    print((out / "table.md").read_text())
    return {row.name: final for row, final in results.items()}


def _write(out: pathlib.Path, cfg: TableConfig, results: dict[Row, dict], histories: dict[Row, list], pt: dict,
           world) -> None:
    text = (f"# STOC table, preset {cfg.preset} (×100, final CPT step)\n\n{markdown(results, pt)}\n\n"
            f"## Replay corpora\n\n{replay_markdown(out, cfg.replay, cfg.kinds, world)}\n")
    (out / "table.md").write_text(text)
    (out / "table.json").write_text(json.dumps({"PT": pt, **{r.name: f for r, f in results.items()}}, indent=1))
    plot_original(out, results, histories)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cfka stoc-table", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="small", choices=list(BIOGRAPHY))
    ap.add_argument("--out", default=None, help="table folder (default runs/stoc-<preset>)")
    ap.add_argument("--arch", default="qwen", choices=["qwen", "pythia"])
    ap.add_argument("--alphas", default=",".join(map(str, ALPHAS)), help="comma-separated new-data fractions")
    ap.add_argument("--kinds", default=",".join(PAPER_KINDS), help=f"comma-separated subset of {','.join(GENERATIVE)}")
    ap.add_argument("--updates", default=",".join(UPDATES), help="comma-separated subset of full,freeze")
    ap.add_argument("--eval-every", type=int, default=None,
                    help="FTA evaluation interval, the plot's resolution (default: CPT steps // 8)")
    ap.add_argument("--score-norm", default="j_plus_1", choices=["j_plus_1", "n_queries"])
    ap.add_argument("--snippet-rule", default="token_argmax", choices=["token_argmax", "window_sum"])
    ap.add_argument("--no-minhash", action="store_true", help="code-faithful: no MinHash deduplication")
    ap.add_argument("--lamol-sampler", default="stoc", choices=["stoc", "topk20"])
    ap.add_argument("--cache-dir", default="runs/data-cache")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="rewrite the table from finished runs, train nothing")
    ap.add_argument("--mesh", default=None, help="shard every run over devices, e.g. data=2,fsdp=4 (docs/scale.md)")
    return ap


def cli(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    switches = ReplaySwitches(score_norm=a.score_norm, snippet_rule=a.snippet_rule, minhash=not a.no_minhash,
                              lamol_sampler=a.lamol_sampler)
    (report if a.report_only else main)(TableConfig(preset=a.preset, out=a.out or f"runs/stoc-{a.preset}", arch=a.arch,
                     alphas=tuple(float(x) for x in a.alphas.split(",")), kinds=tuple(a.kinds.split(",")),
                     updates=tuple(a.updates.split(",")), eval_every=a.eval_every, replay=switches,
                     cache_dir=a.cache_dir, progress=not a.no_progress, mesh=a.mesh))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(cli(sys.argv[1:]))
