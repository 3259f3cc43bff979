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

import dataclasses
import pathlib

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
from cfka_jax.continual.stoc import SCORE_NORMS, SNIPPET_RULES
from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.biography import continual, pretrain
from cfka_jax.parallel.mesh import mesh_of
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import ARCHS, CPTSpec, PTSpec
from cfka_jax.eval.coverage import fact_coverage
from cfka_jax.runs.replay import GENERATIVE, ReplaySwitches

PAPER_KINDS = ("stoc", "random", "lamol")
"""The table's default kinds (the paper's); the prompt controls of ``GENERATIVE`` are accepted by ``--kinds``."""

ALPHAS = (0.5, 0.67, 0.8, 0.9)
UPDATES = ("full", "freeze")
LAMOL_SAMPLERS = ("stoc", "topk20")  # runs/replay.ReplaySwitches.lamol_sampler
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
    """One table (module docstring)."""

    preset: str = "small"
    """Biography scale (runs/presets.py BIOGRAPHY)"""
    out: str = "runs/stoc-small"
    """table folder (PT run, replay corpora, one folder per CPT run, table.md)"""
    arch: str = "qwen"
    """model family (models/family.py)"""
    alphas: tuple[float, ...] = ALPHAS
    """comma-separated new-data fractions, each in (0, 1)"""
    kinds: tuple[str, ...] = PAPER_KINDS
    """comma-separated generative replay kinds"""
    updates: tuple[str, ...] = UPDATES
    """comma-separated update modes"""
    eval_every: int | None = None
    """FTA evaluation interval, the plot's resolution (default: CPT steps // 8)"""
    replay: ReplaySwitches = ReplaySwitches()
    cache_dir: str = "runs/data-cache"
    """where generated worlds and packs are cached"""
    progress: bool = True
    """progress bars"""
    mesh: str | None = None
    """shard every run over devices, e.g. data=2,fsdp=4 (docs/scale.md)"""

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


def _specs(cfg: TableConfig) -> tuple[PTSpec, dict[Row, CPTSpec]]:
    """The PT run and each row's CPT run of the table."""
    out = pathlib.Path(cfg.out)
    pt_dir = out / f"pt-{cfg.preset}-{cfg.arch}"
    pt = PTSpec(preset=cfg.preset, out=str(pt_dir), arch=cfg.arch, cache_dir=cfg.cache_dir, progress=cfg.progress,
                mesh=cfg.mesh)
    return pt, {row: CPTSpec(preset=cfg.preset, out=str(out / row.folder), method=row.method, update=row.update,
                             alpha=row.alpha or 0.5, arch=cfg.arch, pt_dir=str(pt_dir), cache_dir=cfg.cache_dir,
                             progress=cfg.progress, replay=cfg.replay, mesh=cfg.mesh,
                             eval_every=cfg.eval_every or max(1, BIOGRAPHY[cfg.preset].cpt.steps // 8))
                for row in table_rows(cfg.alphas, cfg.kinds, cfg.updates)}


def check_table(cfg: TableConfig) -> None:
    """Before any data is built or anything written: the mesh fits this machine, and the PT folder and every row's
    folder in ``--out`` are empty or hold that run (a table is never refused after training some of its rows)."""
    mesh_of(cfg.mesh)
    pt, rows = _specs(cfg)
    for spec in (pt, *rows.values()):
        RunFolder(spec.out).check(spec, spec.scale)


def main(cfg: TableConfig) -> dict:
    check_table(cfg)
    out = pathlib.Path(cfg.out)
    pt_spec, specs = _specs(cfg)
    data = build_data(BIOGRAPHY[cfg.preset].data_config(), cfg.cache_dir)
    pt = pretrain(pt_spec, data)
    results: dict[Row, dict] = {}
    histories: dict[Row, list] = {}
    for row, spec in specs.items():
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
    jsonio.write_text_atomic(out / "table.md", text)
    jsonio.write_json_atomic(out / "table.json", {"PT": pt, **{r.name: f for r, f in results.items()}}, indent=1,
                             newline=False)
    plot_original(out, results, histories)


@dataclasses.dataclass(frozen=True)
class Config(TableConfig):
    """``cfka stoc-table``'s configuration: the table, its default folder and whether to train."""

    out: str | None = None
    """table folder (default runs/stoc-<preset>)"""
    report_only: bool = False
    """rewrite the table from finished runs, train nothing"""

    def table(self) -> TableConfig:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(TableConfig)}
        return TableConfig(**values | {"out": self.out or f"runs/stoc-{self.preset}"})


REPLAY_FLAGS = Flags(ReplaySwitches, prog="replay switches",
                     choices={"score_norm": lambda: SCORE_NORMS, "snippet_rule": lambda: SNIPPET_RULES,
                              "lamol_sampler": lambda: LAMOL_SAMPLERS},
                     help={"score_norm": "STOC token score", "snippet_rule": "STOC snippet rule",
                           "minhash": "MinHash deduplication of generative replay (off: code-faithful)",
                           "lamol_sampler": "LAMOL's sampler"},
                     hidden=("num_source_seqs", "batch_size"))
"""The generative replay switches as flags of a command (``--score-norm``, ``--no-minhash``, ...)."""

FLAGS = Flags(Config, prog="cfka stoc-table", description=__doc__.split("\n\n")[0],
              choices={"preset": lambda: list(BIOGRAPHY), "arch": lambda: list(ARCHS),
                       "kinds": lambda: GENERATIVE, "updates": lambda: UPDATES},
              nested={"replay": REPLAY_FLAGS}, metavars={"out": "DIR", "alphas": "ALPHA,..."})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def command(cfg: Config) -> int:
    """Trains (or only reports) the table: ``cfka stoc-table``'s run function."""
    (report if cfg.report_only else main)(cfg.table())
    return 0


def cli(argv: list[str]) -> int:
    return command(parse(argv))


if __name__ == "__main__":
    import sys

    raise SystemExit(cli(sys.argv[1:]))
