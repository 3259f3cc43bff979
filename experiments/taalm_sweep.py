"""What the TAALM studies on each seed's ``cfka taalm`` folder share (``taalm_lr``, ``taalm_twiki``,
``taalm_phi_size``): the checks of their flags, each seed's ``cfka taalm`` config, the check of the study folder's
``config.json`` and the per-seed loop that rewrites the study's record after every run.

Each study reads seed N's θ0, sets and φ from ``--base-dirs`` (a template with ``{seed}`` and optionally
``{preset}``, default ``runs/taalm-{preset}-s{seed}``) and writes its own runs into ``--out``; a later call into the
same folder may add values of the study's resumable flags (seeds, methods, lrs, ...), never change the others.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable

from cfka_jax.experiments import taalm

from cfka_jax import jsonio


def distinct(*flags: tuple[str, tuple]) -> None:
    """Check each ``(flag, values)`` in turn: non-empty and without repeats.

    Raises:
      ValueError: the first flag whose values are empty or repeat (names the flag and its values).
    """
    for flag, values in flags:
        if not values or len(set(values)) != len(values):
            raise ValueError(f"{flag} must be non-empty without repeats, got {values}")


def base_dir(template: str, preset: str, seed: int) -> str:
    """Seed ``seed``'s folder: ``template`` with ``{preset}`` and ``{seed}`` filled in."""
    return template.format(preset=preset, seed=seed)


def seed_config(template: str, preset: str, seed: int, *, methods: tuple[str, ...],
                twiki_methods: tuple[str, ...], progress: bool) -> taalm.TaalmConfig:
    """Seed ``seed``'s ``cfka taalm`` config: ``preset`` in its base folder (``template``) with a study's LAMA-CKL
    ``methods`` and TemporalWiki ``twiki_methods``; every other setting the preset's, so the folder's config check
    passes."""
    cfg = taalm.preset(preset, base_dir(template, preset, seed))
    cfg = dataclasses.replace(cfg, methods=methods, twiki_methods=twiki_methods, progress=progress)
    return taalm.with_seed(cfg, seed)


def check_base_dirs(template: str, preset: str) -> None:
    """Check the ``--base-dirs`` template: it holds ``{seed}`` (one folder per seed) and no other field than
    ``{preset}``.

    Raises:
      ValueError: names ``--base-dirs`` and the template.
    """
    if "{seed}" not in template:
        raise ValueError(f"--base-dirs {template!r} must contain {{seed}} (one folder per seed)")
    try:
        base_dir(template, preset, 0)
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"--base-dirs {template!r}: only {{preset}} and {{seed}} may appear ({e})")


def check_folder(cfg, out: pathlib.Path, *, resumable: tuple[str, ...], what: str) -> None:
    """Refuse a study folder made with other settings, then write ``out/config.json`` (atomically) from ``cfg``.

    Settings are ``cfg``'s fields other than ``resumable`` (whose values may grow between calls) and ``out``; a
    field the folder's ``config.json`` lacks (an older study) is not compared. ``what`` describes the file in the
    error of an unreadable one.

    Raises:
      ValueError: names ``--out``, the file and the fields that differ.
    """
    new = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in resumable and k != "out"}
    path = out / "config.json"
    if path.exists():
        old = jsonio.read_json_object(path, what)
        diff = sorted(k for k in new if k in old and old[k] != new[k])
        if diff:
            raise ValueError(f"--out {out} was made with other settings ({path}: {', '.join(diff)} differ)")
    jsonio.write_json_atomic(path, dataclasses.asdict(cfg), indent=1)


def run(cfg, out: pathlib.Path, *, check: Callable, run_seed: Callable, write_record: Callable, tag: str) -> None:
    """A study's call: ``check(cfg, out)`` (the study's ``check_folder``), then ``run_seed(cfg, seed, out, on_run)``
    for each of ``cfg.seeds``, where ``on_run()`` (after every run) rewrites the record ``write_record(cfg, out)``
    when ``cfg.record`` and prints ``[tag] record PATH``."""
    check(cfg, out)

    def on_run():
        if cfg.record:
            print(f"[{tag}] record {write_record(cfg, out)}", flush=True)

    for seed in cfg.seeds:
        run_seed(cfg, seed, out, on_run)
