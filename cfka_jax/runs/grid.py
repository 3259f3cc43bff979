"""Run grids of Biography CPT in ONE jitted program: members differ in seed, schedule, replay share α and EWC λ.

    grid = GridSpec(CPTSpec(preset="small", method="replay-all + ewc", out="runs/grid"),
                    grid_axes("lr=1e-3,3e-4;alpha=0.5,0.8;seeds=0,1"))
    results = run_grid(grid)            # one RunResult per member, in grid order (runs/grid_spec.py)

Member i is the lone run ``continual(grid.member_spec(i))`` (``runs/biography.py``) computed inside one program
(``train/ensemble.make_grid_step``): the same PT parameters, the same documents (its own α mixture,
``runs/methods.cpt_documents``), the same batches (``EpochBatcher`` seeded with seed + 1), the same AdamW schedule
(its numbers traced, read from the member's optimiser state), the same EWC penalty (one Fisher and anchor shared by
every member, its λ per member), the same update mode (LoRA adapters seeded by its seed). It matches the lone run
to float32 rounding (``tests/runs/test_grid.py``). With several devices and ``vmap`` the members are split over a
``("seed",)`` mesh axis (``train/ensemble.member_sharding``); shared operands are replicated.

What it writes: ``<out>/config.json`` (the grid and its preset; another grid's folder is refused), per member
``<out>/<member>/`` as a lone run writes it (``config.json``, ``metrics.jsonl``, ``final.json``, ``params/``),
the stacked train state's checkpoints in ``<out>/checkpoints`` (a killed grid resumes from the newest), and
``<out>/grid.json``, the summary: each member's values, folder and final metrics, written atomically last.
Every member folder is checked before anything is built. A member whose step is not finite keeps its last good
state (the others go on) and gets no ``final.json``; the summary records it under ``nonfinite``.
"""

from __future__ import annotations

import time
import types
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.continual.ewc import EWCAnchor
from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.mixing import mix_replay
from cfka_jax.data.pipeline import DataBundle
from cfka_jax.jsonio import write_json_atomic
from cfka_jax.runs import biography as bio
from cfka_jax.runs import methods
from cfka_jax.runs.contexts import BiographyContext
from cfka_jax.runs.engine import RunResult, best_step
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.grid_spec import GridSpec
from cfka_jax.train import ensemble as ens
from cfka_jax.train.checkpoint import CheckpointDir
from cfka_jax.train.loop import LoopConfig, MetricsLog, run_loop
from cfka_jax.train.optim import masked_tx

SUMMARY = "grid.json"


def _step_mode(grid: GridSpec) -> str:
    if grid.mode != "auto":
        return grid.mode
    return "map" if jax.default_backend() == "cpu" else "vmap"


def check_grid(grid: GridSpec, pt: RunResult | None = None) -> list[RunFolder]:
    """Before anything is built or written: the grid folder holds this grid or nothing, each member folder holds
    its lone run or nothing, the PT result / folder is usable. Returns the member folders."""
    p = grid.base.scale
    RunFolder(grid.folder).check(grid.as_dict(), p)
    bio._check_pt(grid.base.pt_spec(), grid.base.pt_dir, p, pt)
    folders = []
    for i in range(len(grid)):
        spec = grid.member_spec(i)
        folder = RunFolder(spec.out)
        folder.check(spec, spec.scale)
        folders.append(folder)
    return folders


def _documents(spec, bundle: DataBundle) -> list:
    """A member's training documents: the new population alone, or mixed with real replay at the member's α by
    the rule ``runs/methods`` uses for a lone run (``reference_copies``, ``data/mixing.py``)."""
    new, replay = bundle.splits["cpt_train"].docs(), spec.resolved.replay
    if replay is None:
        return new
    real = bundle.splits[f"replay_{replay.removeprefix('replay-')}"].docs()
    return mix_replay(new, real, spec.alpha, rule="reference_copies")[0]


def _ewc(spec, bundle: DataBundle, model):
    """``(penalty, operands)`` of the base spec's EWC (the Fisher of the PT ``model`` on old data, anchored at
    it), from the method's Biography hooks (``runs/methods.cpt_hooks``, as a lone run gets them)."""
    ctx = BiographyContext(bundle, model, alpha=spec.alpha, replay=spec.replay, seed=spec.seed,
                           pt_folder=spec.pt_folder, replay_folder=spec.replay_folder, batch=spec.scale.cpt.batch)
    hooks = methods.cpt_hooks(spec.resolved, ctx)
    return hooks.penalty, hooks.penalty_args


def _members(grid: GridSpec, bundle: DataBundle, params, p):
    """(graphdef, rest, params_E, trainable mask, per-member float masks, docs per member, penalty, penalty args):
    every member's model from the PT parameters with its update mode, its documents, and the EWC operands (λ per
    member). With a ``freeze_layers`` axis the members' masks differ: the trainable mask is None and the masks are
    stacked (``train/ensemble.float_mask``); otherwise the one mask (or None) and no per-member masks."""
    models, docs, masks = [], [], []
    for i in range(len(grid)):
        spec = grid.member_spec(i)
        model = bio.build_model(p, spec.arch, len(bundle.tokenizer), spec.seed, spec.dtype)
        nnx.update(model, params)
        docs.append(_documents(spec, bundle))
        model, mask_of = methods.update_mode(spec.update_mode, p, model, spec.seed)
        models.append(model)
        masks.append(mask_of)
    penalty = args = None
    if grid.base.resolved.hooks.penalty is not None:  # EWC, the one penalty component
        pt_model = bio.build_model(p, grid.base.arch, len(bundle.tokenizer), grid.base.seed, grid.base.dtype)
        nnx.update(pt_model, params)
        penalty, one = _ewc(grid.base, bundle, pt_model)
        lams = [grid.member_spec(i).ewc_lambda for i in range(len(grid))]
        args = EWCAnchor(one.fisher, one.anchor, jnp.asarray(lams, jnp.float32))
        if grid.base.update == "lora":
            penalty = methods.lora_effective_penalty(models[0], penalty)
    graphdef, params_E, rest = ens.split_members(models)
    mask = member_masks = None
    if "freeze_layers" in dict(grid.axes):
        member_masks = ens.stack_members([ens.float_mask(m(ens.member(params_E, e))) for e, m in enumerate(masks)])
    elif masks[0] is not None:
        mask = masks[0](ens.member(params_E, 0))
    return graphdef, rest, jax.tree.map(jnp.copy, params_E), mask, member_masks, docs, penalty, args


def grid_step(graphdef, rest, opt, specs, mask, member_masks, penalty, mode: str):
    """(the one jitted step, the stacked initial optimiser numbers' ``tx_of``, numbers_E): each member's schedule
    (and mask) as traced numbers, the EWC operands' axes (Fisher and anchor shared, λ per member)."""
    schedules = ens.stack_members([ens.member_schedule(s.scale.cpt.optim()) for s in specs])
    numbers = (schedules,) if member_masks is None else (schedules, member_masks)

    def tx_of(n):
        tx = ens.grid_tx(opt, *n)
        return masked_tx(tx, mask) if mask is not None else tx

    in_axes = (0,) + (() if penalty is None else (EWCAnchor(None, None, 0),)) + (
        () if member_masks is None else (0,))
    step = ens.make_grid_step(graphdef, rest, ens.grid_tx(opt, *ens.member(numbers, 0)), in_axes=in_axes,
                              penalty=penalty, trainable=mask, mode=mode, member_masks=member_masks is not None)
    return step, tx_of, numbers


def _train_record(done: int, metrics: dict, e: int, seconds: float) -> dict:
    return {"kind": "train", "step": done, "time_s": seconds,
            **{k: float(np.asarray(v)[e]) for k, v in metrics.items()}}


def run_grid(grid: GridSpec, pt: RunResult | None = None, data: DataBundle | None = None, *,
             log: Callable[[str], None] = print) -> list[RunResult]:
    """Trains (or resumes, or reads back when finished) every member of ``grid`` in one program (module
    docstring) and returns one :class:`~cfka_jax.runs.engine.RunResult` per member; members that stopped on a
    non-finite step are left out of the list (named in the log and the summary)."""
    folders = check_grid(grid, pt)
    base, p = grid.base, grid.base.scale
    bundle = bio._data(p, base.cache_dir, data)
    pt_model = bio.build_model(p, base.arch, len(bundle.tokenizer), base.seed, base.dtype)
    params = bio._pt_params(base.pt_spec(), p, pt, pt_model, bundle)
    RunFolder(grid.folder).start(grid.as_dict(), p)
    specs = [grid.member_spec(i) for i in range(len(grid))]
    for spec, folder in zip(specs, folders):
        folder.start(spec, spec.scale)
    graphdef, rest, params_E, mask, member_masks, docs, penalty, args = _members(grid, bundle, params, p)
    mode, opt = _step_mode(grid), p.cpt.optim()
    sharding = ens.member_sharding(len(grid)) if mode == "vmap" else None
    step, tx_of, numbers = grid_step(graphdef, rest, opt, specs, mask, member_masks, penalty, mode)
    state = ens.shard_members(ens.init_grid(params_E, tx_of, numbers), sharding)
    extra = (() if args is None else (ens.replicate(args, sharding),)) + (
        () if member_masks is None else (ens.shard_members(member_masks, sharding),))
    batchers = [EpochBatcher(d, seq_len=bundle.config.seq_len, eos_id=bundle.eos_id, batch_size=p.cpt.batch,
                             seed=s.seed + 1, doc_mask=bundle.config.doc_mask) for d, s in zip(docs, specs)]
    fta = bio._fta_factory(bundle, {"Original": "pt_test", "Continual": "cpt_test"}, base.dtype, p.eval_batch)
    evaluate = fta(graphdef, rest)
    return _train_and_finish(grid, specs, folders, state, step, batchers, evaluate, extra, sharding, bundle, p,
                             graphdef, rest, log)


def _train_and_finish(grid, specs, folders, state, step, batchers, evaluate, extra, sharding, bundle, p, graphdef,
                      rest, log) -> list[RunResult]:
    """The loop (per-member records into each member's metrics log; stacked checkpoints) and the finish."""
    num, sched = len(grid), p.cpt
    ckpt = CheckpointDir(grid.folder / "checkpoints", keep=1)
    found = ckpt.restore_latest(state)
    start = 0 if found is None else int(found[1])
    state = state if found is None else ens.shard_members(type(state)(*found[0]), sharding)
    logs = [MetricsLog(f.path / "metrics.jsonl") for f in folders]
    for m in logs:
        m.truncate_after(start) if start else m.path.unlink(missing_ok=True)
    history = [m.records() for m in logs]
    nonfinite = np.zeros(num, np.int64)
    loop = LoopConfig(steps=sched.steps, log_every=max(1, min(10, sched.steps)), eval_every=sched.eval_every,
                      ckpt_every=sched.ckpt_every, progress=False)
    t0 = time.perf_counter()

    def record(e: int, r: dict):
        logs[e].write(r)
        history[e].append(r)

    def evaluate_all(done: int, params_E):
        for e in range(num):
            record(e, {"kind": "eval", "step": done,
                       **{k: float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()
                          for k, v in evaluate(ens.member(params_E, e), done).items()}})

    def on_metrics(done: int, metrics: dict):
        nonfinite[:] += ~np.asarray(metrics["finite"])
        if done % loop.log_every == 0 or done == loop.steps:
            for e in range(num):
                record(e, _train_record(done, metrics, e, time.perf_counter() - t0))
            log(f"[grid ×{num}] step {done}/{loop.steps} loss {np.asarray(metrics['loss']).mean():.3f} "
                f"({time.perf_counter() - t0:.0f}s)")

    def wants_eval(done: int) -> bool:
        return (loop.eval_every and done % loop.eval_every == 0) or done == loop.steps

    def on_state(done: int, state):
        if wants_eval(done):
            evaluate_all(done, state.params)
        if (loop.ckpt_every and done % loop.ckpt_every == 0) or done == loop.steps:
            ckpt.save(done, state)

    if start == 0:
        evaluate_all(0, state.params)
    step_fn = (lambda s, b: step(s, b, *extra)) if extra else step
    state = run_loop(state, step_fn, lambda t: ens.stack_members([b(t) for b in batchers]), cfg=loop,
                     start=start, stop_on_nonfinite=False, on_metrics=on_metrics, on_state=on_state,
                     state_at=lambda done: bool(wants_eval(done)) or (loop.ckpt_every and done % loop.ckpt_every == 0)
                     ).state
    return _finish(grid, specs, folders, state, history, nonfinite, bundle, p, graphdef, rest, batchers,
                   time.perf_counter() - t0, log)


def _finish(grid, specs, folders, state, history, nonfinite, bundle, p, graphdef, rest, batchers, seconds, log):
    """Each finite member's ``final.json`` (as ``runs/engine.finish_run`` writes a lone run's: the last
    evaluation, epochs, generation EM, best-step records) and exported parameters; then the grid summary."""
    results, rows = [], []
    sets = {"Original": "pt_test", "Continual": "cpt_test"}
    for e, (spec, folder) in enumerate(zip(specs, folders)):
        row = {"name": folder.path.name, "values": grid.values[e], "out": str(folder.path),
               "nonfinite": int(nonfinite[e])}
        if nonfinite[e]:
            log(f"[grid] member {folder.path.name}: {nonfinite[e]} non-finite step(s); no final.json")
            rows.append(row)
            continue
        params = jax.tree.map(np.asarray, ens.member(state.params, e))
        run = types.SimpleNamespace(params=params, graphdef=graphdef, rest=rest)
        last = [r for r in history[e] if r.get("kind") == "eval" and r["step"] == p.cpt.steps][-1]
        em = bio._em(run, bundle, sets, p, spec.seed, spec.dtype)
        final = {"step": p.cpt.steps, **{k: v for k, v in last.items() if k not in ("kind", "step")},
                 "epochs": p.cpt.steps / batchers[e].steps_per_epoch, **em}
        for key in ("Original/hFTA", "Continual/hFTA"):
            final.update(best_step(history[e], key))
        folder.save_params(params, p.cpt.steps)
        folder.write_final(final)
        results.append(RunResult(final, history[e], params, graphdef, rest))
        rows.append(row | {"final": {k: v for k, v in final.items() if k.count("/") <= 1}})
    spread = len(jax.tree.leaves(state.params)[0].sharding.device_set)
    write_json_atomic(grid.folder / SUMMARY, {"grid": grid.as_dict(), "members": rows, "seconds": seconds,
                                               "mode": _step_mode(grid), "devices": jax.device_count(),
                                               "member_devices": spread}, indent=1)
    return results


def grid_spec_of(base, text: str, mode: str = "auto") -> GridSpec:
    """``GridSpec(base, grid_axes(text), mode)``: what ``cfka cpt --grid`` builds from its options."""
    from cfka_jax.runs.grid_spec import grid_axes

    return GridSpec(base, grid_axes(text), mode)


