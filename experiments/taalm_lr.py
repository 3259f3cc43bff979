"""TAALM's learning-rate selection on synthetic LAMA-CKL (claim ``taalm.lr-selection``; spec taalm.md §5.4, §7:
the paper runs every method at one lr, 1e-4): every method at every swept lr over several study seeds, each
method's lr chosen by the SAME rule on a held-out selection metric, then the table at each method's own lr.

    python -m cfka_jax.experiments.taalm_lr --preset small --lrs 1e-3,3e-3,1e-2 --seeds 0,1 \\
        --methods "Finetune,Oracle,TAALM,K-Adapter"

Per seed N the θ0, the selected LAMA-CKL sets and φ of ``cfka taalm --preset P --seed N`` are read from
``--base-dirs`` (``runs/taalm-{preset}-s{seed}``; their stages run there first where the folder lacks them, and a
folder's ``config.json`` is checked, never rewritten). The TO-LEARN and NOT-TO-FORGET facts are split by position:
every ``--select-every``-th fact forms the **selection** split, the others the **test** split. Every run trains on
all the TO-LEARN evidence, as the main table does, and scores both splits after every epoch (the §5.6 metrics per
split). The selection rule (``claims/papers/taalm_rules.select_lr``): argmax over lrs of the seeds' mean Total
Knowledge on the selection split, ties to the smaller lr; the reported numbers are the test split's.

Writes ``OUT/s<seed>/lr<lr>/<method>.json`` (each run; an interrupted sweep resumes) and, after every run, the
record ``results/taalm/lr_selection_<preset>.json``: one row per (method, lr, seed, split) with ``top_acc``,
``epoch``, ``nf_acc``, ``total`` and the split's fact counts.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

from cfka_jax.experiments import taalm, taalm_sweep
from cfka_jax.experiments import taalm_stages as stages
from cfka_jax.experiments.taalm_record import LAMA_REGIME

from cfka_jax import jsonio
from cfka_jax.claims.papers.taalm_rules import SELECTION, TEST, describe, select_lr
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.eval.knowledge_probes import ckl_summary

CLOCK = Clock()
_RESUMABLE = ("lrs", "seeds", "methods", "progress", "record", "results")


@dataclasses.dataclass(frozen=True)
class Config:
    """Every LAMA-CKL method at every lr and seed; each method's lr chosen by one rule on a held-out split."""

    preset: str = "small"
    """scale (taalm.PRESETS)"""
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2)
    """comma-separated learning rates, each > 0"""
    seeds: tuple[int, ...] = (0, 1)
    """comma-separated study seeds (cfka taalm --seed N)"""
    methods: tuple[str, ...] = ("Finetune", "Oracle", "TAALM", "K-Adapter")
    """comma-separated LAMA-CKL methods"""
    base_dirs: str = "runs/taalm-{preset}-s{seed}"
    """the folder of each seed's θ0, sets and φ ({preset}, {seed}); made there when absent"""
    out: str | None = None
    """the sweep's folder (default runs/taalm-lr-<preset>)"""
    select_every: int = 3
    """every k-th TO-LEARN and NOT-TO-FORGET fact forms the selection split (k >= 2)"""
    epochs: int | None = None
    """LAMA-CKL epochs of every method (default: the preset's); another budget is another sweep: its own default
    --out (runs/taalm-lr-<preset>-e<EPOCHS>) and record (taalm/lr_selection_<preset>_e<EPOCHS>)"""
    record: bool = True
    """write results/taalm/lr_selection_<preset>.json after every run"""
    results: str = "results"
    """the folder of result records"""
    progress: bool = False
    """progress bars of the shared stages"""

    def __post_init__(self):
        taalm.preset(self.preset)
        if not self.lrs or any(not (math.isfinite(lr) and lr > 0) for lr in self.lrs):
            raise ValueError(f"--lrs must be finite numbers > 0, got {self.lrs}")
        taalm_sweep.distinct(("--lrs", self.lrs), ("--seeds", self.seeds), ("--methods", self.methods))
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"--epochs must be an integer >= 1, got {self.epochs}")
        if self.select_every < 2:
            raise ValueError(f"--select-every must be >= 2 (a test split must remain), got {self.select_every}")
        taalm_sweep.check_base_dirs(self.base_dirs, self.preset)
        for seed in self.seeds:
            self.taalm(seed)  # checks every method name and seed before anything is written

    def suffix(self) -> str:
        """``-e<EPOCHS>`` for a budget other than the preset's, else empty."""
        return "" if self.epochs is None else f"-e{self.epochs}"

    def out_dir(self) -> pathlib.Path:
        return pathlib.Path(self.out or f"runs/taalm-lr-{self.preset}{self.suffix()}")

    def record_name(self) -> str:
        return f"taalm/lr_selection_{self.preset}{self.suffix().replace('-', '_')}"

    def taalm(self, seed: int) -> taalm.TaalmConfig:
        """Seed ``seed``'s study config: the preset in its base folder with this sweep's methods, no TemporalWiki."""
        return taalm_sweep.seed_config(self.base_dirs, self.preset, seed, methods=self.methods, twiki_methods=(),
                                       progress=self.progress)


FLAGS = Flags(Config, prog="python -m cfka_jax.experiments.taalm_lr", choices={"preset": lambda: sorted(taalm.PRESETS)},
              metavars={"out": "DIR", "base_dirs": "TEMPLATE", "results": "DIR"})


def split(rows: tuple, every: int) -> tuple[tuple, tuple]:
    """(selection, test): the rows at positions ``0, every, 2·every, ...`` and the others."""
    return rows[::every], tuple(r for i, r in enumerate(rows) if i % every)


def cell_path(out: pathlib.Path, seed: int, lr: float, name: str) -> pathlib.Path:
    return out / f"s{seed}" / f"lr{lr:g}" / f"{stages.slug(name)}.json"


def _summary_rows(name: str, lr: float, seed: int, res: dict) -> list[dict]:
    rows = []
    for part, summary in ((SELECTION, res["selection_summary"]), (TEST, res["summary"])):
        rows.append({"method": name, "lr": lr, "seed": seed, "split": part,
                     "top_acc": round(float(summary["top_acc"]), 4), "epoch": int(summary["epoch"]),
                     "nf_acc": round(float(summary["nf_acc"]), 4), "total": round(float(summary["total_knowledge"]), 4),
                     **res["split_sizes"][part]})
    return rows


def run_seed(cfg: Config, seed: int, out: pathlib.Path, on_cell) -> None:
    """Every (lr, method) of ``seed`` not yet in ``out``; ``on_cell()`` after each."""
    tcfg = cfg.taalm(seed)
    p = taalm.prepare(tcfg, write_config=not (pathlib.Path(tcfg.out) / "config.json").exists())
    sel_tl, test_tl = split(p.sets.to_learn, cfg.select_every)
    sel_nf, test_nf = split(p.sets.not_to_forget, cfg.select_every)
    sizes = {SELECTION: {"n_to_learn": len(sel_tl), "n_not_to_forget": len(sel_nf)},
             TEST: {"n_to_learn": len(test_tl), "n_not_to_forget": len(test_nf)}}
    probes = stages.descriptive_probes(p.tok, to_learn=test_tl, not_to_forget=test_nf, sel_to_learn=sel_tl,
                                       sel_not_to_forget=sel_nf)
    stream, review = stages.lama_streams(tcfg, p.tok, p.sets, p.setup, p.world)
    for lr in cfg.lrs:
        for name in cfg.methods:
            path = cell_path(out, seed, lr, name)
            if path.exists():
                continue
            ckl = dataclasses.replace(tcfg.ckl_for(name), lr=lr,
                                      **({} if cfg.epochs is None else {"epochs": cfg.epochs}))
            res = stages.lama_method(tcfg, name, ckl, p.model, stream, probes, review)
            hist = res["history"]
            res["selection_summary"] = ckl_summary([h["sel_to_learn/acc"] for h in hist],
                                                   [h["sel_not_to_forget/acc"] for h in hist])
            res.update(method=name, split_sizes=sizes)
            jsonio.write_json_atomic(path, res, indent=1, default=float)
            s, t = res["selection_summary"], res["summary"]
            print(f"[taalm-lr] s{seed} lr {lr:g} {name}: selection Total {s['total_knowledge']:.4f}, test Top Acc "
                  f"{t['top_acc']:.4f} NF {t['nf_acc']:.4f} Total {t['total_knowledge']:.4f}, {res['wall_s']:.0f}s",
                  flush=True)
            on_cell()


def record_rows(out: pathlib.Path) -> tuple[list[dict], dict[int, float]]:
    """The rows of every finished run in ``out`` (every sweep into the folder: a later call may add lrs, seeds or
    methods), and the seconds each seed's runs took."""
    rows, walls = [], {}
    for path in sorted(out.glob("s*/lr*/*.json")):
        res = jsonio.read_json_object(path, "a TAALM lr-sweep run (JSON object)")
        try:
            seed, name, lr = int(path.parent.parent.name[1:]), res["method"], float(res["lr"])
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{path}: not a TAALM lr-sweep run ({err!r})") from None
        rows += _summary_rows(name, lr, seed, res)
        walls[seed] = walls.get(seed, 0.0) + float(res["wall_s"])
    return rows, walls


def write_lr_record(cfg: Config, out: pathlib.Path) -> pathlib.Path | None:
    """``results/taalm/lr_selection_<preset>.json`` over the finished runs (``None`` before the first)."""
    rows, walls = record_rows(out)
    if not rows:
        return None
    seeds = sorted(walls)
    regime = {k: v for k, v in LAMA_REGIME.items() if k not in ("lr_selection", "n_to_learn", "n_not_to_forget")}
    tcfg = cfg.taalm(seeds[0])
    regime.update(
        dose=f"{cfg.epochs or tcfg.ckl.epochs} epochs of batch {tcfg.ckl.batch_size}, AdamW wd "
             f"{tcfg.ckl.weight_decay}, no schedule, at each lr of 'grid'",
        lr_selection=f"each method's lr = argmax over the swept lrs of the seeds' mean Total Knowledge on the "
                     f"selection split (every {cfg.select_every}-th TO-LEARN and NOT-TO-FORGET fact, by position "
                     f"in the selected sets), ties to the smaller lr; reported: the test split (the other facts)",
        split="every run trains on all TO-LEARN evidence and scores both splits' descriptive probes after every "
              "epoch; each split has its own Top Acc / Epoch / NF Acc / Total (spec §5.6)",
        n_to_learn=min(r["n_to_learn"] for r in rows if r["split"] == TEST),
        n_not_to_forget=min(r["n_not_to_forget"] for r in rows if r["split"] == TEST),
        grid={m: sorted({r["lr"] for r in rows if r["method"] == m}) for m in dict.fromkeys(r["method"] for r in rows)},
        seeds=seeds)
    command = " ".join(_commands(rows, cfg))
    configs = {"sweep": dataclasses.asdict(cfg), **{f"s{s}": dataclasses.asdict(cfg.taalm(s)) for s in seeds}}
    prov = provenance(config=configs, seeds=seeds, pt_replicates=[f"θ0-s{s}" for s in seeds], clock=CLOCK,
                      command=command)
    prov["runs_wall_s"] = {f"s{s}": round(w, 2) for s, w in walls.items()}
    prov["note"] = ("wall_s / cpu_s: the process that wrote the record; runs_wall_s: the seeds' runs (θ0 and φ "
                    "read from --base-dirs, made by cfka taalm --seed N)")
    return write_record(cfg.results, cfg.record_name(), rows=rows, regime=regime, provenance=prov)


def _commands(rows: list[dict], cfg: Config) -> list[str]:
    """One sweep command per group of methods that share their (lrs, seeds), joined by ``;``."""
    groups: dict[tuple, list[str]] = {}
    for m in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == m]
        key = (tuple(sorted({r["lr"] for r in mine})), tuple(sorted({r["seed"] for r in mine})))
        groups.setdefault(key, []).append(m)
    return ["; ".join(f"python -m cfka_jax.experiments.taalm_lr --preset {cfg.preset} --lrs "
                      f"{','.join(f'{lr:g}' for lr in lrs)} --seeds {','.join(map(str, seeds))} --methods "
                      f"\"{','.join(ms)}\" --select-every {cfg.select_every}"
                      + ("" if cfg.epochs is None else f" --epochs {cfg.epochs}")
                      + f" --base-dirs {cfg.base_dirs} --out {cfg.out_dir()}" for (lrs, seeds), ms in groups.items())]


def check_folder(cfg: Config, out: pathlib.Path) -> None:
    """Refuse a sweep folder made with other settings (its lrs, seeds and methods may grow); write ``config.json``."""
    taalm_sweep.check_folder(cfg, out, resumable=_RESUMABLE, what="a TAALM lr-sweep config")


def command(cfg: Config) -> int:
    """The sweep, then the lr chosen for each method."""
    out = cfg.out_dir()
    taalm_sweep.run(cfg, out, check=check_folder, run_seed=run_seed, write_record=write_lr_record, tag="taalm-lr")
    rows, _ = record_rows(out)
    chosen = select_lr(rows)
    print(f"[taalm-lr] chosen lr (selection Total Knowledge, {len(cfg.seeds)} seeds): {describe(chosen)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
