"""The stages of ``experiments/taalm.py`` (each resumes from the run folder): tokenizer, set selection, φ,
LAMA-CKL and TemporalWiki per method, reports. Library calls only."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import time

import numpy as np

from cfka_jax import jsonio
from cfka_jax.continual.ckl import Period, Stream, run_lama_ckl, run_temporalwiki
from cfka_jax.continual.ckl_methods import build_theta
from cfka_jax.continual.ckl_setup import meta_setup, merged_phi, pair_set
from cfka_jax.continual.taalm import doc_weights, load_phi, meta_train, save_phi
from cfka_jax.continual.taalm.phi import make_weights_fn, phi_trainable, split_trainable
from cfka_jax.data.ckl_encode import encode
from cfka_jax.data.lama_ckl import CKLSets, read_lama_ckl, select_ckl
from cfka_jax.data.temporalwiki import synthetic_periods
from cfka_jax.data.tokenize import load_tokenizer, train_word_tokenizer
from cfka_jax.provenance import KEY, check_made_from, fingerprint, tokenizer_fingerprint
from cfka_jax.experiments import taalm_report as report
from cfka_jax.runs.method import method_options, resolve

_RESUMABLE = ("progress", "methods", "twiki_methods", "out")


def _read(path: pathlib.Path) -> dict:
    """A result file of an earlier (interrupted) run; unreadable: one error naming the file and line."""
    return jsonio.read_json_object(path, "a TAALM result (JSON object)")


def slug(name: str) -> str:
    return name.lower().replace(" + ", "+").replace("(", "").replace(")", "").replace(" ", "-")


def check_config(out: pathlib.Path, cfg, *, write: bool = True) -> None:
    """Write ``config.json`` (``write=False``: only where it is absent); refuse a folder made with different
    settings (method lists may change)."""
    new = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _RESUMABLE}
    path = out / "config.json"
    if path.exists():
        old = {k: v for k, v in _read(path).items() if k not in _RESUMABLE}
        new = json.loads(json.dumps(new))
        diff = sorted(k for k in set(new) & set(old) if new[k] != old[k])  # fields added since the folder pass
        if diff:
            raise ValueError(f"--out {out} was made with other settings ({path}: {', '.join(diff)} differ); use "
                             f"another --out")
        if not write:
            return
    jsonio.write_json_atomic(path, dataclasses.asdict(cfg), indent=1, default=float)


def tokenizer(out: pathlib.Path, world):
    folder = out / "tokenizer"
    if folder.is_dir():
        return load_tokenizer(folder)
    tmp = out / "tokenizer.tmp"  # trained aside and renamed whole: a kill never leaves a half-written tokenizer
    shutil.rmtree(tmp, ignore_errors=True)
    train_word_tokenizer(world.tokenizer_texts(), tmp)
    tmp.rename(folder)
    return load_tokenizer(folder)


def select_sets(out: pathlib.Path, world, score_fn, strict: bool) -> CKLSets:
    folder = out / "lama_ckl"
    names = ("variant", "invariant_descriptive", "train_attention_traindata")
    if (folder / "stats.json").exists():
        rows = [read_lama_ckl(folder / f"{n}.jsonl") for n in names]
        return CKLSets(*rows, _read(folder / "stats.json"))
    sets = select_ckl(world, score_fn(), strict=strict)
    sets.write(folder)
    jsonio.write_json_atomic(folder / "stats.json", sets.stats, indent=1, default=float)
    return sets


@dataclasses.dataclass
class PhiHandle:
    """φ's pure weights function and pytrees (for per-document weights)."""

    weights_fn: object
    train: object
    frozen: object

    def docs(self, enc) -> tuple[np.ndarray, ...]:
        return doc_weights(self.weights_fn, self.train, self.frozen, enc)


def phi_stage(out: pathlib.Path, cfg, model, tok, sets: CKLSets, *, body=None, body_made_from: dict | None = None):
    """Meta-train φ against θ0 = ``model`` + LoRA (or load ``out/phi``). φ's base is a copy of ``model`` (``cfka
    taalm``) or ``body``, a decoder of any size over θ0's token ids (``taalm_phi_size``): its vocabulary must be
    θ0's and ``body_made_from`` (its provenance, recorded in φ's as ``phi_body``) must hold ``tok``'s content hash
    under ``"tokenizer"``, else one error names the folder."""
    folder = out / "phi"
    made_from = {"tokenizer": tokenizer_fingerprint(tok), "world": fingerprint(dataclasses.asdict(cfg.data)),
                 "theta0": fingerprint([dataclasses.asdict(cfg.model), dataclasses.asdict(cfg.pt)])}
    if body is not None:
        check_made_from(body_made_from, {"tokenizer": made_from["tokenizer"]}, flag="φ's base", folder=out)
        if body.cfg.vocab_size != model.cfg.vocab_size:
            raise ValueError(f"{out}: φ's base has {body.cfg.vocab_size} token ids, θ0 {model.cfg.vocab_size}; φ's "
                             f"weights reach θ by token id, so both must share a tokenizer")
        made_from["phi_body"] = fingerprint(body_made_from)
    if (folder / "phi.json").exists():
        check_made_from(_read(folder / "phi.json").get(KEY), made_from, flag="--out", folder=folder)
        phi, _, _ = load_phi(folder)
    else:
        setup = meta_setup(model, cfg.phi, cfg.theta_lora, lora_seed=cfg.lora_seed, phi_body=body)
        pairs = pair_set(tok, sets.ta_train)
        t0 = time.perf_counter()
        res = meta_train(setup.fns, setup.phi_train, setup.ops, pairs, cfg.metatrain, progress=cfg.progress)
        phi = merged_phi(setup, res.phi)
        jsonio.write_json_atomic(out / "metatrain.json", {
            "best_step": res.best_step, "wall_s": time.perf_counter() - t0, "history": res.history,
            "validation": res.validation}, indent=1, default=float)
        # phi.json last: its presence marks a finished stage (a kill before it re-runs the stage)
        save_phi(folder, phi, cfg.phi, step=res.best_step, extra={"pairs": len(pairs.d)}, made_from=made_from)
    pg, train, frozen, rest = split_trainable(phi, phi_trainable(phi, lora=cfg.phi.lora is not None))
    return phi, PhiHandle(make_weights_fn(pg, rest), train, frozen)


def _stream(tok, records, handle: PhiHandle, text: str = "evidence") -> Stream:
    enc = encode(tok, [getattr(r, text) for r in records], [r.object for r in records])
    return Stream(enc, handle.docs(enc))


def review_records(world, sets: CKLSets, source: str, n: int):
    """Mix-review documents: the NOT-TO-FORGET facts' own evidence (reference) or evidence of other invariant
    facts (``disjoint``)."""
    if source == "not_to_forget":
        return sets.not_to_forget
    used = {r.uuid for r in sets.not_to_forget}
    return tuple(r for r in world.nf_candidates if r.uuid not in used)[:n]


def lama_streams(cfg, tok, sets: CKLSets, handle: PhiHandle, world) -> tuple[Stream, Stream]:
    """LAMA-CKL's training stream (the TO-LEARN evidence) and Mix-review's review stream."""
    review = _stream(tok, review_records(world, sets, cfg.review, len(sets.not_to_forget)), handle)
    return _stream(tok, sets.to_learn, handle), review


def descriptive_probes(tok, **named_rows) -> dict:
    """``{name: the descriptive probes of rows}`` (spec §5.4: every set is scored on ``task_descriptive``)."""
    return {name: encode(tok, [r.task_descriptive for r in rows], [r.object for r in rows])
            for name, rows in named_rows.items()}


def lama_method(cfg, name: str, ckl, model, stream: Stream, probes: dict, review: Stream) -> dict:
    """One method's LAMA-CKL run at the settings ``ckl`` (its lr and epochs recorded in the result)."""
    method = resolve(name, "ckl", method_options(rho_k=ckl.rho_k))
    t0 = time.perf_counter()
    theta = build_theta(model, method, cfg.theta_lora, ckl.kadapter, lora_seed=cfg.lora_seed)
    res = run_lama_ckl(theta, method, stream, probes, ckl, review=review)
    res.update(lr=ckl.lr, epochs=ckl.epochs, wall_s=time.perf_counter() - t0)
    return res


def lama_stage(out: pathlib.Path, cfg, model, tok, sets: CKLSets, handle: PhiHandle, world) -> dict:
    stream, review = lama_streams(cfg, tok, sets, handle, world)
    probes = descriptive_probes(tok, to_learn=sets.to_learn, not_to_forget=sets.not_to_forget)
    results = {}
    for name in cfg.methods:
        path = out / "lama" / f"{slug(name)}.json"
        if path.exists():
            results[name] = _read(path)
            continue
        res = lama_method(cfg, name, cfg.ckl_for(name), model, stream, probes, review)
        jsonio.write_json_atomic(path, res, indent=1, default=float)
        results[name] = res
        s = res["summary"]
        print(f"[taalm] LAMA-CKL {name} (lr {res['lr']:g}, {res['epochs']} epochs): Top Acc {s['top_acc']:.4f} "
              f"(epoch {s['epoch']}), NF Acc {s['nf_acc']:.4f}, {res['wall_s']:.0f}s", flush=True)
    return results


def twiki_streams(cfg, tok, world, handle: PhiHandle) -> tuple[list[Period], Stream]:
    """TemporalWiki's periods (each period's diff documents with φ's weights, its changed and unchanged probes)
    and the review stream of Mix-review (200 PT texts drawn with the world's seed); the same for every method."""
    periods = []
    for p in synthetic_periods(world, unchanged_per_period=cfg.unchanged_per_period, seed=cfg.data.seed):
        enc = encode(tok, list(p.docs), list(p.objects))
        probe = lambda ps: encode(tok, [x.text() for x in ps], [x.object for x in ps])  # noqa: E731
        periods.append(Period(p.name, Stream(enc, handle.docs(enc)), probe(p.changed), probe(p.unchanged)))
    rng = np.random.default_rng(cfg.data.seed)
    old = [world.pt_texts[i] for i in rng.choice(len(world.pt_texts), size=min(200, len(world.pt_texts)),
                                                 replace=False)]
    old_enc = encode(tok, old)
    return periods, Stream(old_enc, handle.docs(old_enc))


def twiki_method(cfg, name: str, twiki, model, periods: list[Period], review: Stream) -> list[dict]:
    """One method's TemporalWiki run at the settings ``twiki`` (its lr and epochs per period): one record per
    period, the object NLL and accuracy of its probes before and after that period's training."""
    method = resolve(name, "ckl", method_options(rho_k=twiki.rho_k))
    theta = build_theta(model, method, cfg.theta_lora, twiki.kadapter, lora_seed=cfg.lora_seed)
    return run_temporalwiki(theta, method, periods, twiki, review=review)


def twiki_stage(out: pathlib.Path, cfg, model, tok, world, handle: PhiHandle, sets: CKLSets) -> dict:
    periods, review = twiki_streams(cfg, tok, world, handle)
    results = {}
    for name in cfg.twiki_methods:
        path = out / "twiki" / f"{slug(name)}.json"
        if path.exists():
            results[name] = jsonio.read_json(path)
            if not isinstance(results[name], list) or not results[name]:
                raise ValueError(f"{path}: expected a non-empty JSON list of periods (a damaged result file)")
            continue
        results[name] = twiki_method(cfg, name, cfg.twiki_for(name), model, periods, review)
        jsonio.write_json_atomic(path, results[name], indent=1, default=float)
        last = results[name][-1]["after"]
        print(f"[taalm] TemporalWiki {name}: last period changed/unchanged NLL {last['changed/nll']:.3f} / "
              f"{last['unchanged/nll']:.3f}", flush=True)
    return results


def weight_stats(handle: PhiHandle, tok, records) -> dict:
    """φ's weights on the evidence of ``records`` (BOS excluded): the mean on the object tokens and on the other
    targets (with the others' 90th percentile), and per document the object share Σ_object w / Σ w (its minimum
    and median; TWPPL sees only these relative weights) and how many documents have Σ w below 1e-5, where TWPPL's
    1e-6 floor starts to shrink the document's loss."""
    enc = encode(tok, [r.evidence for r in records], [r.object for r in records])
    ws = handle.docs(enc)
    objs = [w[1:][m[1:] > 0] for w, m in zip(ws, enc.object_mask)]
    rests = [w[1:][m[1:] == 0] for w, m in zip(ws, enc.object_mask)]
    obj, rest = np.concatenate(objs), np.concatenate(rests)
    totals = np.array([o.sum() + r.sum() for o, r in zip(objs, rests)], np.float64)
    share = np.array([o.sum() for o in objs], np.float64) / np.maximum(totals, np.finfo(np.float64).tiny)
    return {"w_object_mean": float(obj.mean()), "w_other_mean": float(rest.mean()),
            "w_other_p90": float(np.quantile(rest, 0.9)), "object_tokens": int(obj.size), "docs": len(ws),
            "object_share_min": float(share.min()), "object_share_median": float(np.median(share)),
            "docs_total_below_1e-5": int((totals < 1e-5).sum())}


def read_phi(out: pathlib.Path) -> tuple[object, CKLSets, PhiHandle]:
    """The tokenizer, selected sets and φ of a finished run folder, read without writing anything (a φ made with
    another tokenizer is refused, naming the folder)."""
    names = ("variant", "invariant_descriptive", "train_attention_traindata")
    folder = out / "lama_ckl"
    if not (folder / "stats.json").exists() or not (out / "phi" / "phi.json").exists():
        raise ValueError(f"{out}: no finished set selection and φ (lama_ckl/stats.json, phi/phi.json)")
    tok = load_tokenizer(out / "tokenizer")
    sets = CKLSets(*[read_lama_ckl(folder / f"{n}.jsonl") for n in names], _read(folder / "stats.json"))
    check_made_from(_read(out / "phi" / "phi.json").get(KEY), {"tokenizer": tokenizer_fingerprint(tok)},
                    flag="--record-dirs", folder=out / "phi")
    phi, cfg, _ = load_phi(out / "phi")
    pg, train, frozen, rest = split_trainable(phi, phi_trainable(phi, lora=cfg.lora is not None))
    return tok, sets, PhiHandle(make_weights_fn(pg, rest), train, frozen)


def write_reports(out: pathlib.Path, cfg, lama: dict, tw: dict, sets: CKLSets, pt_record: dict,
                  handle: PhiHandle, tok) -> None:
    stats = weight_stats(handle, tok, sets.to_learn)
    meta_path = out / "metatrain.json"
    meta = _read(meta_path) if meta_path.exists() else {}
    oracle_misses = encode(tok, [r.evidence for r in sets.to_learn], [r.object for r in sets.to_learn]).empty
    summary = {"preset": cfg.preset, "selection": sets.stats, "pt_final": pt_record, "phi_weights": stats,
               "oracle_empty_masks": oracle_misses,
               "phi_best_step": meta.get("best_step"), "phi_validation": meta.get("validation"),
               "lama": {k: v["summary"] for k, v in lama.items()},
               "twiki": {k: [{"period": r["period"], "before": r["before"], "after": r["after"]} for r in v]
                         for k, v in tw.items()}}
    jsonio.write_json_atomic(out / "table.json", summary, indent=1, default=float)
    text = (f"# TAALM, preset {cfg.preset}\n\nSelection: {json.dumps(sets.stats)}; empty Oracle object masks: "
            f"{oracle_misses}\n\n"
            f"φ weights on TO-LEARN evidence: object tokens {stats['w_object_mean']:.3f}, other tokens "
            f"{stats['w_other_mean']:.3f} (90th percentile {stats['w_other_p90']:.3f}); φ checkpoint of meta-step "
            f"{meta.get('best_step')}\n\n## LAMA-CKL (ours vs paper, Llama-2-7B)\n\n{report.lama_markdown(lama)}\n\n"
            f"## TemporalWiki (changed / unchanged object NLL; paper: TinyLlama-1.1B)\n\n{report.twiki_markdown(tw)}\n")
    jsonio.write_text_atomic(out / "table.md", text)
    if lama:
        report.plot_accuracy(lama, out / "accuracy.png")
    rows = []
    enc = encode(tok, [r.evidence for r in sets.to_learn[:cfg.heatmap_docs]],
                 [r.object for r in sets.to_learn[:cfg.heatmap_docs]])
    for ids, w, m in zip(enc.ids, handle.docs(enc), enc.object_mask):
        rows.append((tok.convert_ids_to_tokens([int(i) for i in ids[1:]]), w[1:].tolist(), m[1:].tolist()))
    if rows:
        report.plot_heatmap(rows, out / "phi_heatmap.png")
