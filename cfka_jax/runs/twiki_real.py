"""TemporalWiki on the real files with a local HF model (spec taalm.md §8): the recipe behind
``cfka taalm --temporalwiki DIR --model HF_DIR``.

Folder layout (the reference's ``data/TemporalWiki``; each file looked for in these places, first found wins):

* probes, per period p ∈ 0901-1001, 1001-1101, 1101-1201: ``DIR/eval/{p}_{changed,unchanged}.jsonl`` or
  ``DIR/{p}_{changed,unchanged}.jsonl`` (records ``{subject, relation, object}``, scored in the schematic form);
* the diff-set stream of period d ∈ 0910, 1011, 1112: ``DIR/train/diffset_{d}_filtered.jsonl`` (``{"text"}``,
  the reference's preprocessed files), else the CSV ``DIR/TWiki_Diffsets/wikipedia_{d}_gpt2.csv`` or
  ``DIR/wikipedia_{d}_gpt2.csv`` filtered as the reference does (``data.temporalwiki.read_diffset_csv``).

Protocol: θ carried across the three periods; a fresh optimiser per period (RecAdam's schedule restarts too);
``ckl.epochs`` (1) epochs over the period's stream; before and after each period the period's changed and
unchanged probes are scored (mean object-token NLL, not exponentiated, lower is better; accuracy too).
Diff-set documents carry no object, so Oracle is refused; Mix-review replays ``spec.review`` (the reference's
Wikipedia_Full sample, given as a file) and is refused without it.

Resuming: after each period θ's trainable pytree and the PRNG key are checkpointed (``out/twiki/<slug>/``) next to
the period records (written first, atomically); a killed run restarts at the first unfinished period.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import time

from cfka_jax import jsonio
from cfka_jax.continual.ckl import Stream, Trainer, updates_per_epoch
from cfka_jax.continual.ckl_methods import review_of
from cfka_jax.data.ckl_encode import encode
from cfka_jax.data.io import iter_jsonl
from cfka_jax.data.temporalwiki import PERIODS, PROBE_PERIODS, read_diffset_csv, read_probes
from cfka_jax.runs.ckl_real import (Placement, RealCKLSpec, _read_list, check_folder, check_theta, load_lm,
                                    phi_inputs, phi_stage, slug, start_folder, stream_of, theta_for)
from cfka_jax.train.checkpoint import CheckpointDir


def _first(root: str, *names: str) -> str | None:
    return next((os.path.join(root, n) for n in names if os.path.isfile(os.path.join(root, n))), None)


def read_texts(path: str) -> list[str]:
    """Documents of a ``{"text"}`` JSONL file or a diff-set CSV (column 0, the reference's filter).

    Raises:
        ValueError: a record without a non-empty string ``text`` (naming file and line).
    """
    if path.endswith(".csv"):
        return read_diffset_csv(path)
    out = []
    for where, rec in iter_jsonl(path):
        if not isinstance(rec.get("text"), str) or not rec["text"].strip():
            raise ValueError(f"{where}: field 'text' must be a non-empty string")
        out.append(rec["text"])
    return out


def twiki_files(root: str) -> list[dict]:
    """Per period: ``{"name", "stream", "changed", "unchanged"}`` paths (module docstring).

    Raises:
        FileNotFoundError: a missing file, naming every place it was looked for.
    """
    out = []
    for d, p in zip(PERIODS, PROBE_PERIODS):
        rec = {"name": d}
        for kind in ("changed", "unchanged"):
            names = (f"eval/{p}_{kind}.jsonl", f"{p}_{kind}.jsonl")
            rec[kind] = _first(root, *names)
            if rec[kind] is None:
                raise FileNotFoundError(f"--temporalwiki {root}: no {kind} probes of {p} (looked for "
                                        f"{', '.join(names)})")
        names = (f"train/diffset_{d}_filtered.jsonl", f"TWiki_Diffsets/wikipedia_{d}_gpt2.csv",
                 f"wikipedia_{d}_gpt2.csv")
        rec["stream"] = _first(root, *names)
        if rec["stream"] is None:
            raise FileNotFoundError(f"--temporalwiki {root}: no diff set of period {d} (looked for {', '.join(names)})")
        out.append(rec)
    return out


def _check_methods(spec: RealCKLSpec) -> None:
    for name, m in zip(spec.methods, spec.resolved):
        if m.hooks.documents is not None and spec.review is None:
            raise ValueError(f"--methods {name}: Mix-review on TemporalWiki needs --review FILE (the replayed "
                             f"documents)")


def resumable_twiki(folder: pathlib.Path, trainer: Trainer, periods: list[dict], review: Stream | None,
                    epochs: int) -> list[dict]:
    """The per-period records of one method, checkpointed per period (module docstring)."""
    ckpts, rec_path = CheckpointDir(folder / "checkpoints", keep=1), folder / "periods.json"
    records = _read_list(rec_path, "period") if rec_path.exists() else []
    restored = ckpts.restore_latest({"params": trainer.state.params, "key": trainer.key})
    done = 0
    if restored is not None:
        tree, done = restored
        trainer.state = trainer.state._replace(params=tree["params"])
        trainer.key = tree["key"]
    records = records[:done]
    for i, p in enumerate(periods[done:], start=done + 1):
        probes = {"changed": p["changed"], "unchanged": p["unchanged"]}
        t0 = time.perf_counter()
        before = trainer.score(probes)
        trainer.fresh_optimizer()
        losses = [trainer.train_epoch(p["stream"], review, e) for e in range(1, epochs + 1)]
        records.append({"period": p["name"], "train_loss": sum(losses) / max(len(losses), 1),
                        "docs": len(p["stream"].docs), "before": before, "after": trainer.score(probes),
                        "period_s": time.perf_counter() - t0})
        jsonio.write_json_atomic(rec_path, records, indent=1, default=float)
        ckpts.save(i, {"params": trainer.state.params, "key": trainer.key})
    return records


def run_twiki(spec: RealCKLSpec) -> dict:
    """Every method of ``spec`` on the TemporalWiki folder; returns {method: [per-period records]}."""
    _check_methods(spec)
    files = twiki_files(spec.temporalwiki)
    out = check_folder(spec)  # every input is resolved before --out is written
    where = Placement.of(spec)
    model, tok = load_lm(spec.model, spec.dtype)
    check_theta(spec, model)
    phi = phi_inputs(out, spec, model, tok)
    texts_of, probes_of = {}, {}
    for f in files:  # every file is read (a malformed line named) before anything is written
        texts_of[f["name"]] = read_texts(f["stream"])[:spec.max_docs] if spec.max_docs else read_texts(f["stream"])
        if not texts_of[f["name"]]:
            raise ValueError(f"{f['stream']}: no documents after the filter")
        for kind in ("changed", "unchanged"):
            rows = read_probes(f[kind])[:spec.limit] if spec.limit else read_probes(f[kind])
            probes_of[f["name"], kind] = rows
    review_texts = None
    if spec.review is not None and any(m.hooks.documents is not None for m in spec.resolved):
        review_texts = read_texts(spec.review)
    start_folder(spec)
    handle = phi_stage(out, spec, model, tok, phi)
    periods = []
    for f in files:
        probe = {kind: encode(tok, [r.text() for r in rows], [r.object for r in rows], max_length=1 << 30)
                 for kind in ("changed", "unchanged") for rows in [probes_of[f["name"], kind]]}
        periods.append({"name": f["name"], "stream": stream_of(tok, texts_of[f["name"]], None, handle,
                                                               spec.max_length), **probe})
    review = None if review_texts is None else stream_of(tok, review_texts, None, handle, spec.max_length)
    results = {}
    for name, method in zip(spec.methods, spec.resolved):
        path = out / "twiki" / f"{slug(name)}.json"
        if path.exists():
            results[name] = _read_list(path, "period")
            continue
        theta = where.theta(theta_for(model, method, spec))
        per_period = max(spec.ckl.epochs * updates_per_epoch(len(p["stream"].docs), spec.ckl) for p in periods)
        trainer = Trainer(theta, method, spec.ckl, per_period, put=where.put())
        records = resumable_twiki(out / "twiki" / slug(name), trainer, periods, review_of(method, review),
                                  spec.ckl.epochs)
        jsonio.write_json_atomic(path, records, indent=1, default=float)
        shutil.rmtree(out / "twiki" / slug(name), ignore_errors=True)
        results[name] = records
        if spec.progress:
            last = records[-1]["after"]
            print(f"[taalm] TemporalWiki {name}: last period changed/unchanged NLL {last['changed/nll']:.3f} / "
                  f"{last['unchanged/nll']:.3f}", flush=True)
    return results
