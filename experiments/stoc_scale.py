"""STOC vs LAMOL vs Random as the Biography world grows: where do the generative replay kinds separate?

    cfka stoc-scale --sizes small,w600,w2400 --seeds 0,1 --out runs/stoc-scale
    cfka stoc-scale --sizes small,w600 --bpe-vocab 1024 --out runs/stoc-scale   # the same on a BPE tokenizer
    cfka stoc-scale --sizes small,w600 --out runs/stoc-scale --report-only      # rewrite the table, train nothing
    cfka stoc-scale --sizes w600 --seeds 1 --methods stoc,lamol,random          # a piece of the sweep, in this order

For every world size (a ``BIOGRAPHY`` preset: ``small`` = 150 PT people, ``w600``, ``w2400``, ``w10k``; the model
and the schedules grow with the world, ``runs/presets.py``): one PT run, then for every seed CPT at α = 0.5 with
full updates for naive, real replay 'all' and the three generative corpora (STOC, LAMOL, Random), each corpus built
from the PT model with that seed. Every run is its own resumable folder, so a killed sweep continues where it
stopped and can be run in pieces or in the background:

    <out>/<world>/pt-<size>-<arch>/           the size's PT run (shared by its seeds)
    <out>/<world>/seed<k>/cpt-<method>/       CPT runs;   <out>/<world>/seed<k>/replay-<kind>[-seed<k>]/   corpora

(``<world>`` is the size, ``<size>-bpe<N>`` with ``--bpe-vocab N``: the word-level tokenizer gives every name part
its own token, a BPE tokenizer splits names into pieces shared between people, as the paper's tokenizer does.)

Writes ``table.md`` / ``table.json`` (per size and kind: Original and Continual sFTA as mean and min–max over
seeds, the corpus's coverage of the old world: PT people named, PT facts voiced and true values per mention,
``eval/coverage.py``)
and ``scale.png`` (Original sFTA and facts voiced against the number of PT people, per kind). The seed spread is
over CPT and corpus sampling at a fixed PT model.
"""

from __future__ import annotations

import dataclasses
import pathlib
import statistics

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.biography import continual, pretrain
from cfka_jax.parallel.mesh import mesh_of
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import ARCHS, CPTSpec, PTSpec
from cfka_jax.experiments.stoc_table import KIND_NAMES, corpus_coverage

METHODS = ("naive", "replay-all", "stoc", "lamol", "random")
NAMES = {**KIND_NAMES, "naive": "naive", "replay-all": "real replay 'all'"}
COVERAGE = ("pt_people_named", "pt_fact_coverage", "true_values_per_mention")


@dataclasses.dataclass(frozen=True)
class ScaleConfig:
    """One scaling table (module docstring)."""

    sizes: tuple[str, ...] = ("small", "w600", "w2400")
    """comma-separated Biography presets, smallest first (runs/presets.py BIOGRAPHY)"""
    seeds: tuple[int, ...] = (0, 1)
    """comma-separated CPT/replay seeds (the PT run is shared)"""
    out: str = "runs/stoc-scale"
    """table folder"""
    alpha: float = 0.5
    """new-data fraction of every replay run"""
    arch: str = "qwen"
    """model family (models/family.py)"""
    cache_dir: str = "runs/data-cache"
    """where generated worlds and packs are cached"""
    progress: bool = True
    """progress bars"""
    mesh: str | None = None
    """shard every run over devices (docs/scale.md)"""
    bpe_vocab: int | None = None
    """a BPE tokenizer of N entries instead of the word-level one (names share pieces)"""
    methods: tuple[str, ...] = METHODS
    """comma-separated CPT methods to train, in this order (the table reads every finished run)"""

    def __post_init__(self):
        unknown = [s for s in self.sizes if s not in BIOGRAPHY]
        if unknown or not self.sizes:
            raise ValueError(f"sizes must be Biography presets {sorted(BIOGRAPHY)}, got {list(self.sizes)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError(f"seeds must be distinct integers >= 0, got {list(self.seeds)}")
        if not self.methods or not set(self.methods) <= set(METHODS) or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct names from {list(METHODS)}, got {list(self.methods)}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")


def pt_people(size: str) -> int:
    return BIOGRAPHY[size].data_config().bio.num_pt_people


def world_name(cfg: ScaleConfig, size: str) -> str:
    return size if cfg.bpe_vocab is None else f"{size}-bpe{cfg.bpe_vocab}"


def _pt_spec(cfg: ScaleConfig, size: str) -> PTSpec:
    return PTSpec(preset=size, out=str(pathlib.Path(cfg.out) / world_name(cfg, size) / f"pt-{size}-{cfg.arch}"),
                  arch=cfg.arch, cache_dir=cfg.cache_dir, progress=cfg.progress, mesh=cfg.mesh,
                  bpe_vocab=cfg.bpe_vocab)


def _cpt_dir(cfg: ScaleConfig, size: str, seed: int, method: str) -> pathlib.Path:
    return pathlib.Path(cfg.out) / world_name(cfg, size) / f"seed{seed}" / f"cpt-{method}"


def _spec(cfg: ScaleConfig, size: str, seed: int, method: str) -> CPTSpec:
    return CPTSpec(preset=size, out=str(_cpt_dir(cfg, size, seed, method)), method=method, alpha=cfg.alpha,
                   arch=cfg.arch, seed=seed, pt_dir=_pt_spec(cfg, size).out, cache_dir=cfg.cache_dir,
                   progress=cfg.progress, mesh=cfg.mesh, bpe_vocab=cfg.bpe_vocab)


def check_scale(cfg: ScaleConfig) -> None:
    """Before any data is built or anything written: the mesh fits this machine, and every PT and CPT folder in
    ``--out`` is empty or holds that run."""
    mesh_of(cfg.mesh)
    for size in cfg.sizes:
        specs = [_pt_spec(cfg, size)] + [_spec(cfg, size, s, m) for s in cfg.seeds for m in cfg.methods]
        for spec in specs:
            RunFolder(spec.out).check(spec, spec.scale)


def run(cfg: ScaleConfig) -> dict:
    """Train what is missing (``cfg.methods`` for ``cfg.seeds``), smallest world first, rewriting the table after
    every run; :func:`check_scale` first."""
    check_scale(cfg)
    for size in cfg.sizes:
        pt_spec = _pt_spec(cfg, size)
        data = build_data(pt_spec.scale.data_config(), cfg.cache_dir)
        pt = pretrain(pt_spec, data)
        for seed in cfg.seeds:
            for method in cfg.methods:
                final = continual(_spec(cfg, size, seed, method), pt, data).final
                print(f"[stoc-scale] {size} seed {seed} {method}: Original/sFTA {100 * final['Original/sFTA']:.1f}"
                      f", Continual/sFTA {100 * final['Continual/sFTA']:.1f}")
                report(cfg, quiet=True)
    return report(cfg)


def _spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}


def collect(cfg: ScaleConfig) -> dict:
    """Per size: PT quality and, per method, the seeds' finished results and corpus coverage (nothing trained)."""
    out = {}
    for size in cfg.sizes:
        pt = RunFolder(_pt_spec(cfg, size).out).final()
        if pt is None:
            continue
        world = None
        rows = {}
        for method in METHODS:
            finals, cover = [], []
            for seed in cfg.seeds:
                final = RunFolder(_cpt_dir(cfg, size, seed, method)).final()
                if final is None:
                    continue
                finals.append(final)
                spec = _spec(cfg, size, seed, method)
                if any(n.startswith("generative_replay:") for n in spec.resolved.needs):  # a corpus to cover
                    world = world or build_data(_pt_spec(cfg, size).scale.data_config(), cfg.cache_dir).world
                    cov = corpus_coverage(spec.replay_folder, world)
                    if cov is not None:  # people named as a fraction of the PT people, like the facts voiced
                        cover.append({**cov, "pt_people_named": cov["pt_people_named"] / pt_people(size)})
            if finals:
                rows[method] = {k: _spread([f[k] for f in finals]) for k in ("Original/sFTA", "Continual/sFTA")}
                rows[method].update({k: _spread([c[k] for c in cover]) for k in COVERAGE if cover})
        out[world_name(cfg, size)] = {"pt_people": pt_people(size), "PT/Original/sFTA": pt["Original/sFTA"], "methods": rows}
    return out


def _cell(entry: dict | None, scale: float = 100.0) -> str:
    if entry is None:
        return "–"
    mean, lo, hi = (scale * entry[k] for k in ("mean", "min", "max"))
    return f"{mean:.1f}" + (f" ({lo:.1f}–{hi:.1f})" if entry["n"] > 1 else "")


def markdown(results: dict) -> str:
    head = ("| PT people | size | PT Original sFTA | method | seeds | Original sFTA | Continual sFTA "
            "| PT people named (%) | PT facts voiced (%) | true values per mention (%) |")
    lines = [head, "|---" * 10 + "|"]
    for size, r in results.items():
        for method, m in r["methods"].items():
            lines.append(f"| {r['pt_people']} | {size} | {100 * r['PT/Original/sFTA']:.1f} | {NAMES[method]} | "
                         f"{m['Original/sFTA']['n']} | {_cell(m['Original/sFTA'])} | {_cell(m['Continual/sFTA'])} | "
                         + " | ".join(_cell(m.get(k)) for k in COVERAGE) + " |")
    return "\n".join(lines)


def plot(results: dict, path: pathlib.Path) -> None:
    """Original sFTA and PT facts voiced against PT people, one line per method, min–max bars over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"naive": "black", "replay-all": "tab:green", "random": "tab:gray", "lamol": "tab:blue",
              "stoc": "tab:red"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in ((axes[0], "Original/sFTA", "Original sFTA (×100)"),
                           (axes[1], "pt_fact_coverage", "PT facts voiced by the corpus (%)")):
        for method in METHODS:
            pts = [(r["pt_people"], r["methods"][method][key]) for r in results.values()
                   if key in r["methods"].get(method, {})]
            if not pts:
                continue
            x = [p for p, _ in pts]
            y = [100 * e["mean"] for _, e in pts]
            err = [[100 * (e["mean"] - e["min"]) for _, e in pts], [100 * (e["max"] - e["mean"]) for _, e in pts]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=colors[method], label=NAMES[method])
        ax.set(xscale="log", xlabel="PT people (world size)", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(cfg: ScaleConfig, quiet: bool = False) -> dict:
    """Rewrite ``table.md``, ``table.json`` and ``scale.png`` from the finished runs."""
    out = pathlib.Path(cfg.out)
    results = collect(cfg)
    out.mkdir(parents=True, exist_ok=True)
    text = (f"# STOC vs LAMOL vs Random by world size (α = {cfg.alpha}, full update, ×100, final CPT step; "
            f"mean (min–max) over seeds {list(cfg.seeds)})\n\n{markdown(results)}\n")
    jsonio.write_text_atomic(out / "table.md", text)
    jsonio.write_json_atomic(out / "table.json", results, indent=1, newline=False)
    if results:
        plot(results, out / "scale.png")
    if not quiet:
        print(text)
    return results


@dataclasses.dataclass(frozen=True)
class Config(ScaleConfig):
    """``cfka stoc-scale``'s configuration: the table and whether to train."""

    report_only: bool = False
    """rewrite the table from finished runs, train nothing"""

    def table(self) -> ScaleConfig:
        return ScaleConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(ScaleConfig)})


FLAGS = Flags(Config, prog="cfka stoc-scale", description=__doc__.split("\n\n")[0],
              choices={"sizes": lambda: list(BIOGRAPHY), "arch": lambda: list(ARCHS), "methods": lambda: METHODS},
              metavars={"out": "DIR", "bpe_vocab": "N", "sizes": "PRESET,...", "seeds": "SEED,..."})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def command(cfg: Config) -> int:
    """Trains (or only reports) the scaling table: ``cfka stoc-scale``'s run function."""
    (report if cfg.report_only else run)(cfg.table())
    return 0


def cli(argv: list[str]) -> int:
    return command(parse(argv))


if __name__ == "__main__":
    import sys

    raise SystemExit(cli(sys.argv[1:]))
