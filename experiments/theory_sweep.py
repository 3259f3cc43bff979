"""`cfka sweep`: continual training of the theory model over EWC strength k × new-data fraction α × seeds.

Reproduces the sweep of issue 6 (spec cfka_stoc.md §2.7, §2.9): CPT of the old/new fact worlds of
``cfka_jax/theory/cpt.py`` (Z fixed, PT converged), every (k, α) with its exact convergence point and
linearised predictions (``theory/cpt_sweep.py``). Writes ``sweep.csv`` (one row per (k, α): measured vs
predicted old/new-fact probability, distance to the convergence point, probe-column fluctuation),
``config.json`` and three plots: ``sweep_trajectories.png``, ``sweep_distance_vs_k.png``,
``sweep_amplitude_vs_alpha.png``.

    cfka sweep --ks 0,0.1,1,10 --alphas 0.5,0.67,0.8,0.9,1 --seeds 16 --steps 4000 --out runs/sweep
    cfka sweep --config grid.toml            (keys = SweepConfig fields; command-line flags override the file)
    python -m cfka_jax.experiments.theory_sweep --help
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import typing

import numpy as np

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
from cfka_jax.values import check_float, check_floats, float_arg, floats_arg


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """Everything a sweep run depends on (saved as config.json next to the results).

    Attributes:
      out: output directory.
      ks, alphas, num_seeds, steps, log_every, batch_size, eta_y, replay, start: see ``SweepSpec``
        (batch_size 0 means population gradient descent).
      world_seed: seed of the old/new fact worlds (``ContinualConfig.seed``); smoothing: their ε.
      chunk_runs: at most this many runs per jitted call (the progress bar advances per chunk).
      seed: PRNG seed of the minibatches.
      x64: run in float64 (inside a context manager; the process-wide setting is untouched).
      mesh: split each chunk's runs over the devices of this mesh (``parallel/mesh.parse_mesh``, e.g. ``auto``);
        a chunk whose run count the device count does not divide runs unsplit.
    """

    out: str = "runs/sweep"
    ks: tuple[float, ...] = (0.0, 0.1, 1.0, 10.0)
    alphas: tuple[float, ...] = (0.5, 0.67, 0.8, 0.9, 1.0)
    num_seeds: int = 16
    steps: int = 4000
    log_every: int = 100
    batch_size: int = 16
    eta_y: float = 0.5
    replay: str = "true"
    start: str = "pt"
    world_seed: int = 0
    smoothing: float = 0.1
    chunk_runs: int = 256
    seed: int = 0
    x64: bool = True
    mesh: str | None = None

    def __post_init__(self):
        from cfka_jax.parallel.mesh import parse_mesh
        from cfka_jax.theory.cpt import ContinualConfig

        if self.mesh is not None:
            parse_mesh(self.mesh)
        if self.chunk_runs < self.num_seeds:
            raise ValueError(f"chunk_runs={self.chunk_runs} must hold at least one grid point ({self.num_seeds} seeds)")
        if self.world_seed < 0:
            raise ValueError(f"world_seed must be >= 0, got {self.world_seed}")
        self.spec()  # validates the grid
        ContinualConfig(smoothing=self.smoothing, seed=self.world_seed)  # validates the worlds

    def spec(self):
        from cfka_jax.theory.cpt_sweep import SweepSpec

        return SweepSpec(ks=tuple(self.ks), alphas=tuple(self.alphas), num_seeds=self.num_seeds, steps=self.steps,
                         log_every=self.log_every, batch_size=self.batch_size or None, eta_y=self.eta_y,
                         replay=self.replay, start=self.start)


def read_config_file(path: str) -> dict:
    """The SweepConfig fields of a TOML (``.toml``) or JSON (any other suffix) file, type-checked, nothing converted
    except lists to tuples.

    Raises:
      FileNotFoundError: no such file.
      ValueError: invalid UTF-8, TOML or JSON (naming the file and line), a top level that is not a table/object,
        an unknown key, or a value of the wrong type or out of range (naming the file and the key): ``x64 =
        "false"`` is rejected, not read as true; every α must lie in (0, 1] and every k be >= 0.
    """
    if not pathlib.Path(path).is_file():
        raise FileNotFoundError(f"--config {path}: no such sweep config file")
    if path.endswith(".toml"):
        fields = jsonio.read_toml(path)
    else:
        fields = jsonio.read_json_object(path, "a JSON object of SweepConfig fields")
    hints = typing.get_type_hints(SweepConfig)
    unknown = sorted(set(fields) - set(hints))
    if unknown:
        raise ValueError(f"{path}: unknown sweep config key(s) {unknown}; known: {sorted(hints)}")
    for key, value in fields.items():
        problem = jsonio.type_problem(value, hints[key])
        if problem:
            raise ValueError(f"{path}: key {key!r} {problem}")
    if "alphas" in fields:
        check_floats(fields["alphas"], "key 'alphas'", lo=0.0, lo_open=True, hi=1.0, where=path)
    if "ks" in fields:
        check_floats(fields["ks"], "key 'ks'", lo=0.0, where=path)
    if "eta_y" in fields:
        check_float(fields["eta_y"], "key 'eta_y'", lo=0.0, lo_open=True, where=path)
    return {k: tuple(float(x) for x in v) if k in ("ks", "alphas") else v for k, v in fields.items()}


@dataclasses.dataclass(frozen=True)
class Config(SweepConfig):
    """``cfka sweep``'s configuration: a :class:`SweepConfig`, optionally read from a file, and ``--float32``."""

    config: str | None = None
    """TOML or JSON file with SweepConfig fields (command-line flags override the file)"""
    float32: bool = False
    """run in float32 instead of float64"""

    def __post_init__(self):
        try:
            self.sweep()
        except ValueError as e:  # a cross-field rule may come from the file: name it
            source = f"{self.config} with the command-line flags" if self.config else "command-line flags"
            raise ValueError(f"sweep config ({source}): {e}") from None

    def sweep(self) -> SweepConfig:
        """The sweep this command runs (what ``config.json`` stores)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(SweepConfig)}
        return SweepConfig(**{**fields, "x64": self.x64 and not self.float32})


def _replay_kinds() -> tuple[str, ...]:
    from cfka_jax.theory.cpt_sweep import REPLAY_KINDS

    return REPLAY_KINDS


FLAGS = Flags(Config, prog="cfka sweep", description=__doc__.split("\n\n")[0],
              choices={"replay": _replay_kinds, "start": lambda: ("pt", "optimum")},
              names={"num_seeds": "seeds", "eta_y": "eta"}, hidden=("x64",),
              parsers={"ks": floats_arg(lo=0.0), "alphas": floats_arg(lo=0.0, lo_open=True, hi=1.0),
                       "eta_y": float_arg(lo=0.0, lo_open=True), "smoothing": float_arg()},
              layered=("config", lambda path: read_config_file(path)),
              help={"out": "output folder (sweep.csv, config.json, sweep_*.png)",
                    "ks": "comma-separated EWC strengths k >= 0, e.g. 0,0.1,1",
                    "alphas": "comma-separated new-data fractions in (0, 1]", "num_seeds": "seeds per (k, α)",
                    "steps": "CPT steps of every run", "log_every": "trajectory logging interval in steps",
                    "batch_size": "minibatch size; 0 = population gradient descent",
                    "eta_y": "step size η > 0", "replay": "true: old samples; generative: the PT model's labels",
                    "start": "pt: the converged PT model; optimum: the old world's optimum",
                    "world_seed": "seed of the old/new fact worlds", "smoothing": "the worlds' label smoothing ε",
                    "chunk_runs": "at most this many runs per jitted call", "seed": "PRNG seed of the minibatches",
                    "mesh": "split the runs over devices, e.g. auto or data=8 (docs/scale.md)"},
              metavars={"out": "DIR", "config": "FILE"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def load_config(argv: list[str]) -> SweepConfig:
    """Defaults ← config file (TOML/JSON) ← command-line flags.

    Raises:
      FileNotFoundError / ValueError: see :func:`read_config_file`; a value that breaks a cross-field rule is
        named with the config file it may come from.
    """
    return parse(argv).sweep()


def run_sweep(cfg: SweepConfig, mesh=None):
    """Theory for every (k, α), the runs in chunks with a progress bar, and the population-GD path of every (k, α).

    The GD path (same η, no minibatch noise) is the first-order prediction of the seed-averaged SGD path.
    ``mesh``: the device mesh (default: ``cfg.mesh``'s). Returns (worlds, theory, final Y of every run, SGD trace,
    GD trace).
    """
    import jax
    from tqdm import tqdm

    from cfka_jax.theory.cpt import ContinualConfig, make_continual_worlds
    from cfka_jax.theory.cpt_sweep import run_grid, theory_grid

    from cfka_jax.parallel.mesh import mesh_of

    spec = cfg.spec()
    mesh = mesh_of(cfg.mesh) if mesh is None else mesh
    worlds = make_continual_worlds(ContinualConfig(smoothing=cfg.smoothing, seed=cfg.world_seed))
    theory = theory_grid(worlds, spec)
    per_chunk = max(1, cfg.chunk_runs // cfg.num_seeds)
    num_points = theory.k.shape[0]
    finals, traces = [], []
    with tqdm(total=spec.num_runs, desc="cfka sweep", unit="run", file=sys.stderr) as bar:
        for i, g0 in enumerate(range(0, num_points, per_chunk)):
            part = jax.tree.map(lambda x: x[g0:g0 + per_chunk], theory)
            runs = part.k.shape[0] * cfg.num_seeds
            split = mesh if mesh is not None and runs % mesh.size == 0 else None
            Y, trace = run_grid(worlds, spec, part, jax.random.fold_in(jax.random.key(cfg.seed), i), mesh=split)
            finals.append(np.asarray(Y))
            traces.append(jax.tree.map(np.asarray, trace))
            bar.update(part.k.shape[0] * cfg.num_seeds)
    trace = jax.tree.map(lambda *xs: np.concatenate(xs, axis=0), *traces)
    gd_spec = dataclasses.replace(spec, batch_size=None, num_seeds=1)
    _, gd_trace = run_grid(worlds, gd_spec, theory, jax.random.key(cfg.seed))  # mean-field path, one per (k, α)
    return worlds, theory, np.concatenate(finals, axis=0), trace, jax.tree.map(np.asarray, gd_trace)


def _mean_over_seeds(x, num_seeds):
    return np.asarray(x).reshape(-1, num_seeds, *np.shape(x)[1:]).mean(axis=1)


def plot_trajectories(cfg: SweepConfig, theory, trace, gd_trace, out: pathlib.Path):
    """Old (solid) and new (dashed) fact probability vs step, EWC (α = 1) and replay (k = 0).

    Overlaid: the population-GD path (dotted, the mean-field prediction of the SGD mean) and the exact
    convergence point of the old-fact probability (triangle at the right edge).
    """
    import matplotlib.pyplot as plt

    old, new = _mean_over_seeds(trace.old_prob, cfg.num_seeds), _mean_over_seeds(trace.new_prob, cfg.num_seeds)
    t = np.arange(old.shape[1]) * cfg.log_every
    k, a = np.asarray(theory.k), np.asarray(theory.alpha)
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), sharey=True)
    panels = [(a == 1.0, "k", "EWC (α = 1)"), (k == 0.0, "α", "Replay (k = 0)")]
    for ax, (sel, name, title) in zip(axes, panels):
        for g in np.flatnonzero(sel):
            value = k[g] if name == "k" else a[g]
            line, = ax.plot(t, old[g], label=f"{name} = {value:g}")
            ax.plot(t, new[g], "--", color=line.get_color())
            ax.plot(t, gd_trace.old_prob[g], ":", lw=1.5, color="k")
            ax.plot(t, gd_trace.new_prob[g], ":", lw=1.5, color="k")
            ax.plot([t[-1]], [float(theory.old_prob[g])], "<", color=line.get_color(), ms=8)
        ax.set_xlabel("CPT step t")
        ax.set_title(title + ": old (solid) / new (dashed) fact probability\n"
                     "black dotted: population-GD path; ◀: exact convergence point (old facts)", fontsize=10)
        ax.legend(fontsize=7)
    axes[0].set_ylabel(f"fact probability (mean of {cfg.num_seeds} seeds)")
    return _save(fig, out / "sweep_trajectories.png")


def plot_distance(cfg: SweepConfig, rows: list[dict], out: pathlib.Path):
    """Old-fact probability at convergence minus the naive value vs k, one line per α (theory and measured)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    naive = {r["alpha"]: r for r in rows if r["k"] == 0.0}
    base = naive.get(1.0, {}).get("old_prob_theory")
    for alpha in sorted({r["alpha"] for r in rows}):
        rs = sorted((r for r in rows if r["alpha"] == alpha), key=lambda r: r["k"])
        ks = [max(r["k"], 1e-3) for r in rs]
        ref = base if base is not None else rs[0]["old_prob_theory"]
        line, = ax.plot(ks, [r["old_prob_theory"] - ref for r in rs], "-", label=f"α = {alpha:g} theory")
        ax.errorbar(ks, [r["old_prob"] - ref for r in rs], yerr=[r["old_prob_se"] for r in rs], fmt="o",
                    color=line.get_color(), ms=4)
    ax.set(xscale="log", xlabel="EWC strength k (k = 0 drawn at 1e-3)",
           ylabel="P_old(convergence) − P_old(naive)",
           title="Convergence-point distance from naive vs k\n(lines: exact optimum; points: SGD mean ± s.e.)")
    ax.legend(fontsize=7)
    return _save(fig, out / "sweep_distance_vs_k.png")


def plot_amplitude(cfg: SweepConfig, rows: list[dict], out: pathlib.Path):
    """Probe-column fluctuation tr Cov(y_s) at the last step vs α, measured and predicted, per k."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k in sorted({r["k"] for r in rows}):
        rs = sorted((r for r in rows if r["k"] == k), key=lambda r: r["alpha"])
        line, = ax.plot([r["alpha"] for r in rs], [r["probe_var"] for r in rs], "o", label=f"k = {k:g} measured")
        ax.plot([r["alpha"] for r in rs], [r["probe_var_theory"] for r in rs], "-", color=line.get_color())
    ax.set(xlabel="new-data fraction α", ylabel=f"tr Cov(y_s) over {cfg.num_seeds} seeds at t = {cfg.steps}",
           title="Fluctuation amplitude of the probe column vs α\n(lines: linear theory, valid near the optimum)")
    ax.legend(fontsize=7)
    return _save(fig, out / "sweep_amplitude_vs_alpha.png")


def _save(fig, path: pathlib.Path) -> pathlib.Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """Runs the sweep described by ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    return command(parse(sys.argv[1:] if argv is None else argv))


def command(args: Config) -> int:
    """Runs the sweep: ``cfka sweep``'s run function."""
    import jax
    import matplotlib

    matplotlib.use("Agg")
    from cfka_jax.theory.cpt_sweep import summarise, write_csv

    from cfka_jax.parallel.mesh import mesh_of

    cfg = args.sweep()
    mesh = mesh_of(cfg.mesh)  # a mesh larger than the machine is refused before --out is written
    out = pathlib.Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    jsonio.write_json_atomic(out / "config.json", dataclasses.asdict(cfg), indent=2)
    with jax.enable_x64(cfg.x64):
        worlds, theory, final_Y, trace, gd_trace = run_sweep(cfg, mesh)
        rows = summarise(worlds, cfg.spec(), theory, final_Y, trace)
    write_csv(rows, out / "sweep.csv")
    for plot in (plot_distance, plot_amplitude):
        plot(cfg, rows, out)
    plot_trajectories(cfg, theory, trace, gd_trace, out)
    print(f"{cfg.spec().num_runs} runs; results in {out}/sweep.csv and {out}/sweep_*.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
