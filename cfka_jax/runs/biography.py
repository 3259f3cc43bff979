"""Pre-training and continual pre-training on the synthetic Biography world (spec cfka_stoc.md §3–§5, §7).

The cFKA phenomenon at a scale chosen by a preset: PT on the PT population learns its facts; naive CPT on a new
population learns the new facts and forgets the old ones; EWC, real replay ('all', 'half'), generative replay
(STOC, Random, LAMOL), freezing and LoRA change how much is kept::

    data = build_data(BIOGRAPHY["smoke"].data_config(), "runs/data-cache")      # optional: built when not given
    pt = pretrain(PTSpec(preset="smoke", out="runs/pt-smoke-qwen"), data)
    cpt = continual(CPTSpec(preset="smoke", method="ewc", out="runs/cpt-ewc"), pt, data)
    cpt.final["Original/sFTA"], cpt.history, cpt.model()

Both return a :class:`~cfka_jax.runs.engine.RunResult` in memory and leave a run folder (``runs/folder.py``):
``config.json``, ``metrics.jsonl``, ``checkpoints/``, ``final.json`` (and ``params/`` for PT). Runs resume from
their checkpoints; a folder holding another run is refused. Metrics: [Train] = PT train biographies, Original =
PT test biographies (what is kept), Continual = CPT test biographies (what is learned); hFTA/sFTA every
evaluation, generation EM at the end.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.pipeline import DataBundle, build_data
from cfka_jax.eval.em import em_prompts, exact_match_rate
from cfka_jax.eval.fta import fta_evaluator
from cfka_jax.eval.sets import combine
from cfka_jax.models import family
from cfka_jax.parallel.mesh import mesh_of
from cfka_jax.runs import methods
from cfka_jax.runs.engine import RunHooks, RunMemory, RunObjective, RunResult, RunUpdate, finish_run, train_lm
from cfka_jax.runs.folder import RunFolder, RunFolderError
from cfka_jax.runs.presets import Preset
from cfka_jax.runs.replay import check_replay
from cfka_jax.runs.contexts import BiographyContext
from cfka_jax.runs.specs import DTYPES, CPTSpec, PTSpec, loop_config
from cfka_jax.train.step import master_params


def build_model(p: Preset, arch: str, vocab_size: int, seed: int, dtype: str = "float32") -> nnx.Module:
    """A from-scratch LM of family ``arch`` (``models/family.py``: Qwen2 with a tied head, Pythia, Llama) of the
    preset's size (init normal(0, 0.02))."""
    fam = family.get(arch)
    cfg = fam.from_size(p.model, vocab_size=vocab_size, max_position_embeddings=2048,
                        dtype=DTYPES[dtype] or jnp.float32)
    return fam.build(cfg, seed)


def _data(p: Preset, cache_dir: str, data: DataBundle | None) -> DataBundle:
    """The run's data: ``data`` when given (checked against the preset), else built (or read from the cache)."""
    expected = p.data_config()
    if data is None:
        return build_data(expected, cache_dir)
    if data.config != expected:
        raise ValueError(f"the data bundle passed in was built for another data config than preset {p.name!r}")
    return data


def _fta_factory(bundle: DataBundle, sets: dict[str, str], dtype: str, batch_size: int):
    evals = {name: bundle.eval[split] for name, split in sets.items()}
    return lambda g, r: fta_evaluator(g, r, evals, batch_size=batch_size, compute_dtype=DTYPES[dtype])


def _em(run, bundle: DataBundle, sets: dict[str, str], p: Preset, seed: int, dtype: str) -> dict:
    """Generation EM (T = 0.2, 32 new tokens, clean prompts) on the first ``p.em_docs`` biographies of each set."""
    params = run.params if DTYPES[dtype] is None else jax.tree.map(lambda x: x.astype(DTYPES[dtype]), run.params)
    model = nnx.merge(run.graphdef, params, run.rest)
    out = {}
    for name, split in sets.items():
        prompts, skipped = em_prompts(bundle.splits[split], bundle.world.people, bundle.tokenizer, max_docs=p.em_docs)
        res = exact_match_rate(model, prompts, bundle.tokenizer, key=jax.random.key(seed))
        out.update({f"{name}/{k}": v for k, v in res.items()} | {f"{name}/EM_skipped": skipped})
    return out


def pretrain(spec: PTSpec, data: DataBundle | None = None) -> RunResult:
    """Runs (or resumes) PT and returns its result; the final parameters are exported to ``<out>/params``."""
    p, folder = spec.scale, RunFolder(spec.out)
    folder.check(spec, p)
    mesh = mesh_of(spec.mesh)  # made before anything is written (a mesh larger than the machine is refused)
    bundle = _data(p, spec.cache_dir, data)
    folder.start(spec, p)
    model = build_model(p, spec.arch, len(bundle.tokenizer), spec.seed, spec.dtype)
    batcher = EpochBatcher(bundle.splits["pt_train"].docs(), seq_len=bundle.config.seq_len, eos_id=bundle.eos_id,
                           batch_size=p.pt.batch, seed=spec.seed, doc_mask=bundle.config.doc_mask)
    factory = _fta_factory(bundle, {"Train": "pt_train", "Original": "pt_test"}, spec.dtype, p.eval_batch)
    run = train_lm(model, batcher, update=RunUpdate(opt=p.pt.optim()),
                   loop=loop_config(p.pt, spec.memory, spec.progress), folder=folder,
                   objective=RunObjective(compute_dtype=DTYPES[spec.dtype]), memory=RunMemory(mesh=mesh),
                   hooks=RunHooks(evaluate_factory=factory))
    em = _em(run, bundle, {"Original": "pt_test"}, p, spec.seed, spec.dtype)
    folder.save_params(run.params, run.step)
    return finish_run(folder, factory(run.graphdef, run.rest), run,
                      {"epochs": p.pt.steps / batcher.steps_per_epoch, **em})


def _check_pt(pt_run: PTSpec, pt_dir: str | None, p: Preset, pt: RunResult | None) -> None:
    """Before any data is built: the PT result passed in is finished; an explicit ``pt_dir`` holds a finished run
    (``pt_run``: the PT run the CPT run starts from, ``CPTSpec.pt_spec``)."""
    if pt is not None and pt.final.get("step") != p.pt.steps:
        raise ValueError(f"the PT result passed in is at step {pt.final.get('step')}, expected {p.pt.steps}")
    if pt is None and pt_dir is not None and RunFolder(pt_run.out).final() is None:
        raise RunFolderError(f"--pt-dir {pt_dir} holds no finished PT run (no final.json); train it with "
                             f"`cfka pt --preset {pt_run.preset} --out {pt_dir}` or omit --pt-dir")


def _pt_params(pt_run: PTSpec, p: Preset, pt: RunResult | None, model: nnx.Module, bundle: DataBundle):
    """The PT run's final (float32 master) parameters: from ``pt`` in memory, or from ``pt_run``'s folder (trained
    first when the default folder holds no finished run)."""
    if pt is not None:
        return pt.params
    folder = RunFolder(pt_run.out)
    if folder.final() is None:
        print(f"[cpt] no finished PT run in {folder.path}; training it first")
        return pretrain(pt_run, bundle).params
    abstract = master_params(nnx.split(model, nnx.Param, ...)[1])
    params, step = folder.load_params(abstract)
    if step != p.pt.steps:
        raise RunFolderError(f"PT parameters in {folder.params_dir} are at step {step}, expected {p.pt.steps}")
    return params


def continual(spec: CPTSpec, pt: RunResult | None = None, data: DataBundle | None = None, *,
              extra_evaluators: dict[str, Callable] | None = None, loss_fn=None,
              init_params=None) -> RunResult:
    """Runs (or resumes) CPT from the PT parameters and returns its result.

    The spec is unpacked once, here: each step below takes only the option group it reads (``CPTSpec``'s
    :class:`~cfka_jax.runs.specs.UpdateMode`, :class:`~cfka_jax.runs.specs.MemoryOptions`,
    :class:`~cfka_jax.runs.specs.TokenObjective`, the resolved method, the PT run and the method's
    :class:`~cfka_jax.runs.contexts.BiographyContext`); the whole spec goes only to the run folder, which records
    it.

    Args:
      spec: the run.
      pt: the PT result in memory (else read from ``spec.pt_folder``).
      data: the data bundle (else built or read from the cache).
      extra_evaluators: name → ``factory(graphdef, rest) → evaluate(params, step) → dict``; their records join
        the FTA evaluation records.
      loss_fn: a token objective for the train step (``train/step.py``) in place of the spec's
        (``methods.token_objective``: mean NLL, φ-weighted TWPPL or energy masking); only with a plain spec.
      init_params: parameters to start training from instead of the PT ones (e.g. after a reset), same
        structure; replay is still sampled from, and EWC still anchored at, the PT parameters.
    """
    p, folder = spec.scale, RunFolder(spec.out)
    method, mode, memory, objective = spec.resolved, spec.update_mode, spec.memory, spec.objective
    pt_run, seed = spec.pt_spec(), spec.seed
    _check_pt(pt_run, spec.pt_dir, p, pt)
    methods.check_token_weights(objective)
    if loss_fn is not None and (objective.named or method.hooks.token_objective is not None):
        raise ValueError("a loss_fn was given and the spec names a token objective (token_weights / energy_tau / "
                         "a method's token loss such as rho1)")
    folder.check(spec, p)
    mesh = mesh_of(memory.mesh)
    bundle = _data(p, pt_run.cache_dir, data)
    token_loss, add_weights = methods.token_objective(objective, len(bundle.tokenizer), bundle.tokenizer)
    model = build_model(p, pt_run.arch, len(bundle.tokenizer), seed, memory.dtype)
    params = _pt_params(pt_run, p, pt, model, bundle)
    if any(n.startswith("generative_replay:") for n in method.needs):  # sampled elsewhere: refused first
        check_replay(spec.replay_folder, bundle, spec.pt_folder)
    folder.start(spec, p)
    nnx.update(model, params)
    ctx = BiographyContext(bundle, model, alpha=spec.alpha, replay=spec.replay, seed=seed, pt_folder=spec.pt_folder,
                           replay_folder=spec.replay_folder, batch=p.cpt.batch, compute_dtype=memory.compute_dtype)
    hooks = methods.cpt_hooks(method, ctx, init_params)  # the PT model; θ0 = the start
    if hooks.objective is not None:
        token_loss, add_weights = hooks.objective
    model, trainable = methods.update_mode(mode, p, model, seed)
    penalty = hooks.penalty
    if penalty is not None and mode.update == "lora":
        penalty = methods.lora_effective_penalty(model, penalty)
    batcher = EpochBatcher(hooks.docs, seq_len=bundle.config.seq_len, eos_id=bundle.eos_id, batch_size=p.cpt.batch,
                           seed=seed + 1, doc_mask=bundle.config.doc_mask)
    sets = {"Original": "pt_test", "Continual": "cpt_test"}
    fta = _fta_factory(bundle, sets, memory.dtype, p.eval_batch)
    extra = {**methods.objective_evaluators(objective, bundle), **(extra_evaluators or {})}
    factory = lambda g, r: combine(fta(g, r), *(f(g, r) for f in extra.values()))  # noqa: E731
    opt = p.cpt.optim()
    run = train_lm(model, lambda t: add_weights(batcher(t)),
                   update=RunUpdate(opt=opt, trainable=trainable, optimizer=methods.optimizer_core(method, opt),
                                    post_update=hooks.post_update),
                   loop=loop_config(p.cpt, memory, spec.progress), folder=folder,
                   objective=RunObjective(loss_fn=loss_fn or token_loss, penalty=penalty,
                                          penalty_args=hooks.penalty_args, compute_dtype=memory.compute_dtype),
                   memory=RunMemory(mesh=mesh), hooks=RunHooks(evaluate_factory=factory))
    em = _em(run, bundle, sets, p, seed, memory.dtype)
    return finish_run(folder, factory(run.graphdef, run.rest), run,
                      {"epochs": p.cpt.steps / batcher.steps_per_epoch, **em, **hooks.stats})
