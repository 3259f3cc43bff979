"""Run folders: the one writer and reader of ``config.json``, ``metrics.jsonl``, ``final.json`` and checkpoints.

    <run>/config.json      {"run": the run spec, "preset": the preset}   written before training
    <run>/metrics.jsonl    train and eval records (``train/loop.MetricsLog``)
    <run>/checkpoints/     numbered TrainState checkpoints (``train/checkpoint.CheckpointDir``; frozen leaves held,
                           not stored: ``held.json``); after ``--final-checkpoint params|none`` only ``finished.json``
    <run>/params/          the final parameters alone (a finished pre-training run, what CPT starts from; or any
                           run finished with ``--final-checkpoint params``)
    <run>/final.json       the final metrics, written last: its presence marks a finished run

A folder that already holds a run is only resumed by the *same* run: :meth:`RunFolder.start` compares the stored
config with the new one and refuses, naming every differing field, unless they agree on everything that can
change a result (:data:`IGNORED`: ``progress``, ``out``, ``cache_dir``, ``mesh``, ``final_checkpoint``, ``profile``,
``keep_checkpoints`` and ``guard`` may differ; the two finite guards give bit-identical states). A field the stored
config lacks matches ``None`` (an option added to the specs after that run was made, left unset). Nothing is
written on refusal.

``config.json`` records ``config_version`` (:data:`CONFIG_VERSION`; absent: 1). When the defaults of run options
change, the stored values of older versions are read in today's terms (:data:`OLD_DEFAULTS`: version 1's unset
``remat`` meant off, now ``--no-remat``; its unset ``loss_chunk`` meant full logits, now ``--loss-chunk 0``), so an
old folder resumes with exactly the flags that reproduce its run, and a refusal says which flags those are in one
line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

import jax

from cfka_jax import jsonio
from cfka_jax.train.checkpoint import CheckpointDir, CheckpointError, restore, save
from cfka_jax.train.loop import MetricsLog

IGNORED = ("progress", "out", "cache_dir", "mesh", "final_checkpoint", "profile", "keep_checkpoints", "guard")
"""Run-spec fields that do not change what a run computes (a run may be resumed with other values; a run resumed on
another mesh restores its checkpoint onto the new placement)."""

CONFIG_VERSION = 2
"""The version of the run-option defaults a new ``config.json`` records (module docstring)."""

OLD_DEFAULTS: dict[int, dict[str, tuple[Any, Any, str]]] = {
    1: {"remat": (None, False, "--no-remat (knowedit: --remat False)"), "loss_chunk": (None, 0, "--loss-chunk 0"),
        "scan_layers": (False, False, "--no-scan-layers")},
}
"""Per older config version, ``field: (stored value, today's equivalent, the flag that gives it)`` for each run
option whose default changed after that version (version 2 made the lean memory path the default of the
real-model commands: rematerialised, scanned blocks and the tiled head loss)."""


def _in_todays_terms(run: dict, version: int, new: dict) -> dict:
    """A stored run spec of config ``version`` with the values whose meaning changed since then translated; a key
    the stored spec lacks but today's spec ``new`` has (an option added after that run, so it ran with the old
    default) reads as that default."""
    out = dict(run)
    for v in range(version, CONFIG_VERSION):
        for key, (old, now, _) in OLD_DEFAULTS.get(v, {}).items():
            if out.get(key, old) == old and (key in out or key in new):
                out[key] = now
    return out


def _how_to_resume(stored_run: dict, version: int, new: dict, diffs: list[str]) -> str | None:
    """One line naming the flags that resume an older version's folder, when every difference is a changed
    default whose old value today's flags can give; None otherwise."""
    changed = {}
    for v in range(version, CONFIG_VERSION):
        changed.update(OLD_DEFAULTS.get(v, {}))
    fields = [d.split(":", 1)[0] for d in diffs]
    if not fields or not all(f.startswith("run.") and f[4:] in changed for f in fields):
        return None
    todays = _in_todays_terms(stored_run, version, new)
    flags = [changed[f[4:]][2] for f in fields if todays.get(f[4:]) == changed[f[4:]][1]]
    if len(flags) != len(fields):
        return None
    return (f"written with config version {version}, whose defaults differ from today's; resume it with "
            f"{' '.join(flags)} (or use another --out)")


class RunFolderError(ValueError):
    """A run folder that cannot be used for the requested run (another run's folder, unreadable files)."""


def _jsonable(obj: Any) -> Any:
    """Dataclasses → dicts, tuples → lists: the form a config has after a JSON round trip."""
    return json.loads(json.dumps(dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj, default=str))


def _diff(stored: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(stored) | set(new)):
            if key in IGNORED and not prefix.startswith("preset"):
                continue
            if key not in stored and new.get(key) is None:  # an optional field added after the run was made
                continue
            out += _diff(stored.get(key, "<absent>"), new.get(key, "<absent>"), f"{prefix}{key}.")
        return out
    return [] if stored == new else [f"{prefix[:-1]}: folder has {stored!r}, this run has {new!r}"]


class RunFolder:
    """One run's folder (module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        self.metrics = MetricsLog(self.path / "metrics.jsonl")

    @property
    def checkpoints(self) -> pathlib.Path:
        return self.path / "checkpoints"

    @property
    def params_dir(self) -> pathlib.Path:
        return self.path / "params"

    def read_json(self, name: str) -> dict | None:
        """``<run>/<name>`` as a dict, None when absent.

        Raises:
          RunFolderError: the file is not valid JSON or not an object (named).
        """
        path = self.path / name
        if not path.exists():
            return None
        try:
            return jsonio.read_json_object(path, "a JSON object")
        except ValueError as err:  # names the file and line
            raise RunFolderError(str(err)) from None

    def check(self, run: Any, preset: Any) -> bool:
        """Whether the folder already holds this run (False: empty or absent). Writes nothing.

        Raises:
          RunFolderError: the folder holds a different run (every differing field named), or files but no run.
        """
        new = {"run": _jsonable(run), "preset": _jsonable(preset)}
        stored = self.read_json("config.json")
        if stored is not None:
            version = stored.get("config_version", 1)
            if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= CONFIG_VERSION:
                raise RunFolderError(f"{self.path / 'config.json'}: config_version {version!r} is not one this "
                                     f"version of the library reads (1 .. {CONFIG_VERSION})")
            body = {k: v for k, v in stored.items() if k != "config_version"}
            if isinstance(body.get("run"), dict):
                body["run"] = _in_todays_terms(body["run"], version, new["run"])
            diffs = _diff(body, new)
            how = _how_to_resume(stored.get("run") or {}, version, new["run"], diffs) if diffs else None
            if how is not None:
                raise RunFolderError(f"{self.path}: {how}")
            if diffs:
                raise RunFolderError(f"{self.path} holds another run; refusing to resume it as this one (use another "
                                     f"--out or delete the folder):\n  " + "\n  ".join(diffs))
            return True
        if self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            raise RunFolderError(f"{self.path} is not an empty folder and holds no run config.json; refusing to "
                                 f"write a run into it")
        return False

    def start(self, run: Any, preset: Any) -> None:
        """Write ``config.json`` for a new run, or check that the folder's run is this one (:meth:`check`)."""
        if not self.check(run, preset) and jax.process_index() == 0:  # multi-host: one writer
            self.path.mkdir(parents=True, exist_ok=True)
            new = {"run": _jsonable(run), "preset": _jsonable(preset), "config_version": CONFIG_VERSION}
            jsonio.write_json_atomic(self.path / "config.json", new, indent=1)

    def final(self) -> dict | None:
        return self.read_json("final.json")

    def identity(self) -> dict:
        """``{"parent_run": <fingerprint of the stored config minus the fields that change no result>,
        "parent_step": <the finished run's step>}``: the provenance an artefact made from this run's parameters
        records (``cfka_jax.provenance``); the same run in another folder has the same identity.

        Raises:
          RunFolderError: the folder holds no finished run (no config.json or final.json).
        """
        from cfka_jax.provenance import fingerprint

        config, final = self.read_json("config.json"), self.final()
        if config is None or final is None:
            raise RunFolderError(f"{self.path} holds no finished run (config.json and final.json)")
        run = {k: v for k, v in (config.get("run") or {}).items() if k not in IGNORED}
        return {"parent_run": fingerprint({"run": run, "preset": config.get("preset")}),
                "parent_step": final.get("step")}

    def write_final(self, final: dict) -> None:
        if jax.process_index() != 0:
            return
        jsonio.write_json_atomic(self.path / "final.json", final, indent=1)

    def save_params(self, params: Any, step: int, held: tuple = ()) -> None:
        """Export the final parameters alone (``params/``), e.g. of a finished pre-training run; the leaves at the
        key paths ``held`` (frozen, re-created from the source model) are not stored (``train/checkpoint.save``)."""
        save(self.params_dir, params, step=step, force=True, held=held)

    def finish_checkpoints(self, keep: str, params: Any, step: int, held: tuple = ()) -> None:
        """What the finished run keeps (``--final-checkpoint``, ``train/checkpoint.FINAL_CHECKPOINTS``): ``full``
        changes nothing; ``params`` exports ``params`` (:meth:`save_params`) and then deletes the numbered
        checkpoints; ``none`` deletes them. After either, resuming the folder is refused with one line naming it."""
        if keep == "params":
            self.save_params(params, step, held=held)
        CheckpointDir(self.checkpoints).finish(keep, step)

    def load_params(self, abstract: Any) -> tuple[Any, int]:
        """``(params, step)`` exported by :meth:`save_params`, restored into the structure of ``abstract``.

        Raises:
          RunFolderError: no exported parameters in the folder; CheckpointError: of another structure.
        """
        if not (self.params_dir.is_dir() and (self.path / "final.json").exists()):
            raise RunFolderError(f"{self.path} holds no finished run with exported parameters (params/ and "
                                 f"final.json)")
        try:
            return restore(self.params_dir, abstract)
        except CheckpointError as err:
            raise RunFolderError(str(err)) from None

    def checkpoint_params(self, abstract: Any) -> tuple[Any, int]:
        """``(params, step)`` of the newest intact training checkpoint (its ``params`` subtree only).

        A run finished with ``--final-checkpoint params`` has no checkpoint left: its ``params/`` export is read.

        Raises:
          RunFolderError: no checkpoint; CheckpointError: of another structure.
        """
        ckpts = CheckpointDir(self.checkpoints)
        found = ckpts.restore_latest(abstract, under=("params",))
        if found is None and (ckpts.finished() or {}).get("final_checkpoint") == "params":
            return self.load_params(abstract)
        if found is None:
            raise RunFolderError(f"{self.checkpoints}: no checkpoint")
        return found
