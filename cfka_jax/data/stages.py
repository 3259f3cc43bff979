"""The Biography world's CPT population cut into T disjoint groups: the tasks of a continual stream.

``stage_tasks(bundle, T)`` splits the CPT people (in person-id order) into T contiguous groups of near-equal size
(``np.array_split``); stage i trains on the ``cpt_train`` biographies of group i and is scored on the
``cpt_test`` biographies of group i. Task 0 is the PT population (``pt_train`` / ``pt_test``). Every person is in
exactly one group, so the stages share no facts; the tokenizer and the cache of the bundle are unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cfka_jax.data.packing import FtaTargets, Packed, fta_targets, pack
from cfka_jax.data.pipeline import DataBundle
from cfka_jax.data.tokenize import TokenizedSplit


@dataclasses.dataclass(frozen=True)
class StageTask:
    """One CPT group: its people, training split and FTA evaluation set (test biographies packed in file order)."""

    index: int
    pids: tuple[int, ...]
    train: TokenizedSplit
    test: TokenizedSplit
    eval: tuple[Packed, FtaTargets]


def stage_tasks(bundle: DataBundle, stages: int) -> list[StageTask]:
    """Tasks 1 … ``stages`` of the bundle's CPT population (module docstring).

    Raises:
      ValueError: ``stages`` < 1 or more stages than CPT people.
    """
    train, test = bundle.splits["cpt_train"], bundle.splits["cpt_test"]
    people = np.unique(train.pid)
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        raise ValueError(f"stages must be an integer >= 1, got {stages!r}")
    if stages > len(people):
        raise ValueError(f"--stages {stages} exceeds the {len(people)} CPT people of the world")
    tasks = []
    for i, group in enumerate(np.array_split(people, stages), start=1):
        tr = train.select(np.flatnonzero(np.isin(train.pid, group)))
        te = test.select(np.flatnonzero(np.isin(test.pid, group)))
        packed = pack(te.docs(), bundle.config.seq_len, bundle.eos_id, doc_mask=bundle.config.doc_mask)
        tasks.append(StageTask(i, tuple(int(p) for p in group), tr, te, (packed, fta_targets(packed, te.idx))))
    return tasks
