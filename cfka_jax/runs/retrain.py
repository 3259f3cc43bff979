"""The full re-train reference of a task stream: one model trained from scratch on all of the stream's data.

    ref = retrain(RetrainSpec(preset="small", out="runs/streams/retrain-seed0", stages=3))
    ref["row"]        # [R(T0), R(T1), …, R(T_T)]: the re-trained model on every task of the stream

Continual-pre-training recipes (Ibrahim et al. 2024) are judged against the model one would get by re-training
on the union of the old and the new data. Here that union is the PT population's training biographies plus every
CPT group's (``data/stages.py``), trained with the preset's PT schedule from a fresh initialisation; the number of
steps grows with the data so each person gets the PT run's exposure:

    steps = round(S_PT · N_docs(PT ∪ CPT) / N_docs(PT)),  warm-up scaled by the same factor.

It is evaluated once at the end on the stream's tasks (T0 = the PT people's test biographies, T_i = group i's),
the same sets and metric the stream's accuracy matrix uses, so its row sits beside the stream's last row R[T, ·]:
``avg_acc`` = (1/T) Σ_{j≥1} R(T_j) as in ``eval/cl_metrics.py``. BWT, forgetting and the other sequence measures do
not exist for a single joint run. ``<out>/run`` is a resumable run folder; ``<out>/retrain.json`` is written last.
"""

from __future__ import annotations

import dataclasses
import pathlib

from cfka_jax import jsonio
from cfka_jax.data.batching import EpochBatcher
from cfka_jax.data.pipeline import DataBundle
from cfka_jax.data.stages import stage_tasks
from cfka_jax.eval.fta import fta_evaluator
from cfka_jax.runs import biography as bio
from cfka_jax.runs.engine import RunHooks, RunUpdate, train_lm
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY, lookup
from cfka_jax.runs.specs import ARCHS
from cfka_jax.runs.stream import METRICS


@dataclasses.dataclass(frozen=True)
class RetrainSpec:
    """The re-train reference of a ``stages``-stage stream of ``preset`` (module docstring); ``steps`` None: the PT
    steps scaled with the data."""

    preset: str = "smoke"
    out: str = "runs/retrain-smoke"
    stages: int = 3
    metric: str = "sFTA"
    arch: str = "qwen"
    seed: int = 0
    steps: int | None = None
    cache_dir: str = "runs/data-cache"
    progress: bool = True

    def __post_init__(self):
        lookup(BIOGRAPHY, self.preset, "Biography")
        if self.metric not in METRICS or self.arch not in ARCHS:
            raise ValueError(f"--metric in {METRICS}, --arch in {ARCHS}; got {self.metric!r}, {self.arch!r}")
        for name in ("stages", "steps"):
            v = getattr(self, name)
            if (v is not None or name == "stages") and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"--{name} must be a positive integer, got {v!r}")


def schedule(spec: RetrainSpec, n_pt_docs: int, n_all_docs: int):
    """The PT schedule with steps (and warm-up) scaled by ``n_all_docs / n_pt_docs`` (or ``spec.steps``)."""
    pt = BIOGRAPHY[spec.preset].pt
    steps = spec.steps or max(1, round(pt.steps * n_all_docs / n_pt_docs))
    warmup = min(steps, round(pt.warmup * steps / pt.steps))
    return dataclasses.replace(pt, steps=steps, warmup=warmup, eval_every=0)


def retrain(spec: RetrainSpec, data: DataBundle | None = None) -> dict:
    """Runs (or resumes) the re-train and returns (and writes) its summary (module docstring)."""
    p = BIOGRAPHY[spec.preset]
    bundle = bio._data(p, spec.cache_dir, data)
    tasks = stage_tasks(bundle, spec.stages)
    pt_docs = bundle.splits["pt_train"].docs()
    docs = pt_docs + [d for t in tasks for d in t.train.docs()]
    sched = schedule(spec, len(pt_docs), len(docs))
    folder = RunFolder(pathlib.Path(spec.out) / "run")
    folder.check(spec, p)
    final = folder.final()
    if final is None:
        folder.start(spec, p)
        model = bio.build_model(p, spec.arch, len(bundle.tokenizer), spec.seed)
        batcher = EpochBatcher(docs, seq_len=bundle.config.seq_len, eos_id=bundle.eos_id, batch_size=sched.batch,
                               seed=spec.seed, doc_mask=bundle.config.doc_mask)
        sets = {"T0": bundle.eval["pt_test"], **{f"T{t.index}": t.eval for t in tasks}}
        factory = lambda g, r: fta_evaluator(g, r, sets, batch_size=p.eval_batch)  # noqa: E731
        run = train_lm(model, batcher, update=RunUpdate(opt=sched.optim()), loop=sched.loop(progress=spec.progress),
                       folder=folder, hooks=RunHooks(evaluate_factory=factory))
        final = {"step": run.step, **run.eval_at(run.step), "epochs": sched.steps / batcher.steps_per_epoch}
        folder.save_params(run.params, run.step)
        folder.write_final(final)
    row = [float(final[f"T{j}/{spec.metric}"]) for j in range(spec.stages + 1)]
    summary = {"spec": dataclasses.asdict(spec), "metric": spec.metric, "steps": sched.steps,
               "tasks": ["PT"] + [f"stage {t.index} ({len(t.pids)} people)" for t in tasks], "row": row,
               "final_T0": row[0], "avg_acc": sum(row[1:]) / spec.stages,
               "epochs": final["epochs"]}
    jsonio.write_json_atomic(pathlib.Path(spec.out) / "retrain.json", summary, indent=1)
    return summary
