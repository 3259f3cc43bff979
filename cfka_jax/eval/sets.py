"""One way to evaluate a dict of named sets: ``evaluate(params, step) -> {"<set>/<metric>": value}``.

Every study evaluates a model on named sets (``Original``, ``Continual``, ``Heldout``, ``Domain``, …) with one
metric function per set. :func:`named_sets` builds the evaluator the training loop records; empty sets are an
error when the evaluator is built, never a perfect score at the end of a run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Metric = Callable[[Any], dict]
"""``metric(params) -> {metric name: value}`` on one set."""


def named_sets(metrics: Mapping[str, Metric]) -> Callable[[Any, int], dict]:
    """``evaluate(params, step)`` merging ``{f"{name}/{k}": v}`` of every set's metric, in the given order.

    Raises:
      ValueError: no sets.
    """
    if not metrics:
        raise ValueError("nothing to evaluate: no evaluation sets")

    def evaluate(params, step: int) -> dict:
        del step
        out: dict = {}
        for name, metric in metrics.items():
            out.update({f"{name}/{k}": v for k, v in metric(params).items()})
        return out

    return evaluate


def combine(*evaluators: Callable[[Any, int], dict] | None) -> Callable[[Any, int], dict]:
    """One evaluator whose record is the union of the given evaluators' records (None entries skipped)."""
    live = [e for e in evaluators if e is not None]

    def evaluate(params, step: int) -> dict:
        out: dict = {}
        for e in live:
            out.update(e(params, step))
        return out

    return evaluate
