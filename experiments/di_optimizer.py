"""Where the Diversity Index predicts attention: the theory model under the optimiser and init LMs are trained with.

The DI law (spec §2.6) is derived for per-block *gradient flow* from a *small* init: then the conserved
c_s = z_s² − ‖y_{·s}‖² (``check_conservation``) stays ≈ 0 and the converged |z_s| = (η_Z/η_Y)^{1/4} ‖ṽ_s‖^{1/2}, so
Pearson(DI, |z|) ≈ −1 up to how well the balance holds (``check_diversity``: −0.88 on the multi-relation world).
Trained LMs break both premises: AdamW rescales every coordinate (no conservation law), weight decay pulls the
balance elsewhere, and the init is not small. This study keeps the theory's own model and world and changes one
premise at a time:

* ``gd`` — full-batch per-block GD at (η_Y, η_Z) = (1, 0.04), init scale ``init`` (1e-3: the lemma's setting);
* ``adam`` / ``adamw`` — the same loss with optax Adam / AdamW (weight decay ``wd``) at learning rate ``lr``;
* the factorised model (``raw``: Z = W_Q W_Kᵀ-style two-matrix parametrisation of ``theory/model.RawParams``, the form
  real attention has) under GD and Adam.

For every cell: Pearson and Spearman of DI (centred, the project default; and the quoted un-centred form) against the
learned |z_s| over the subject / relation tokens, the final posterior KL (did it converge?) and the balance
residual median |c_s| / z_s². Float64 (a theory check; switched on in ``main``).

    python -m cfka_jax.experiments.di_optimizer --out runs/di_optimizer
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import optax

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.theory.diversity import diversity_index, pearson, spearman
from cfka_jax.theory.model import YZParams, init_raw, init_yz, raw_loss, raw_to_yz, yz_loss
from cfka_jax.theory.optimum import posterior_kl, query_attention
from cfka_jax.theory.world import MULTI_RELATION, FactWorld, full_batch, make_world

ETA_Y, ETA_Z = 1.0, 0.04


@dataclasses.dataclass(frozen=True)
class Cell:
    """One training setting of the theory model."""

    name: str
    optimiser: str  # "gd" | "adam" | "adamw"
    init: float  # init scale of (Y, Z) (or of the raw factors)
    lr: float = 0.0  # Adam / AdamW learning rate (GD uses ETA_Y, ETA_Z)
    wd: float = 0.0  # AdamW weight decay
    raw: bool = False  # the factorised parametrisation

    def __post_init__(self):
        if self.optimiser not in ("gd", "adam", "adamw"):
            raise ValueError(f"optimiser {self.optimiser!r}: choose gd, adam or adamw")
        if not self.init > 0 or ((self.optimiser != "gd" or self.raw) and not self.lr > 0):
            raise ValueError(f"cell {self.name}: init and lr must be > 0")


CELLS = (
    Cell("gd, small init (the lemma)", "gd", 1e-3),
    Cell("gd, init 0.1", "gd", 0.1),
    Cell("gd, init 0.5", "gd", 0.5),
    Cell("adam, small init", "adam", 1e-3, lr=1e-2),
    Cell("adam, init 0.1", "adam", 0.1, lr=1e-2),
    Cell("adamw wd 0.1, small init", "adamw", 1e-3, lr=1e-2, wd=0.1),
    Cell("adamw wd 0.1, init 0.1", "adamw", 0.1, lr=1e-2, wd=0.1),
    Cell("raw factors, gd, init 0.3", "gd", 0.3, lr=0.1, raw=True),
    Cell("raw factors, adam, init 0.3", "adam", 0.3, lr=1e-2, raw=True),
)


def _optimiser(cell: Cell):
    if cell.optimiser == "gd" and cell.raw:  # one rate for every factor (E is shared by the value and key paths)
        return optax.sgd(cell.lr)
    if cell.optimiser == "gd":  # per-block rates: Y at η_Y, Z at η_Z
        return optax.multi_transform({"y": optax.sgd(ETA_Y), "z": optax.sgd(ETA_Z)}, YZParams("y", "z"))
    if cell.optimiser == "adam":
        return optax.adam(cell.lr)
    return optax.adamw(cell.lr, weight_decay=cell.wd)


def train(cell: Cell, world: FactWorld, steps: int, seed: int = 0):
    """Full-batch training of one cell from the init of ``seed``; returns the final (Y, Z) and the posterior KL."""
    tokens, targets = full_batch(world)
    key = jax.random.key(seed)
    if cell.raw:
        params = init_raw(key, world.vocab_size, width=world.vocab_size, head_dim=world.vocab_size, scale=cell.init)
        loss = lambda p: raw_loss(p, tokens, targets, world.objects)  # noqa: E731
    else:
        params = init_yz(key, world.vocab_size, scale=cell.init)
        loss = lambda p: yz_loss(p, tokens, targets, world.objects)  # noqa: E731
    tx = _optimiser(cell)

    def step(carry, _):
        p, s = carry
        g = jax.grad(loss)(p)
        u, s = tx.update(g, s, p)
        return (optax.apply_updates(p, u), s), None

    with jax.numpy_dtype_promotion("standard"):  # optax's bias correction mixes Python floats with its int32 count
        (params, _), _ = jax.jit(lambda c: jax.lax.scan(step, c, None, length=steps))((params, tx.init(params)))
    yz = raw_to_yz(params) if cell.raw else params
    return yz, float(posterior_kl(yz, world))


def measure(cell: Cell, world: FactWorld, steps: int) -> dict:
    yz, kl = train(cell, world, steps)
    nx = world.context_tokens.shape[0]
    att = jnp.abs(query_attention(yz.Z, world))[:nx]
    di = diversity_index(world, ETA_Y, ETA_Z)[:nx]
    di_q = diversity_index(world, ETA_Y, ETA_Z, exponent=0.5, centre=False)[:nx]
    return {"cell": cell.name, **dataclasses.asdict(cell), "steps": steps, "final_kl": kl,
            "pearson": float(pearson(di, att)), "spearman": float(spearman(di, att)),
            "pearson_quoted": float(pearson(di_q, att)), "spearman_quoted": float(spearman(di_q, att)),
            "attention_cv": float(jnp.std(att) / jnp.mean(att))}


def table(rows: list[dict]) -> str:
    head = "| cell | steps | final KL | Pearson (centred DI) | Spearman | Pearson (quoted DI) | Spearman | CV of |z| |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['cell']} | {r['steps']} | {r['final_kl']:.1e} | {r['pearson']:+.3f} | {r['spearman']:+.3f} "
                     f"| {r['pearson_quoted']:+.3f} | {r['spearman_quoted']:+.3f} | {r['attention_cv']:.2f} |")
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Config:
    """Where the Diversity Index predicts attention: the theory model under the optimiser and init LMs are trained
    with."""

    out: str = ""
    """output folder (di_optimizer.json)"""
    steps: int = 60_000
    """full-batch steps per cell (the lemma uses 60000)"""
    only: tuple[int, ...] = ()
    """comma-separated cell indices (default: all)"""

    def __post_init__(self):
        if not self.out:
            raise ValueError("--out: an output folder is required")
        if self.steps < 1:
            raise ValueError(f"--steps must be ≥ 1, got {self.steps}")
        bad = [i for i in self.only if not 0 <= i < len(CELLS)]
        if bad:
            raise ValueError(f"--only {','.join(map(str, bad))}: no such cell; the cells are 0 to {len(CELLS) - 1}")

    def cells(self) -> tuple[Cell, ...]:
        return tuple(CELLS[i] for i in self.only) if self.only else CELLS


FLAGS = Flags(Config, prog="python -m cfka_jax.experiments.di_optimizer", required=("out",),
              metavars={"out": "DIR", "only": "I,..."})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def command(cfg: Config) -> int:
    """Trains the cells, writes ``<out>/di_optimizer.json`` and prints the table (float64: an entry point)."""
    jax.config.update("jax_enable_x64", True)  # an entry point: the theory check runs in float64
    world = make_world(MULTI_RELATION)
    rows = [measure(c, world, cfg.steps) for c in cfg.cells()]
    out = pathlib.Path(cfg.out)
    jsonio.write_json_atomic(out / "di_optimizer.json", {"rows": rows, "eta": [ETA_Y, ETA_Z]}, indent=1)
    print(table(rows))
    print(json.dumps({"cells": len(rows), "best_pearson": min(r["pearson"] for r in rows)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
