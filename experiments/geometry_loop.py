"""``cfka geometry loop --world ood``: the self-reinforcing loop of the token-force paper's Sec. 6 (spec §7).

The paper's account: CPT on a new domain lowers the readout transmission R (§7.1) of the fine-tuning tasks, and a
lower R means less plasticity in SFT (§7.3). If that is a mechanism, alternating CPT on the domain and SFT on a task
should compound. This study measures it on the out-of-domain world of ``geometry_transmission_ood``
(``geometry/ood.py``; the same PT recipe, so the same base model per seed). Per seed, with ``K`` rounds and a block
of ``b`` domain steps:

* **base**: PT on the mixture of the out-of-domain tasks (as the transmission study).
* **loop** line: round k (1 … K) = CPT for one block of ``b`` domain steps from the previous round's *SFT'd* model
  (round 1 from the base model), then SFT on the task D (``--task``, default ``longform``: the one task the base
  model knows in the transmission record; with ``--ident-rule map --ident-classes 3`` the base model knows
  ``ident_a`` and ``ident_b`` too, as in ``cfka geometry transmission --world ood`` with the same options) from that
  CPT model. So the chain is base → CPT → SFT → CPT → SFT …
* **cpt_only** line (the control): the same blocks chained without the SFT in between (block k starts from block
  k − 1's CPT model), the same total domain steps ``k · b`` at round k and the same batches per block; at every
  block boundary the same measurements, and an SFT from the boundary model as a side branch that is not carried on.
  Round 1 is shared (both lines' first block starts from the base model), so it is computed once.

Every CPT block is a fresh AdamW (warm-up 5 % then constant lr, no weight decay: the transmission study's CPT
schedule) whose batches are drawn from ``Random(1000 · seed + k)``; every SFT is ``plasticity.Trainer`` (AdamW,
warm-up then cosine to 0) on D's ``sft`` rows, as in the transmission study's sweep.

Measured at round k of each line, on the model before the SFT (the CPT model): ``R_mean`` on D's probe (``r``) and
the same divided by the readout size ``s(W) = ‖W − 1μᵀ‖_F² / (V − 1)`` (``r_norm``), R on the in-domain ``bio``
probe, D's probe accuracy (``acc_before``); of the SFT: ``l0`` = L_probe(step 0), ``l_early`` (the probe loss
after the first quarter of the SFT steps: how fast it learns, where ``l_final`` may sit at the floor), ``l_final``,
``l_min``, ``plast = l0 − l_final`` (§7.3) and ``plast_min``; after it: the probe accuracy (``acc_after``) and R again
(``r_after``). Round 0 is the base model (the same row in both lines; its SFT is a side branch). Fingerprints of
the parameters each block started from (``fp_start``), the CPT model (``fp_cpt``) and the SFT'd model (``fp_sft``)
make the chain checkable: in the loop line ``fp_start(k + 1) = fp_sft(k)``, in the control ``fp_start(k + 1) =
fp_cpt(k)``.

Seeds run one after the other into ``<out>/seed<k>/`` (``geometry_record.run_study``: a finished seed's
``loop_rows.json`` for the same config and regime is read back, not rerun); with ``--record NAME`` the produced
record ``token-force/NAME`` is rewritten after every finished seed, one row per (seed, round, line). ``loop.json``,
``loop.md`` and ``loop.png`` in ``--out`` summarise the finished seeds::

    cfka geometry loop --world ood --scale small --rounds 4 --seeds 0,1,2 --out runs/geometry/loop-ood \\
        --record loop_ood
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.experiments import geometry_record
from cfka_jax.experiments.geometry_common import markdown_table, save_plot, write_markdown
from cfka_jax.experiments.geometry_transmission_ood import (
    OOD_SCALES,
    OODScale,
    _pure,
    _train,
    ident_regime,
    study_scale,
)
from cfka_jax.geometry.ood import TASKS, make_world
from cfka_jax.trees import flatten_mapping

LINES = ("loop", "cpt_only")
BLOCK_STEPS = {"smoke": 4, "small": 300}
"""Domain steps per CPT block by scale (``--block-steps 0``): at ``small`` 4 rounds × 300 = the transmission
study's 1,200 CPT steps."""


@dataclasses.dataclass(frozen=True)
class LoopStudyConfig:
    """``rounds``: CPT → SFT rounds (≥ 2: one round cannot compound); ``block_steps``: domain steps per CPT block
    (0: the scale's, :data:`BLOCK_STEPS`); ``task``: the SFT task D, one of the world's out-of-domain tasks (its
    probe is where R and the plasticity are read); ``world``: ``ood`` only (``geometry/ood.py``); ``seeds``: the
    seeds (empty: the scale's); ``record``: the produced record ``token-force/<record>`` under ``results``,
    rewritten after every finished seed (:func:`record_rows`); ``ident_rule`` / ``ident_classes``: the world's
    identification tasks as in ``cfka geometry transmission --world ood``
    (``geometry_transmission_ood.study_scale``; ``map`` and 3: the tasks the base model knows)."""

    scale: str = "smoke"
    world: str = "ood"
    rounds: int = 4
    block_steps: int = 0
    task: str = "longform"
    sft_lr: float = 1e-3
    ident_rule: str = "permute"
    ident_classes: int = 0
    seeds: tuple[int, ...] = ()
    out: str = "runs/geometry/loop"
    record: str | None = None
    results: str = "results"

    def __post_init__(self):
        if self.world != "ood":
            raise ValueError(f"--world: the loop study runs on the ood world only, got {self.world!r}")
        if self.scale not in OOD_SCALES:
            raise ValueError(f"--scale must be one of {sorted(OOD_SCALES)}, got {self.scale!r}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 2:
            raise ValueError(f"--rounds must be an integer >= 2 (a loop needs two rounds to compound), "
                             f"got {self.rounds!r}")
        if isinstance(self.block_steps, bool) or not isinstance(self.block_steps, int) or self.block_steps < 0:
            raise ValueError(f"--block-steps must be an integer >= 0 (0: the scale's), got {self.block_steps!r}")
        if self.task not in TASKS:
            raise ValueError(f"--task must be one of {TASKS}, got {self.task!r}")
        if any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be non-negative integers, got {self.seeds}")
        geometry_record.check_seeds(self.seeds)
        geometry_record.check_record_name(self.record)
        study_scale(self.scale, self.ident_rule, self.ident_classes)

    @property
    def block(self) -> int:
        """Domain steps per CPT block."""
        return self.block_steps or BLOCK_STEPS[self.scale]

    @property
    def study(self) -> OODScale:
        """The scale with the world's identification tasks set (:func:`study_scale`)."""
        return study_scale(self.scale, self.ident_rule, self.ident_classes)


def params_fingerprint(params) -> str:
    """``sha256:<16 hex>`` of a parameter tree (``nnx.State`` or nested dict): every leaf's path, dtype, shape and
    bytes, in path order. Equal fingerprints mean the same parameters bit for bit."""
    h = hashlib.sha256()
    for path, leaf in sorted(flatten_mapping(_pure(params)).items(), key=lambda kv: tuple(map(str, kv[0]))):
        a = np.ascontiguousarray(leaf)
        h.update(f"{'/'.join(map(str, path))}|{a.dtype}|{a.shape}|".encode())
        h.update(a.tobytes())
    return "sha256:" + h.hexdigest()[:16]


class BlockTrainer:
    """CPT blocks on one corpus: one jitted step (compiled once) and a fresh AdamW state per block (warm-up 5 %,
    then constant ``lr``; no weight decay), batches of ``batch`` rows drawn without replacement from
    ``Random(seed)``."""

    def __init__(self, graphdef, rest, split, *, steps: int, lr: float, batch: int):
        from cfka_jax.train.optim import OptimConfig, make_optimizer
        from cfka_jax.train.step import make_train_step

        self.tx = make_optimizer(OptimConfig(peak_lr=lr, min_lr=lr, warmup_steps=max(1, steps // 20),
                                             total_steps=max(steps, 1), weight_decay=0.0))
        self.step, self.split, self.steps, self.batch = make_train_step(graphdef, rest, self.tx), split, steps, batch

    def run(self, params, seed: int) -> tuple[dict, str]:
        """(the parameters after one block from ``params``, the fingerprint of ``params``: what the block started
        from). ``params`` is copied, not consumed."""
        from cfka_jax.train.loop import LoopConfig, run_loop as train_loop
        from cfka_jax.train.step import init_state

        start = params_fingerprint(params)
        rng = np.random.default_rng(seed)
        n = min(self.batch, len(self.split))

        def batch_at(t: int) -> dict:
            idx = rng.choice(len(self.split), size=n, replace=False)
            return {"tokens": jnp.asarray(self.split.tokens[idx]), "target_mask": jnp.asarray(self.split.mask[idx])}

        state = init_state(jax.tree.map(jnp.copy, params), self.tx)
        state = train_loop(state, self.step, batch_at, cfg=LoopConfig(steps=self.steps, log_every=max(self.steps, 1),
                                                                      progress=False)).state
        return _pure(state.params), start


class Measure:
    """R, R / readout size and accuracy on the task's probe (and R on ``bio``), and the SFT on the task (jitted
    once per seed)."""

    def __init__(self, graphdef, rest, cfg, world, task: str, s: OODScale, sft_lr: float):
        from cfka_jax.geometry.net import Net
        from cfka_jax.geometry.plasticity import SFTConfig, Trainer
        from cfka_jax.geometry.readout import transmission_tokens

        self.graphdef, self.rest, self.task = graphdef, rest, task
        self.net = Net(graphdef, rest, cfg)
        self.probes = {task: world.tasks[task]["probe"].batches(64), "bio": world.bio.batches(64)}
        self.train = world.tasks[task]["sft"].batches(s.batch)
        self.r_fn = jax.jit(lambda p, b: transmission_tokens(p, b, net=self.net))
        self.logits = jax.jit(lambda p, t, m: self.net.model(p)(t, attention_mask_BT=m).logits)
        self.trainer = Trainer(SFTConfig(steps=s.sft_steps, lr=sft_lr))

    def state(self, params) -> dict:
        """``r``, ``r_norm`` (R / readout size), ``readout_size``, ``r_bio``, ``r_bio_norm`` and ``acc`` (D's
        probe accuracy) of ``params``."""
        from cfka_jax.geometry.plasticity import probe_accuracy
        from cfka_jax.geometry.readout import probe_transmission, readout_matrix, readout_size

        size = readout_size(readout_matrix(params, self.net.cfg))
        r = {p: probe_transmission(params, b, net=self.net, fn=self.r_fn)["R_mean"] for p, b in self.probes.items()}
        return {"r": r[self.task], "r_norm": r[self.task] / size, "readout_size": size, "r_bio": r["bio"],
                "r_bio_norm": r["bio"] / size, "acc": probe_accuracy(self.logits, params, self.probes[self.task])}

    def sft(self, params) -> tuple[dict, dict]:
        """(the SFT curve on D from ``params``: ``L0``, ``L_final``, ``L_min``, ``plast``, ``plast_min``,
        ``curve``; the SFT'd parameters)."""
        curve, after = self.trainer.fit(self.graphdef, self.rest, params, self.train, self.probes[self.task])
        return curve, _pure(after)


def _cell(m: Measure, params, start: str | None) -> dict:
    """Everything a row of one (round, line) holds, from the model ``params`` before the SFT."""
    before = m.state(params)
    curve, after = m.sft(params)
    post = m.state(after)
    return {"before": before, "curve": curve, "after": {k: post[k] for k in ("r", "r_norm", "acc")},
            "fp_start": start, "fp_cpt": params_fingerprint(params), "fp_sft": params_fingerprint(after),
            "_sft_params": after}


def run_seed(cfg: LoopStudyConfig, seed: int, log=print) -> dict:
    """One seed: PT, then both lines' rounds; ``{"cells": {(line, round): cell}, "base_acc", "chance", "params",
    "seconds"}`` (a cell: :func:`_cell`, without the parameters)."""
    from cfka_jax.geometry.plasticity import knows_task, position_chance

    s = cfg.study
    t0 = time.time()
    world = make_world(dataclasses.replace(s.world, seed=seed))
    model = dataclasses.replace(s.model, seed=seed).build(world.vocab_size)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    base = _train(graphdef, rest, params, world.pt_mix, steps=s.pt_steps, lr=s.pt_lr, min_lr=s.pt_lr / 10,
                  batch=s.batch, seed=seed)
    m = Measure(graphdef, rest, model.cfg, world, cfg.task, s, cfg.sft_lr)
    probe = world.tasks[cfg.task]["probe"]
    chance = position_chance(probe.tokens, probe.mask)
    cells = {}
    cells[("loop", 0)] = cells[("cpt_only", 0)] = _cell(m, base, None)
    base_acc = cells[("loop", 0)]["before"]["acc"]
    log(f"[loop] seed {seed}: PT done in {time.time() - t0:.0f} s; {cfg.task} probe accuracy {base_acc:.3f} "
        f"(chance {chance:.3f}{'' if knows_task(base_acc, chance) else '; the base model does NOT know the task'})")
    blocks = BlockTrainer(graphdef, rest, world.cpt, steps=cfg.block, lr=s.cpt_lr, batch=s.batch)
    carry = {"loop": base, "cpt_only": base}
    for k in range(1, cfg.rounds + 1):
        block_seed = 1000 * seed + k
        if k == 1:  # both lines start from the base model with the same batches: one block, one cell
            cpt, start = blocks.run(base, block_seed)
            cells[("loop", 1)] = cells[("cpt_only", 1)] = _cell(m, cpt, start)
            carry = {"loop": cells[("loop", 1)]["_sft_params"], "cpt_only": cpt}
        else:
            for line in LINES:
                cpt, start = blocks.run(carry[line], block_seed)
                cells[(line, k)] = _cell(m, cpt, start)
                carry[line] = cells[(line, k)]["_sft_params"] if line == "loop" else cpt
        log(f"[loop] seed {seed} round {k}: " + "; ".join(
            f"{line} R/size {cells[(line, k)]['before']['r_norm']:.3f}, plast {cells[(line, k)]['curve']['plast']:.3f}"
            for line in LINES) + f" ({time.time() - t0:.0f} s)")
    return {"cells": {key: {k: v for k, v in c.items() if k != "_sft_params"} for key, c in cells.items()},
            "base_acc": base_acc, "chance": chance, "seconds": time.time() - t0,
            "params": int(sum(x.size for x in jax.tree.leaves(base)))}


_sig = geometry_record.significant


def record_rows(seed: int, run: dict, task: str, block: int) -> list[dict]:
    """One row per (round, line) of a finished seed (round 0 = the base model, the same in both lines): the CPT
    steps so far, R / R over readout size / readout size / R on ``bio`` / D's accuracy before the SFT, the SFT
    outcome (``l0``, ``l_early``, ``l_final``, ``l_min``, ``plast``, ``plast_min``), D's accuracy and R after it,
    D's base accuracy and position-only chance (the premise), and the fingerprints of the chain."""
    rows = []
    for (line, k), c in sorted(run["cells"].items(), key=lambda kv: (LINES.index(kv[0][0]), kv[0][1])):
        b, cur, a = c["before"], c["curve"], c["after"]
        rows.append({"seed": seed, "line": line, "round": k, "task": task, "cpt_steps": k * block,
                     "r": _sig(b["r"]), "r_norm": _sig(b["r_norm"]), "readout_size": _sig(b["readout_size"]),
                     "r_bio": _sig(b["r_bio"]), "r_bio_norm": _sig(b["r_bio_norm"]), "acc_before": _sig(b["acc"]),
                     **{k2: _sig(cur[v]) for k2, v in (("l0", "L0"), ("l_final", "L_final"), ("l_min", "L_min"),
                                                      ("plast", "plast"), ("plast_min", "plast_min"))},
                     "l_early": _sig(cur["curve"][1]),
                     "acc_after": _sig(a["acc"]), "r_after": _sig(a["r"]), "r_after_norm": _sig(a["r_norm"]),
                     "base_acc": _sig(run["base_acc"]), "chance": _sig(run["chance"]),
                     "fp_start": c["fp_start"], "fp_cpt": c["fp_cpt"], "fp_sft": c["fp_sft"]})
    return rows


def regime(cfg: LoopStudyConfig) -> dict:
    """What a seed runs, resolved from the scale (the record's regime; a seed finished under another regime runs
    again)."""
    s = cfg.study
    w = make_world(s.world)
    params = sum(x.size for x in jax.tree.leaves(nnx.state(nnx.eval_shape(lambda: s.model.build(w.vocab_size)),
                                                           nnx.Param)))
    return {"model": f"Qwen2 port (tied head), d = {s.model.hidden}, {s.model.layers} blocks",
            "params": f"{params:,}",
            "world": f"geometry/ood.py: out-of-domain tasks {', '.join(TASKS)} (PT only) and a fact domain (CPT; its "
                     f"probe is bio); SFT task {cfg.task}; seed k draws the world, the initialisation and the batches",
            "pt_quality": "rows' base_acc: the task's probe accuracy (greedy, supervised tokens) at the base model, "
                          "against its position-only chance (chance)",
            "dose": f"PT {s.pt_steps} AdamW steps on the tasks (lr {s.pt_lr:g}, cosine to lr/10); {cfg.rounds} rounds "
                    f"of a CPT block of {cfg.block} domain steps (fresh AdamW, lr {s.cpt_lr:g}, 5 % warm-up then "
                    f"constant, batch {s.batch}) then SFT {s.sft_steps} AdamW steps (lr {cfg.sft_lr:g}) on the "
                    f"task's sft rows",
            "lines": "loop: round k's CPT starts from round k − 1's SFT'd model (round 1 from the base model); "
                     "cpt_only: the same blocks and batches chained without SFT, the SFT at each boundary a side "
                     "branch; round 0 = the base model in both lines",
            "normalisation": "r_norm = r / readout_size, readout_size = ‖W − 1μᵀ‖_F² / (V − 1) of the readout the "
                             "row's R was measured with (geometry/readout.py)",
            # the default run's regime is the committed record's (and finished seeds' rows files still match it)
            **({"ident_tasks": ident_regime(s)} if (cfg.ident_rule, cfg.ident_classes) != ("permute", 0) else {})}


def run_loop(cfg: LoopStudyConfig) -> dict:
    """The study of ``cfg``: every seed (finished ones read back), the record after each, then the summary."""
    seeds = tuple(cfg.seeds) or OOD_SCALES[cfg.scale].seeds
    run_cfg = dataclasses.replace(cfg, seeds=seeds)
    reg = regime(cfg)

    def one(seed: int, out: pathlib.Path) -> list[dict]:
        run = run_seed(cfg, seed)
        out.mkdir(parents=True, exist_ok=True)
        jsonio.write_json_atomic(out / "loop_curves.json", {
            "seed": seed, "seconds": run["seconds"],
            "curves": [{"line": line, "round": k, "curve": c["curve"]["curve"]} for (line, k), c in
                       sorted(run["cells"].items())]}, allow_nan=False, indent=1)
        return record_rows(seed, run, cfg.task, cfg.block)

    done = geometry_record.run_study("loop", run_cfg, one, reg, pt_per_seed=True)
    rows = [row for d in done for row in d["rows"]]
    result = {"config": dataclasses.asdict(run_cfg), "regime": reg, "rows": rows,
              "seconds": {d["seed"]: {"wall_s": d.get("wall_s"), "cpu_s": d.get("cpu_s")} for d in done}}
    out = pathlib.Path(cfg.out)
    jsonio.write_json_atomic(out / "loop.json", result, allow_nan=False, indent=1)
    _markdown(out, rows, cfg)
    _plot(out, rows, cfg)
    return result


COLUMNS = ("cpt_steps", "r", "r_norm", "r_bio", "acc_before", "l0", "l_early", "l_final", "plast", "acc_after",
           "r_after_norm")


def _means(rows: list[dict], line: str, k: int, key: str) -> float:
    vals = [r[key] for r in rows if r["line"] == line and r["round"] == k and r[key] is not None]
    return float(np.mean(vals)) if vals else float("nan")


def _markdown(out: pathlib.Path, rows: list[dict], cfg: LoopStudyConfig) -> None:
    rounds = sorted({r["round"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    body = (f"Task {cfg.task}, seeds {', '.join(map(str, seeds))}; means over seeds. R before the round's SFT, "
            "plast = L_probe(step 0) − L_probe(final) of the SFT (cpt_only: a side branch).\n\n")
    body += markdown_table(["line", "round", *COLUMNS],
                           [[line, k, *(_means(rows, line, k, c) for c in COLUMNS)] for line in LINES for k in rounds])
    write_markdown(out, "loop", "The self-reinforcing loop: CPT ⇄ SFT rounds vs CPT alone", body)


def _plot(out: pathlib.Path, rows: list[dict], cfg: LoopStudyConfig) -> None:
    import matplotlib.pyplot as plt

    rounds = sorted({r["round"] for r in rows})
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
    for ax, key, label in zip(axes, ("r_norm", "plast", "l0"), ("R / readout size before SFT", "plasticity",
                                                                   "L0 (probe loss before SFT)")):
        for i, line in enumerate(LINES):
            for seed in sorted({r["seed"] for r in rows}):
                vals = [next((r[key] for r in rows if r["line"] == line and r["round"] == k and r["seed"] == seed),
                             None) for k in rounds]
                ax.plot(rounds, [np.nan if v is None else v for v in vals], "o-", ms=3, color=f"C{i}", alpha=0.6,
                        label=line if seed == min(r["seed"] for r in rows) else None)
        ax.set(xlabel=f"round ({cfg.block} CPT steps each)", ylabel=label)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"task {cfg.task}: loop (CPT → SFT) vs CPT only", fontsize=9)
    save_plot(fig, out, "loop")
