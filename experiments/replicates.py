"""Replicates as an axis of the Biography studies: CPT seeds × PT replicates (``--seeds``, ``--pt-seeds``).

A study with ``--pt-seeds 0,1 --seeds 0,1,2`` runs every CPT cell once per (PT seed, CPT seed) pair. PT replicate
``k`` is its own pre-training run from seed ``k`` in its own folder, :func:`pt_folder` (``<root>/pt-seed<k>/``),
named :func:`pt_label` (``s<k>``) in the rows of a result record, so that ``verdicts.paired`` matches runs on
``(pt, seed)`` and ``verdicts.gap`` sees the spread over both axes.

Every replicate leaves one result file, written atomically (``jsonio.write_json_atomic``) when it finishes, that
records the run it belongs to (:func:`write_replicate`); a study started again skips every replicate whose file is
there (:func:`finished`), after checking that its run folder holds the same run (``RunFolder.check``: a folder of
another run is refused with one line naming it), so a killed study loses at most the replicate it was in.

The rows of a record are what the verdict rules read: one per run, never a mean, so a rule's spread is over runs.
The mean and ranges over both axes are the record's ``provenance.summary`` (:func:`summary`), for a reader: per
cell and metric the mean and range over all runs, the range of the PT models' means (between PT models) and the
widest seed range within one PT model.
"""

from __future__ import annotations

import pathlib
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cfka_jax import jsonio
from cfka_jax.claims.verdicts import cells, spread
from cfka_jax.runs.folder import RunFolder


def pt_label(seed: int) -> str:
    """The PT replicate's name in a record's rows (``pt``): ``s<seed>``."""
    return f"s{seed}"


def pt_folder(root: str | pathlib.Path, seed: int) -> pathlib.Path:
    """PT replicate ``seed``'s run folder: ``<root>/pt-seed<seed>``."""
    return pathlib.Path(root) / f"pt-seed{seed}"


def check_seed_list(seeds: Sequence[int], flag: str, *, allow_empty: bool = False) -> None:
    """``--seeds`` / ``--pt-seeds``: distinct integers >= 0 (at least one unless ``allow_empty``).

    Raises:
      ValueError: naming ``flag`` and the value.
    """
    bad = (not seeds and not allow_empty) or len(set(seeds)) != len(seeds)
    if bad or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ValueError(f"{flag} must be distinct integers >= 0, got {','.join(map(str, seeds)) or 'nothing'}")


def command_line(prog: str, module_file: str) -> str | None:
    """The command that made a record when this process runs ``module_file`` as a script (``python -m``): ``prog``
    and the arguments, no machine path; None otherwise (``claims.results.provenance`` then names ``sys.argv``)."""
    if pathlib.Path(sys.argv[0]).resolve() != pathlib.Path(module_file).resolve():
        return None
    return " ".join([prog, *(shlex.quote(a) for a in sys.argv[1:])])


def finished(path: pathlib.Path, run_folder: pathlib.Path, spec: Any) -> dict | None:
    """The result of a finished replicate (its result file ``path``), or None when it has not finished.

    Raises:
      RunFolderError: ``run_folder`` holds another run than ``spec`` (every differing field named).
      ValueError: the result file is not a JSON object (names the file and line).
    """
    if not path.exists():
        return None
    RunFolder(run_folder).check(spec, spec.scale)
    return jsonio.read_json_object(path)


def write_replicate(path: pathlib.Path, result: Mapping[str, Any]) -> dict:
    """Writes one replicate's result atomically (the finished run's values, what it was made from, its seconds)."""
    out = dict(result)
    jsonio.write_json_atomic(path, out, allow_nan=False, indent=1)
    return out


def summary(rows: Iterable[Mapping[str, Any]], factors: Sequence[str], metrics: Sequence[str]) -> list[dict]:
    """Mean and spread over PT replicates and seeds, per cell (the rows' values of ``factors``) and metric.

    Each entry: the cell's factors, ``metric``, ``mean``, ``lo``, ``hi``, ``n`` over every run (row) of the cell;
    ``pts`` and ``seeds``, the distinct PT models and seeds; ``pt_mean_lo`` / ``pt_mean_hi``, the range of the PT
    models' own means (how far apart the PT models put the cell); ``seed_range``, the widest range over seeds of one
    PT model. Rows lacking the metric are left out of it; a cell without it has no entry (``claims.verdicts.cells``).
    """
    out = []
    for c in cells(list(rows), factors, metrics):
        pt_means = spread([s.mean for s in c.by_pt.values()])
        out.append({**c.factors, "metric": c.metric, "mean": round(c.runs.mean, 3), "lo": c.runs.lo,
                    "hi": c.runs.hi, "n": c.runs.n, "pts": len(c.by_pt), "seeds": c.seeds,
                    "pt_mean_lo": round(pt_means.lo, 3), "pt_mean_hi": round(pt_means.hi, 3),
                    "seed_range": round(max(s.hi - s.lo for s in c.by_pt.values()), 3)})
    return out


def show(entry: Mapping[str, Any]) -> str:
    """One summary entry as a table cell: ``mean (lo–hi, n=N)``, or ``mean (n=1)``."""
    if entry["n"] == 1:
        return f"{entry['mean']:.1f} (n=1)"
    return f"{entry['mean']:.1f} ({entry['lo']:.1f}–{entry['hi']:.1f}, n={entry['n']})"
