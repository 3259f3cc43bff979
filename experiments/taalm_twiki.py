"""TemporalWiki at several epochs per period (claims ``taalm.twiki-*``; spec taalm.md §8: the paper trains one
epoch per period): every method of the synthetic TemporalWiki of ``cfka taalm`` at each epoch count and study
seed, θ carried across the three periods as in the main table.

    python -m cfka_jax.experiments.taalm_twiki --preset small --epochs 1,3,5 --seeds 0,1,2 \\
        --methods "Finetune,Oracle,RHO-1,Mix-review,RecAdam,K-Adapter,TAALM,TAALM + K-Adapter"

Per seed N the θ0 and φ of ``cfka taalm --preset P --seed N`` are read from ``--base-dirs``
(``runs/taalm-{preset}-s{seed}``; their stages run there first where the folder lacks them, and a folder's
``config.json`` is checked, never rewritten). A run is one (seed, epochs, method): the periods, review stream and
settings of the main table's TemporalWiki stage (``taalm_stages.twiki_streams`` / ``twiki_method``), with
``epochs`` epochs over each period's diff documents (a fresh optimiser per period). Each period's changed and
unchanged probes are scored before and after its training (object NLL, lower is better).

Writes ``OUT/s<seed>/e<epochs>/<method>.json`` (each run; an interrupted study resumes, a seed whose runs are all
there is not even loaded) and, after every run, the record ``results/taalm/twiki_epochs_<preset>.json``: one row
per (method, epochs, seed, period, probes) with ``before`` and ``after``, the rows of ``taalm/twiki_<name>`` plus
``epochs``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

from cfka_jax.experiments import taalm, taalm_sweep
from cfka_jax.experiments import taalm_stages as stages
from cfka_jax.experiments.taalm_record import TWIKI_REGIME, seed_folders, twiki_rows

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.continual.ckl import updates_per_epoch

CLOCK = Clock()
METHODS = ("Finetune", "Oracle", "RHO-1", "Mix-review", "RecAdam", "K-Adapter", "TAALM", "TAALM + K-Adapter")
"""The paper's TemporalWiki rows (its TAALM rows included; the main table adds ``K-Adapter (dropout 0.1)``)."""
_RESUMABLE = ("epochs", "seeds", "methods", "progress", "record", "results")


@dataclasses.dataclass(frozen=True)
class Config:
    """Every TemporalWiki method at several epochs per period and study seeds, on each seed's θ0 and φ."""

    preset: str = "small"
    """scale (taalm.PRESETS)"""
    epochs: tuple[int, ...] = (1, 3, 5)
    """comma-separated epochs per period, each >= 1"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """comma-separated study seeds (cfka taalm --seed N)"""
    methods: tuple[str, ...] = METHODS
    """comma-separated TemporalWiki methods"""
    base_dirs: str = "runs/taalm-{preset}-s{seed}"
    """the folder of each seed's θ0, sets and φ ({preset}, {seed}); made there when absent"""
    out: str | None = None
    """the study's folder (default runs/taalm-twiki-<preset>)"""
    record: bool = True
    """write results/taalm/twiki_epochs_<preset>.json after every run"""
    results: str = "results"
    """the folder of result records"""
    progress: bool = False
    """progress bars of the shared stages"""

    def __post_init__(self):
        taalm.preset(self.preset)
        taalm_sweep.distinct(("--epochs", self.epochs), ("--seeds", self.seeds), ("--methods", self.methods))
        if any(isinstance(e, bool) or not isinstance(e, int) or e < 1 for e in self.epochs):
            raise ValueError(f"--epochs must be integers >= 1 (epochs per period), got {self.epochs}")
        taalm_sweep.check_base_dirs(self.base_dirs, self.preset)
        for seed in self.seeds:
            self.taalm(seed)  # checks every method name and seed before anything is written

    def out_dir(self) -> pathlib.Path:
        return pathlib.Path(self.out or f"runs/taalm-twiki-{self.preset}")

    def taalm(self, seed: int) -> taalm.TaalmConfig:
        """Seed ``seed``'s study config: the preset in its base folder with this study's TemporalWiki methods and
        no LAMA-CKL methods (its ``twiki`` settings stay the preset's, so the folder's config check passes)."""
        return taalm_sweep.seed_config(self.base_dirs, self.preset, seed, methods=(), twiki_methods=self.methods,
                                       progress=self.progress)


FLAGS = Flags(Config, prog="python -m cfka_jax.experiments.taalm_twiki",
              choices={"preset": lambda: sorted(taalm.PRESETS)},
              metavars={"out": "DIR", "base_dirs": "TEMPLATE", "results": "DIR"})


def run_path(out: pathlib.Path, seed: int, epochs: int, name: str) -> pathlib.Path:
    return out / f"s{seed}" / f"e{epochs}" / f"{stages.slug(name)}.json"


def run_seed(cfg: Config, seed: int, out: pathlib.Path, on_run) -> None:
    """Every (epochs, method) of ``seed`` not yet in ``out``, the smaller epoch counts first; ``on_run()`` after
    each. θ0 and φ are read only where a run is missing."""
    todo = [(e, m) for e in cfg.epochs for m in cfg.methods if not run_path(out, seed, e, m).exists()]
    if not todo:
        return
    tcfg = cfg.taalm(seed)
    p = taalm.prepare(tcfg, write_config=False)
    periods, review = stages.twiki_streams(tcfg, p.tok, p.world, p.setup)
    for epochs, name in todo:
        twiki = dataclasses.replace(tcfg.twiki_for(name), epochs=epochs)
        t0 = time.perf_counter()
        res = stages.twiki_method(tcfg, name, twiki, p.model, periods, review)
        run = {"method": name, "seed": seed, "epochs": epochs, "lr": twiki.lr, "batch_size": twiki.batch_size,
               "updates_per_epoch": [updates_per_epoch(len(q.stream.docs), twiki) for q in periods],
               "wall_s": time.perf_counter() - t0, "periods": res}
        jsonio.write_json_atomic(run_path(out, seed, epochs, name), run, indent=1, default=float)
        last = res[-1]["after"]
        print(f"[taalm-twiki] s{seed} {epochs} epochs {name}: last period changed / unchanged NLL "
              f"{last['changed/nll']:.3f} / {last['unchanged/nll']:.3f}, {run['wall_s']:.0f}s", flush=True)
        on_run()


def read_runs(out: pathlib.Path) -> list[dict]:
    """Every finished run in ``out`` (every call into the folder: a later one may add epochs, seeds or methods),
    in a stable order."""
    runs = []
    for path in sorted(out.glob("s*/e*/*.json")):
        run = jsonio.read_json_object(path, "a TAALM TemporalWiki-epochs run (JSON object)")
        try:
            ok = (run["seed"], run["epochs"]) == (int(path.parent.parent.name[1:]), int(path.parent.name[1:]))
            ok = ok and isinstance(run["method"], str) and isinstance(run["periods"], list) and run["periods"]
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{path}: not a TAALM TemporalWiki-epochs run ({err!r})") from None
        if not ok:
            raise ValueError(f"{path}: not a TAALM TemporalWiki-epochs run (its seed, epochs or periods)")
        runs.append(run)
    return runs


def record_rows(runs: list[dict]) -> list[dict]:
    """One row per (method, epochs, seed, period, probes): ``taalm_record.twiki_rows`` with ``epochs``."""
    rows = []
    for run in runs:
        for r in twiki_rows(run["seed"], {run["method"]: run["periods"]}):
            rows.append({"method": r.pop("method"), "epochs": run["epochs"], **r})
    return rows


def write_epochs_record(cfg: Config, out: pathlib.Path) -> pathlib.Path | None:
    """``results/taalm/twiki_epochs_<preset>.json`` over the finished runs (``None`` before the first)."""
    runs = read_runs(out)
    if not runs:
        return None
    seeds = sorted({r["seed"] for r in runs})
    names = dict.fromkeys(r["method"] for r in runs)
    grid = {m: sorted({r["epochs"] for r in runs if r["method"] == m}) for m in names}
    updates = sorted({u for r in runs for u in r["updates_per_epoch"]})
    regime = {k: v for k, v in TWIKI_REGIME.items() if k not in ("dose", "lr_selection")}
    lrs, batches = sorted({r["lr"] for r in runs}), sorted({r["batch_size"] for r in runs})
    regime.update(
        dose=f"'epochs' epochs per period (each row's; grid in 'grid'), batch {'/'.join(map(str, batches))} "
             f"(updates per epoch and period: {'/'.join(map(str, updates))}), AdamW lr "
             f"{'/'.join(f'{x:g}' for x in lrs)}, fresh optimiser per period, θ carried over",
        lr_selection="lr of the main table (chosen on LAMA-CKL, Finetune and Oracle only), the same at every epoch "
                     "count",
        grid=grid, seeds=seeds)
    folders = seed_folders(cfg.base_dirs, seeds, cfg.preset)
    extra = {f"s{f.seed}": f.extra() for f in folders}
    regime.update(selection={s: e.get("selection") for s, e in extra.items()},
                  phi_best_step={s: e.get("phi_best_step") for s, e in extra.items()})
    configs = {"study": dataclasses.asdict(cfg), **{f"s{s}": dataclasses.asdict(cfg.taalm(s)) for s in seeds}}
    prov = provenance(config=configs, seeds=seeds, pt_replicates=[f"θ0-s{s}" for s in seeds], clock=CLOCK,
                      command=_commands(runs, cfg))
    prov["unit"] = "run"
    prov["runs_wall_s"] = {f"s{s}": round(sum(r["wall_s"] for r in runs if r["seed"] == s), 2) for s in seeds}
    prov["note"] = ("wall_s / cpu_s: the process that wrote the record; runs_wall_s: the seeds' runs (θ0 and φ "
                    "read from --base-dirs, made by cfka taalm --seed N)")
    return write_record(cfg.results, f"taalm/twiki_epochs_{cfg.preset}", rows=record_rows(runs), regime=regime,
                        provenance=prov)


def _commands(runs: list[dict], cfg: Config) -> str:
    """One study command per group of methods that share their (epochs, seeds), joined by ``;``."""
    groups: dict[tuple, list[str]] = {}
    for m in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == m]
        key = (tuple(sorted({r["epochs"] for r in mine})), tuple(sorted({r["seed"] for r in mine})))
        groups.setdefault(key, []).append(m)
    return "; ".join(f"python -m cfka_jax.experiments.taalm_twiki --preset {cfg.preset} --epochs "
                     f"{','.join(map(str, epochs))} --seeds {','.join(map(str, seeds))} --methods \"{','.join(ms)}\" "
                     f"--base-dirs {cfg.base_dirs} --out {cfg.out_dir()}" for (epochs, seeds), ms in groups.items())


def check_folder(cfg: Config, out: pathlib.Path) -> None:
    """Refuse a study folder made with another preset or base folders (its epochs, seeds and methods may grow);
    write ``config.json``."""
    taalm_sweep.check_folder(cfg, out, resumable=_RESUMABLE, what="a TAALM TemporalWiki-epochs config")


def command(cfg: Config) -> int:
    taalm_sweep.run(cfg, cfg.out_dir(), check=check_folder, run_seed=run_seed, write_record=write_epochs_record,
                    tag="taalm-twiki")
    return 0


def main(argv: list[str] | None = None) -> int:
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
