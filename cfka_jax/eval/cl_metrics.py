"""Continual-learning measures of a task stream, from its accuracy matrix (any per-task metric, higher = better).

A stream learns task 0 (pre-training, PT) and then tasks 1 … T, one per CPT stage. The accuracy matrix is

    R[i, j] = metric of task j measured on the model after stage i,     i, j = 0 … T,

row 0 being the PT model (before any CPT stage) and the diagonal R[j, j] the task just learned. With it
(Lopez-Paz & Ranzato 2017 "GEM" for ACC/BWT/FWT; Chaudhry et al. 2018 "RWalk" for forgetting; Jang et al. 2022
"Towards Continual Knowledge Learning of Language Models" for FUAR):

* ``avg_acc`` = (1/T) Σ_{j=1..T} R[T, j]: the final model on the stream's tasks; ``avg_acc_all`` adds task 0;
* ``bwt`` = (1/(T−1)) Σ_{j=1..T−1} (R[T, j] − R[j, j]) (GEM's BWT over the CPT tasks; needs T ≥ 2);
  ``bwt_pt`` = R[T, 0] − R[0, 0], what happened to the PT knowledge;
* ``fwt`` = (1/(T−1)) Σ_{j=2..T} (R[j−1, j] − R[0, j]): how much earlier CPT stages help task j before it is
  trained, against the PT model (GEM measures against a random init; here the reference is the PT model);
* ``forgetting[j]`` = max_{l=j..T−1} R[l, j] − R[T, j] for j = 0 … T−1, and its mean ``avg_forgetting``;
* ``fuar`` = Σ_k max(0, Gap(F_k)) / (Σ_k max(0, Gap(U_k)) + Σ_k max(0, Gap(A_k))) (Jang et al. 2022, Eq. 1):
  forgotten over updated + acquired knowledge between the initial model LM_0 and the final one. In a stream, the
  invariant (possibly forgotten) knowledge is task 0 with Gap = R[0, 0] − R[T, 0]; the acquired knowledge is every
  CPT task with Gap = R[T, j] − R[0, j]; the Biography stream has no updated (contradicted) facts, so U is
  empty. ``None`` (the paper's "n.d.") when the denominator is 0. Lower is better; FUAR < 1 means more is gained
  than lost.
* ``plasticity`` = (1/T) Σ_{j=1..T} (R[j, j] − R[j−1, j]): what each stage learns of its own task;
  ``stability`` = (1/T) Σ_{j=0..T−1} R[T, j] / R[j, j]: the fraction of each earlier task's just-learned level the
  final model keeps (tasks with R[j, j] = 0 are left out).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def check_matrix(matrix) -> np.ndarray:
    """``matrix`` as a float64 (T+1) × (T+1) array.

    Raises:
      ValueError: not square, fewer than 2 rows (PT and one stage), or not finite.
    """
    r = np.asarray(matrix, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] != r.shape[1] or r.shape[0] < 2:
        raise ValueError(f"the accuracy matrix must be square with >= 2 rows (PT + stages), got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("the accuracy matrix holds a non-finite entry")
    return r


def fuar(forgotten: Sequence[float], updated: Sequence[float], acquired: Sequence[float]) -> float | None:
    """Jang et al. 2022's FUAR from per-task gaps (each gap positive in its own sense: forgotten = score lost,
    updated / acquired = score gained); negative gaps count 0. None where nothing was updated or acquired."""
    pos = lambda xs: float(np.sum(np.maximum(0.0, np.asarray(xs, np.float64)))) if len(xs) else 0.0  # noqa: E731
    den = pos(updated) + pos(acquired)
    return None if den == 0.0 else pos(forgotten) / den


def forgetting(matrix) -> np.ndarray:
    """f_j = max_{l=j..T−1} R[l, j] − R[T, j] for j = 0 … T−1 (Chaudhry et al. 2018)."""
    r = check_matrix(matrix)
    t = r.shape[0] - 1
    return np.array([r[j:t, j].max() - r[t, j] for j in range(t)])


def stream_metrics(matrix) -> dict:
    """Every measure of the module docstring for the (T+1) × (T+1) accuracy matrix (JSON-ready)."""
    r = check_matrix(matrix)
    t = r.shape[0] - 1
    stages = range(1, t + 1)
    f = forgetting(r)
    kept = [r[t, j] / r[j, j] for j in range(t) if r[j, j] != 0.0]
    out = {
        "stages": t,
        "avg_acc": float(np.mean([r[t, j] for j in stages])),
        "avg_acc_all": float(np.mean(r[t])),
        "bwt": float(np.mean([r[t, j] - r[j, j] for j in range(1, t)])) if t >= 2 else None,
        "bwt_pt": float(r[t, 0] - r[0, 0]),
        "fwt": float(np.mean([r[j - 1, j] - r[0, j] for j in range(2, t + 1)])) if t >= 2 else None,
        "forgetting": [float(x) for x in f],
        "avg_forgetting": float(f.mean()),
        "fuar": fuar([r[0, 0] - r[t, 0]], [], [r[t, j] - r[0, j] for j in stages]),
        "plasticity": float(np.mean([r[j, j] - r[j - 1, j] for j in stages])),
        "stability": float(np.mean(kept)) if kept else None,
        "matrix": r.tolist(),
    }
    return out
