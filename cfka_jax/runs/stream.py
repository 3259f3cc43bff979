"""Task streams on the Biography world: PT, then T CPT stages on disjoint groups of the CPT population.

    spec = StreamSpec(preset="small", out="runs/stream-naive", stages=3, methods=("replay",), alpha=0.95)
    result = run_stream(spec)          # result.matrix (T+1 × T+1), result.metrics (eval/cl_metrics.py)

Task 0 is the PT population, task i the i-th CPT group (``data/stages.py``). Stage i starts from the parameters
stage i − 1 ended with (stage 1 from the PT run) and trains ``stage_steps`` steps (default: the preset's CPT
steps / T, so each person gets the exposure of a one-shot CPT run and the whole stream costs one CPT run), with
its own method, the stream's α and the learning-rate schedule of ``train/optim.stage_optim`` (re-warm + re-decay
to ``rewarm_peak``, or no re-warming). Every stage evaluates hFTA/sFTA of every task at its start and its end, so
R[i, j] = ``T<j>/<metric>`` of stage i's last evaluation (row 0: stage 1's step-0 evaluation, the PT model).

Methods (one per stage, or one for all; each a name of the one registry or a ``+`` composition such as
``stoc + ewc``, its hooks called with the stage's :class:`StageContext`; what a stage runs is derived from the hooks
:data:`STREAM` calls):

* ``naive``: the stage's biographies alone;
* ``replay``: mixed with real old data (PT training biographies and earlier stages'), replay tokens ≈ 1 − α of all
  (``data/mixing.mix_replay``, rule ``token_share``);
* ``ewc``: the diagonal Fisher of the stage's start model on old data (PT + earlier stages), anchored at the start
  parameters (``continual/ewc.py``, λ = ``ewc_lambda``);
* ``gpm``: the stage's data alone, updates projected off the layer bases of all earlier tasks
  (``continual/gpm.py``; the bases of PT are taken on the PT training data; saved in ``<out>/gpm/``);
  ``nullspace``: the same with AlphaEdit's eigenvalue cut (``continual/nullspace.py``, bases in
  ``<out>/nullspace/``);
* ``lwf`` / ``rho1``: the token objective against the stage's start model θ0 (``continual/lwf.py``,
  ``continual/rho1.py``); ``recadam``: RecAdam in place of AdamW;
* ``stoc`` / ``random`` / ``lamol``: a generative replay corpus sampled from the stage's start model with prompts
  from the stage's data (``continual/replay.py``), mixed at 1 − α like real replay. The corpus (``<out>/stage<i>/
  replay``) records what it was sampled from (``runs/replay.replay_made_from``: tokenizer, world, the identity and
  step of the run the stage starts from, the PT run or stage i − 1); a resumed stage reuses only a corpus of the
  same (else one line naming ``--out`` and the folder).

Folders: ``<out>/stage<i>/`` are run folders (``runs/folder.py``: config, metrics.jsonl, checkpoints, params,
final.json), resumed stage by stage (a finished stage is read back; a killed one resumes from its newest
checkpoint, with identical results); ``<out>/stream.json`` holds the matrix and the metrics, written last.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib

import numpy as np
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.continual import gpm
from cfka_jax.continual.method import HOOKS, Recipe
from cfka_jax.continual.peft import trainable_filter, trainable_mask
from cfka_jax.continual.replay import build_replay
from cfka_jax.data.batching import EpochBatcher, packed_batch
from cfka_jax.data.mixing import mix_replay
from cfka_jax.data.pipeline import DataBundle
from cfka_jax.data.stages import StageTask, stage_tasks
from cfka_jax.eval.cl_metrics import stream_metrics
from cfka_jax.eval.fta import fta_evaluator
from cfka_jax.runs import biography as bio
from cfka_jax.runs.contexts import reference
from cfka_jax.runs.engine import RunHooks, RunObjective, RunUpdate, train_lm
from cfka_jax.runs.folder import RunFolder, RunFolderError
from cfka_jax.runs.method import Method, method_options, recipe_components, resolve_each
from cfka_jax.runs.presets import BIOGRAPHY, Preset, lookup
from cfka_jax.runs.replay import GENERATIVE, ReplaySwitches, replay_made_from, synthetic_replay_config
from cfka_jax.runs.specs import ARCHS, PTSpec
from cfka_jax.train.optim import DECAYS, REWARM, stage_optim
from cfka_jax.train.step import master_params, token_nll_loss
from cfka_jax.train.tracking import Tracker

STREAM = Recipe("stream", hooks=set(HOOKS) - {"update"}, provides={
    "real_replay:stream", *(f"generative_replay:{k}" for k in GENERATIVE), "old_batches", "reference", "old_keys"})
RECIPES = (STREAM,)
"""The stream recipe: its stages call these hooks with a :class:`StageContext`."""
STREAM_METHODS = recipe_components(STREAM)
"""The one registry's components a stage runs (derived from :data:`STREAM`); ``+`` composes them per stage."""
METRICS = ("sFTA", "hFTA")
GPM_EMBEDDINGS = ("free", "frozen")
"""What GPM stages do with the input embedding (with a tied head, also the LM head), which no input basis covers:
``free`` (it trains unprojected, as the norms and biases do) or ``frozen`` (no update at all)."""


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """A task stream (module docstring). ``methods``: one name, or one per stage; ``alpha``: the new-data
    fraction of replay stages (0.95 = 5 % replay); ``pt_dir`` None: ``<out>/pt-<preset>-<arch>``, trained first
    when absent."""

    preset: str = "smoke"
    out: str = "runs/stream-smoke"
    stages: int = 3
    methods: tuple[str, ...] = ("naive",)
    alpha: float = 0.95
    rewarm: str = "rewarm"
    rewarm_peak: float | None = None
    decay: str = "cosine"
    stage_steps: int | None = None
    ewc_lambda: float = 1e3
    gpm_threshold: float = 0.97
    gpm_embeddings: str = "free"
    metric: str = "sFTA"
    arch: str = "qwen"
    seed: int = 0
    pt_dir: str | None = None
    cache_dir: str = "runs/data-cache"
    ckpt_every: int | None = None
    progress: bool = True

    def __post_init__(self):
        lookup(BIOGRAPHY, self.preset, "Biography")
        object.__setattr__(self, "methods", tuple(self.methods))
        if not isinstance(self.stages, int) or isinstance(self.stages, bool) or self.stages < 1:
            raise ValueError(f"--stages must be an integer >= 1, got {self.stages!r}")
        if len(self.methods) not in (1, self.stages):
            raise ValueError(f"--method: one name (or '+' composition) of {STREAM_METHODS}, once or once per stage "
                             f"({self.stages}); got {','.join(self.methods)}")
        if not (isinstance(self.alpha, (int, float)) and 0.0 < self.alpha <= 1.0):
            raise ValueError(f"--alpha (the new-data fraction) must be in (0, 1], got {self.alpha!r}")
        if not (isinstance(self.ewc_lambda, (int, float)) and math.isfinite(self.ewc_lambda) and self.ewc_lambda >= 0):
            raise ValueError(f"--ewc-lambda must be a finite number >= 0, got {self.ewc_lambda!r}")
        gpm.GPMConfig(threshold=float(self.gpm_threshold))
        resolved = resolve_each(self.methods, STREAM, flag="--method", options=self.options)
        if self.alpha == 1.0 and any(m.mixes for m in resolved):
            raise ValueError("replay stages need --alpha < 1 (alpha is the new-data fraction)")
        if self.rewarm not in REWARM or self.decay not in DECAYS or self.metric not in METRICS:
            raise ValueError(f"--rewarm in {REWARM}, --decay in {DECAYS}, --metric in {METRICS}; got "
                             f"{self.rewarm!r}, {self.decay!r}, {self.metric!r}")
        if self.arch not in ARCHS:
            raise ValueError(f"--arch must be one of {ARCHS}, got {self.arch!r}")
        for name in ("stage_steps", "ckpt_every"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < (1 if name == "stage_steps"
                                                                                          else 0)):
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {v!r}")
        if self.gpm_embeddings not in GPM_EMBEDDINGS:
            raise ValueError(f"--gpm-embeddings must be one of {GPM_EMBEDDINGS}, got {self.gpm_embeddings!r}")
        if self.rewarm_peak is not None:
            stage_optim(self.schedule.optim(), stage=1, peak_lr=self.rewarm_peak)

    @property
    def scale(self) -> Preset:
        return BIOGRAPHY[self.preset]

    @property
    def schedule(self):
        """The preset's CPT schedule cut to one stage (warm-up scaled with the steps)."""
        cpt = self.scale.cpt
        steps = self.stage_steps or max(1, cpt.steps // self.stages)
        warmup = min(steps, round(cpt.warmup * steps / cpt.steps))
        ckpt = cpt.ckpt_every if self.ckpt_every is None else self.ckpt_every
        return dataclasses.replace(cpt, steps=steps, warmup=warmup, eval_every=0, ckpt_every=ckpt)

    def method(self, stage: int) -> str:
        return self.methods[0] if len(self.methods) == 1 else self.methods[stage - 1]

    @property
    def options(self):
        """The stream's flags as the hooks' options (EWC: λ, the reference Fisher on 8 batches; GPM's ε)."""
        return method_options(ewc_lambda=float(self.ewc_lambda), gpm_threshold=float(self.gpm_threshold))

    def resolved(self, stage: int) -> Method:
        """Stage ``stage``'s method, resolved by the one registry for the stream recipe."""
        return resolve_each(self.method(stage), STREAM, flag="--method", options=self.options)[0]

    @property
    def pt_folder(self) -> pathlib.Path:
        return pathlib.Path(self.pt_dir or pathlib.Path(self.out) / f"pt-{self.preset}-{self.arch}")

    def pt_spec(self) -> PTSpec:
        return PTSpec(preset=self.preset, out=str(self.pt_folder), arch=self.arch, seed=0, cache_dir=self.cache_dir,
                      progress=self.progress)


@dataclasses.dataclass(frozen=True)
class StageRun:
    """What a stage folder's ``config.json`` records: the stream and the stage's index and method."""

    stream: StreamSpec
    stage: int
    method: str


@dataclasses.dataclass(frozen=True)
class StreamResult:
    matrix: np.ndarray
    metrics: dict
    stages: list[dict]
    params: object


def _old_docs(bundle: DataBundle, tasks: list[StageTask], stage: int) -> list[np.ndarray]:
    """Old data of stage ``stage``: the PT training biographies and those of stages 1 … stage − 1."""
    return bundle.splits["pt_train"].docs() + [d for t in tasks[:stage - 1] for d in t.train.docs()]


def _chunks(bundle: DataBundle, docs, rows: int, batches: int, seed: int) -> list[dict]:
    packed = bundle.pack_epoch(docs, seed)
    n = min(batches, packed.num_chunks // rows)
    if n < 1:
        raise ValueError(f"{packed.num_chunks} chunks cannot fill one batch of {rows}")
    return [packed_batch(packed, slice(i * rows, (i + 1) * rows)) for i in range(n)]


@dataclasses.dataclass
class StageContext:
    """What a stage's method hooks read (``continual/components.py`` names the capabilities): the stage's new
    data, real old data (PT + earlier stages, mixed at token share 1 − α), a generative corpus of the start model
    (``<out>/stage<i>/replay``), EWC's old batches (8 rows each, ``total_chunks`` = the rows used), θ0 = the start
    model, and the per-stage bases of every earlier task's keys (saved in ``<out>/<state>/``)."""

    spec: StreamSpec
    bundle: DataBundle
    tasks: list
    stage: int
    model: object
    folder: RunFolder
    params_after: object
    params: object = None
    total_steps: int = 0
    peak_lr: float = 0.0
    recadam_reference_groups: bool = False
    base_loss: object = token_nll_loss
    stats: dict = dataclasses.field(default_factory=dict)

    @property
    def new_docs(self) -> list:
        return self.tasks[self.stage - 1].train.docs()

    def _mixed(self, replayed):
        docs, stats = mix_replay(self.new_docs, replayed, self.spec.alpha, seed=self.spec.seed + self.stage)
        return docs, {f"mix/{k}": v for k, v in stats.items() if isinstance(v, (int, float))}

    def real_replay(self, subset: str):
        return self._mixed(_old_docs(self.bundle, self.tasks, self.stage))

    def generative_replay(self, kind: str):
        spec, bundle, stage, new = self.spec, self.bundle, self.stage, self.new_docs
        rcfg = synthetic_replay_config(kind, bundle.config.seq_len, ReplaySwitches(), spec.seed + stage)
        parent = spec.pt_folder if stage == 1 else _stage_folder(spec, stage - 1).path  # the start model's run
        corpus = build_replay(self.model, new, bundle.tokenizer, rcfg, budget_tokens=int(sum(map(len, new))),
                              out_dir=self.folder.path / "replay", made_from=replay_made_from(bundle, parent),
                              flag="--out")
        return self._mixed(corpus.sequences)

    def old_batches(self, n: int):
        batches = _chunks(self.bundle, _old_docs(self.bundle, self.tasks, self.stage), 8, n,
                          self.spec.seed + self.stage)
        return batches, 8 * len(batches)

    def reference(self, fn):
        return reference(self.model)(fn)

    def protected_bases(self, state: str, update):
        bases = _bases(self.spec, self.bundle, self.tasks, self.stage, self.model, self.params_after, state, update)
        self.stats[f"{state}/protected_fraction"] = float(np.mean([m.shape[1] / m.shape[0]
                                                                   for m in bases.values()]))
        nnx.update(self.model, self.params)  # back to the start parameters
        return bases


def _bases(spec: StreamSpec, bundle, tasks, stage: int, model, params_after, state: str, update):
    """The bases of tasks 0 … stage − 1 (saved in ``<out>/<state>/``; task j's taken with ``params_after(j)``, the
    model that finished it, on ``gpm.GPMConfig().batches`` batches of task j's training data), each task added by
    ``update(bases or None, grams)``."""
    path = pathlib.Path(spec.out) / state / f"bases-before-stage{stage}.npz"
    if path.exists():
        return gpm.load_bases(path)
    rows = spec.scale.cpt.batch
    bases = _bases(spec, bundle, tasks, stage - 1, model, params_after, state, update) if stage > 1 else None
    docs = bundle.splits["pt_train"].docs() if stage == 1 else tasks[stage - 2].train.docs()
    nnx.update(model, params_after(stage - 1))
    grams = gpm.input_grams(model, _chunks(bundle, docs, rows, gpm.GPMConfig().batches, spec.seed))
    bases = update(bases, grams)
    gpm.save_bases(path, bases)
    return bases


def _stage_hooks(spec, bundle, tasks, stage, params, model, folder, params_after, opt):
    """(documents, penalty, penalty operands, update projection, token objective or None, optimiser core or None,
    statistics) of stage ``stage``'s method, its hooks called with a :class:`StageContext` of the start model."""
    h = spec.resolved(stage).hooks
    nnx.update(model, params)
    ctx = StageContext(spec, bundle, tasks, stage, model, folder, params_after, params, opt.total_steps, opt.peak_lr)
    docs, stats = h.documents(ctx) if h.documents else (ctx.new_docs, {})
    penalty, args = h.penalty(ctx) if h.penalty else (None, None)
    post = h.transform(ctx) if h.transform else None
    objective = h.token_objective(ctx) if h.token_objective else None
    core = h.optimizer(ctx) if h.optimizer else None
    return docs, penalty, args, post, objective, core, {**stats, **ctx.stats}


def _stage(spec, bundle, tasks, stage, params, model, evaluate_factory, tracker,
           params_after) -> tuple[dict, object]:
    """Runs (or reads back) stage ``stage``: (its final record, its final parameters)."""
    folder, sched = _stage_folder(spec, stage), spec.schedule
    run_id = StageRun(spec, stage, spec.method(stage))
    folder.check(run_id, spec.scale)
    abstract = master_params(nnx.split(model, nnx.Param, ...)[1])
    if folder.final() is not None:
        return folder.final(), folder.load_params(abstract)[0]
    folder.start(run_id, spec.scale)
    opt = stage_optim(sched.optim(), stage=stage, rewarm=spec.rewarm, peak_lr=spec.rewarm_peak, decay=spec.decay)
    docs, penalty, args, post, objective, core, stats = _stage_hooks(spec, bundle, tasks, stage, params, model,
                                                                     folder, params_after, opt)
    batcher = EpochBatcher(docs, seq_len=bundle.config.seq_len, eos_id=bundle.eos_id, batch_size=sched.batch,
                           seed=spec.seed + stage, doc_mask=bundle.config.doc_mask)
    loss_fn, add = objective if objective is not None else (token_nll_loss, None)
    trainable = None
    if post is not None and spec.gpm_embeddings == "frozen":
        keep = trainable_filter(model, freeze_embeddings=True)
        trainable = lambda params: trainable_mask(params, keep)  # noqa: E731
    run = train_lm(model, batcher if add is None else (lambda t: add(batcher(t))),
                   update=RunUpdate(opt=opt, trainable=trainable, optimizer=core, post_update=post),
                   loop=sched.loop(progress=spec.progress), folder=folder,
                   objective=RunObjective(loss_fn=loss_fn, penalty=penalty, penalty_args=args),
                   hooks=RunHooks(evaluate_factory=evaluate_factory,
                                  on_record=tracker.at((stage - 1) * sched.steps).record))
    final = {"step": run.step, "start": run.eval_at(0), **run.eval_at(run.step), **stats,
             "epochs": sched.steps / batcher.steps_per_epoch, "lr_peak": opt.peak_lr}
    folder.save_params(run.params, run.step)
    folder.write_final(final)
    return final, run.params


def _stage_folder(spec: StreamSpec, stage: int) -> RunFolder:
    return RunFolder(pathlib.Path(spec.out) / f"stage{stage}")


def _pt(spec: StreamSpec, bundle: DataBundle, model):
    folder = RunFolder(spec.pt_folder)
    if folder.final() is None:
        print(f"[stream] no finished PT run in {folder.path}; training it first")
        return bio.pretrain(spec.pt_spec(), bundle).params
    params, step = folder.load_params(master_params(nnx.split(model, nnx.Param, ...)[1]))
    if step != spec.scale.pt.steps:
        raise RunFolderError(f"PT parameters in {folder.params_dir} are at step {step}, expected "
                             f"{spec.scale.pt.steps}")
    return params


SUMMARY_FIELDS = {"tasks": list[str], "matrix": list[list[float]], "avg_acc": float, "bwt": float | None,
                  "bwt_pt": float, "fwt": float | None, "avg_forgetting": float, "fuar": float | None,
                  "plasticity": float, "stability": float | None}
"""The keys of ``stream.json`` its readers use, with their JSON types (``eval/cl_metrics.stream_metrics``)."""


def read_summary(path: str | os.PathLike) -> dict:
    """A stream's ``stream.json``, checked: an object with :data:`SUMMARY_FIELDS` of their types, a square
    (T + 1) × (T + 1) accuracy matrix and one task name per row.

    Raises:
      ValueError: naming the file and the line (invalid JSON) or the key (a missing or malformed entry).
    """
    summary = jsonio.read_json_object(path, "a stream summary (JSON object)")
    jsonio.require_keys(summary, tuple(SUMMARY_FIELDS), str(path))
    problems = jsonio.field_problems(summary, SUMMARY_FIELDS)
    if problems:
        raise ValueError(f"{path}: key " + "; key ".join(problems))
    rows = summary["matrix"]
    if not rows or any(len(r) != len(rows) for r in rows) or len(summary["tasks"]) != len(rows):
        raise ValueError(f"{path}: key 'matrix' must be a square (T + 1) x (T + 1) list with one row per entry of "
                         f"'tasks' ({len(summary['tasks'])}), got {len(rows)} rows of lengths "
                         f"{sorted({len(r) for r in rows})}")
    return summary


def check_stream(spec: StreamSpec) -> None:
    """Before anything is built or written: an explicit ``pt_dir`` holds a finished PT run (a typo never starts a
    new PT run; without ``pt_dir`` one is trained in ``<out>/pt-<preset>-<arch>``), and each stage folder in
    ``out`` is empty or holds that stage of this stream.

    Raises:
      RunFolderError: naming ``--pt-dir`` or ``--out`` and the folder.
    """
    if spec.pt_dir is not None and RunFolder(spec.pt_folder).final() is None:
        raise RunFolderError(f"--pt-dir {spec.pt_dir} holds no finished PT run (no final.json); train it with `cfka pt "
                             f"--preset {spec.preset} --arch {spec.arch} --out {spec.pt_dir}`, or omit --pt-dir to "
                             f"train one in {pathlib.Path(spec.out) / f'pt-{spec.preset}-{spec.arch}'}")
    for stage in range(1, spec.stages + 1):
        _stage_folder(spec, stage).check(StageRun(spec, stage, spec.method(stage)), spec.scale)


def run_stream(spec: StreamSpec, data: DataBundle | None = None, *, tracker: Tracker | None = None) -> StreamResult:
    """Runs (or resumes) the stream and writes ``<out>/stream.json`` (module docstring); :func:`check_stream` first."""
    check_stream(spec)
    p = spec.scale
    bundle = bio._data(p, spec.cache_dir, data)
    tasks = stage_tasks(bundle, spec.stages)
    tracker = tracker or Tracker()
    model = bio.build_model(p, spec.arch, len(bundle.tokenizer), 0)
    params = _pt(spec, bundle, model)
    sets = {"T0": bundle.eval["pt_test"], **{f"T{t.index}": t.eval for t in tasks}}
    factory = lambda g, r: fta_evaluator(g, r, sets, batch_size=p.eval_batch)  # noqa: E731
    finals, ends = [], [params]
    abstract = master_params(nnx.split(model, nnx.Param, ...)[1])
    params_after = lambda j: ends[j] if j < len(ends) else _stage_folder(spec, j).load_params(abstract)[0]  # noqa: E731
    for stage in range(1, spec.stages + 1):
        final, params = _stage(spec, bundle, tasks, stage, params, model, factory, tracker, params_after)
        finals.append(final)
        ends.append(params)
    key = [f"T{j}/{spec.metric}" for j in range(spec.stages + 1)]
    rows = [[finals[0]["start"][k] for k in key]] + [[f[k] for k in key] for f in finals]
    matrix = np.asarray(rows)
    metrics = stream_metrics(matrix)
    summary = {"spec": dataclasses.asdict(spec), "metric": spec.metric, "tasks": ["PT"] + [
        f"stage {t.index} ({len(t.pids)} people)" for t in tasks], **metrics,
        "stages_final": [{k: v for k, v in f.items() if k != "start"} for f in finals]}
    jsonio.write_json_atomic(pathlib.Path(spec.out) / "stream.json", summary, indent=1)
    return StreamResult(matrix, metrics, finals, params)
