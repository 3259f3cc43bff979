"""The conservation invariants of a port over a run's checkpoints (``cfka_jax/lm_theory/invariants.py``).

    cfka invariants RUN_DIR [--out DIR] [--cache-dir DIR]
    (or python -m cfka_jax.experiments.invariants RUN_DIR)

RUN_DIR is a full-update Biography run folder of ``cfka pt`` / ``cfka cpt`` (``config.json`` names the preset,
architecture and seed; LoRA checkpoints hold other parameters and are refused). Every conserved family — head
rescalings (W_Q ↔ W_K per rotary plane, W_V ↔ W_O), norm ↔ projection rows, gated-MLP up ↔ down, and the Qwen3 /
OLMo-2 / Qwen3.5 / linear-attention families where they apply (``--arch`` of any registered family) — is evaluated at

* step 0: the initialisation of a PT run (``build_model`` with the run's seed), or the PT parameters a CPT run
  started from (its PT folder's ``params/``, when present);
* every checkpoint kept in ``RUN_DIR/checkpoints`` (a run keeps its newest ``keep_checkpoints``, 2 by default;
  a damaged one is an error naming its folder, never skipped, so no curve silently loses a point);
* the exported ``params/`` of a finished PT run.

All rates are 1: AdamW has one learning rate, and the unit-rate values are what weight decay drives
(dC/dt = −2λ C). Gradient flow with per-block rates would keep every family constant; AdamW and weight decay do
not, and the plot shows by how much each family moved: max |C(t) − C(0)| / max scale(0) per family.
Writes ``OUT/invariants.json`` and ``OUT/invariants.png`` (default OUT: ``RUN_DIR/invariants``).
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.data.pipeline import build_data
from cfka_jax.lm_theory.invariants import port_invariants, relative_drift
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.folder import RunFolder, RunFolderError
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
from cfka_jax.train.checkpoint import CheckpointDir, CheckpointUnreadable, restore
from cfka_jax.train.step import master_params


def _run_config(run: pathlib.Path) -> dict:
    stored = RunFolder(run).read_json("config.json")
    if stored is None or "run" not in stored or "preset" not in stored.get("run", {}):
        raise RunFolderError(f"{run} holds no Biography run (no config.json with a run spec)")
    preset = stored["run"]["preset"]
    if not isinstance(preset, str) or preset not in BIOGRAPHY:
        raise RunFolderError(f"{run / 'config.json'}: key 'run.preset' = {preset!r} is not a Biography preset "
                             f"(known: {', '.join(BIOGRAPHY)})")
    return stored["run"]


def _start_params(run: pathlib.Path, spec: dict, model):
    """(label, params) at step 0: a PT run's initialisation, or the PT parameters a CPT run started from."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    if "method" not in spec:
        return "init", master_params(params)
    pt_dir = pathlib.Path(spec.get("pt_dir") or run.parent / f"pt-{spec['preset']}-{spec['arch']}")
    folder = RunFolder(pt_dir)
    if not (folder.params_dir.is_dir() and (folder.path / "final.json").exists()):
        return None, None  # no finished PT run there: the CPT run's own snapshots only
    return "pt", folder.load_params(master_params(params))[0]  # damaged: one RunFolderError naming the folder


def snapshots(run: pathlib.Path, cache_dir: str | None = None) -> tuple[object, list[tuple[int, str, object]]]:
    """(the model's config, [(step, label, params)]) of every parameter snapshot of the run, in step order."""
    spec = _run_config(run)
    preset = BIOGRAPHY[spec["preset"]]
    bundle = build_data(preset.data_config(), cache_dir or spec.get("cache_dir", "runs/data-cache"))
    model = build_model(preset, spec.get("arch", "qwen"), len(bundle.tokenizer), int(spec.get("seed", 0)))
    abstract = master_params(nnx.split(model, nnx.Param, ...)[1])
    label, start = _start_params(run, spec, model)
    out = [] if start is None else [(0, label, start)]
    ckpts = CheckpointDir(run / "checkpoints")
    for step in ckpts.steps():
        try:
            params, _ = restore(ckpts.directory / str(step), abstract, under=("params",))
        except CheckpointUnreadable as err:  # a damaged checkpoint: one line naming it (cfka exits 2), nothing written
            raise RunFolderError(f"{err}; remove that folder to evaluate the run's other snapshots") from None
        out.append((step, "checkpoint", params))
    if (run / "params").is_dir():
        try:
            params, step = restore(run / "params", abstract)
        except CheckpointUnreadable as err:  # one line naming the folder (cfka exits 2)
            raise RunFolderError(f"{run}: the exported parameters are unreadable: {err}") from None
        out.append((step, "params", params))
    if len(out) < 2:
        raise RunFolderError(f"{run}: fewer than two parameter snapshots (start, checkpoints, params/)")
    return model.cfg, out


def drifts(cfg, snaps: list[tuple[int, str, object]]) -> dict:
    """Per family: the relative drift from the first snapshot at every snapshot, and the values' norms."""
    fn = jax.jit(port_invariants, static_argnums=(1,))
    inv = [fn(p, cfg) for _, _, p in snaps]
    rows = [{k: float(v) for k, v in relative_drift(inv[0], now).items()} for now in inv]
    norms = [{k: float(jnp.linalg.norm(v.value)) for k, v in now.items()} for now in inv]
    return {"steps": [s for s, _, _ in snaps], "labels": [lab for _, lab, _ in snaps],
            "relative_drift": {k: [r[k] for r in rows] for k in rows[0]},
            "value_norm": {k: [n[k] for n in norms] for k in norms[0]}}


def plot(res: dict, out: pathlib.Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    steps = np.asarray(res["steps"])
    for name, d in res["relative_drift"].items():
        (ln,) = a.plot(steps[1:], d[1:], "o-", label=name)
        b.plot(steps, res["value_norm"][name], "o-", color=ln.get_color(), label=name)
    a.set(xlabel="step", ylabel="max |C(t) − C(0)| / max scale(0)", yscale="log",
          title="drift of each conserved family (rates 1)")
    b.set(xlabel="step", ylabel="‖C(t)‖", yscale="log", title="size of each family's value")
    for ax in (a, b):
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out / "invariants.png", dpi=110)
    plt.close(fig)


@dataclasses.dataclass(frozen=True)
class Config:
    """``cfka invariants``'s configuration (module docstring)."""

    run_dir: str
    """a `cfka pt` or `cfka cpt` run folder"""
    out: str | None = None
    """output folder (default RUN_DIR/invariants)"""
    cache_dir: str | None = None
    """data cache (default: the run's)"""


FLAGS = Flags(Config, prog="cfka invariants", description=__doc__.split("\n\n")[0], positional=("run_dir",),
              metavars={"run_dir": "RUN_DIR", "out": "DIR", "cache_dir": "DIR"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def parse(argv: list[str] | None = None) -> Config:
    return FLAGS.parse(argv)


def main(argv: list[str] | None = None) -> int:
    return command(parse(argv))


def command(a: Config) -> int:
    """Evaluates, writes and plots the invariants: ``cfka invariants``'s run function."""
    run = pathlib.Path(a.run_dir)
    out = pathlib.Path(a.out) if a.out else run / "invariants"
    cfg, snaps = snapshots(run, a.cache_dir)
    res = drifts(cfg, snaps)
    out.mkdir(parents=True, exist_ok=True)
    jsonio.write_json_atomic(out / "invariants.json", res, indent=1)
    plot(res, out, f"{run.name}: {type(cfg).__name__}, {cfg.num_hidden_layers} layers")
    last = {k: v[-1] for k, v in res["relative_drift"].items()}
    print("relative drift at the last snapshot: " + ", ".join(f"{k} {v:.3g}" for k, v in sorted(last.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
