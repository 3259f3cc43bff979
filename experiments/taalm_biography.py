"""TAALM beyond the reference: φ's token weights in a Biography CPT run with replay, over study seeds and PT
replicates.

    cfka taalm --biography PT_DIR --preset smoke|small --out DIR [--method replay-all] [--phi-only] [--seeds 0,1,2]
    cfka taalm --biography runs/bio-s3 --pt-seeds 0,1 --seeds 0,1,2 --preset small --out runs/taalm-bio-s3 \
        --plain-dirs "runs/bio-s3/cpt-replay-all-full/pt{pt}-seed{seed}" --record taalm/biography_phi_small

One replicate per (PT model, study seed): without ``--pt-seeds`` the PT model is ``PT_DIR`` and replicate ``s`` runs
in ``DIR/seed<s>``; with ``--pt-seeds`` ``PT_DIR`` holds the PT replicates ``PT_DIR/pt-seed<k>`` (``cfka bio-table
--pt-seeds``, ``experiments/replicates.py``) and replicate (k, s) runs in ``DIR/pt<k>-seed<s>``. Study seed ``s``
moves every seed of φ (its head and adapters, the inner θ's LoRA, the meta-training key, validation split and pair
order: :data:`SEED_FIELDS`) by 1000·s and is the CPT seed of the three CPT runs; the made-up people and their pairs
(``pair_seed``) stay the same. A finished replicate (its ``table.json``) is skipped when the study runs again;
``--record`` rewrites the produced record from every finished replicate after each one
(``experiments/taalm_bio_record.py``).

Stages of one replicate (each resumes from its folder ``R``):

1. ``R/phi``: φ (a copy of the PT model with LoRA and the scalar head) meta-trained on (D, T_D) pairs of people
   made up from the world's name parts and attribute values (``continual/taalm/biography.py``): never a CPT
   person, so φ never sees the facts Continual FTA measures; ``R/metatrain.json`` logs it. The inner θ is
   the PT model with LoRA (``adamw2_ref``), as in ``cfka taalm``'s LAMA-CKL φ.
2. ``R/cpt-<method>``, ``R/cpt-<method>-phi`` (and ``-uniform``): the same CPT run
   (``runs.biography.continual``, same spec, data, replay and seed) with the plain next-token loss, with TWPPL
   under φ's weights, computed inside the jitted step from the batch's tokens (what ``cfka cpt --token-weights
   R/phi`` does), and (``uniform_control``) with TWPPL at w = 1, which isolates TWPPL's per-row normalisation.
   ``plain_dir`` (``--plain-dirs``): the plain run is read from that finished folder instead, after checking that
   it holds the same run (``RunFolder.check``: same spec, PT run and seed), e.g. ``cfka bio-table``'s replay-all
   cell.
3. ``R/table.md`` / ``table.json``: Continual and Original sFTA/hFTA (and EM) of the runs at the end and at each
   evaluation; φ's mean weight on the value tokens and on the other tokens of the CPT training biographies;
   ``R/phi_heatmap.png``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags
from cfka_jax.continual.ckl_setup import meta_setup, merged_phi
from cfka_jax.continual.peft import LoRAConfig
from cfka_jax.continual.taalm import AdamWConfig, MetaConfig, MetaTrainConfig, PhiConfig, meta_train, save_phi
from cfka_jax.continual.taalm.biography import biography_pairs, extra_people
from cfka_jax.continual.taalm.twppl import twppl_loss
from cfka_jax.continual.taalm.weights import phi_token_weights
from cfka_jax.data.biography import load_templates
from cfka_jax.data.pipeline import build_data
from cfka_jax.eval.batches import right_pad
from cfka_jax.provenance import KEY, check_made_from, fingerprint, tokenizer_fingerprint
from cfka_jax.runs.biography import build_model, continual
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import CPTSpec
from cfka_jax.train.step import master_params
from cfka_jax.experiments import replicates as rep
from cfka_jax.experiments import taalm_report as report
from cfka_jax.experiments.taalm import SEED_STRIDE, get_field, set_field

METRICS = ("Continual/sFTA", "Continual/hFTA", "Original/sFTA", "Original/hFTA", "Continual/EM", "Original/EM")


@dataclasses.dataclass(frozen=True)
class BioTaalmConfig:
    """One ``cfka taalm --biography`` run (presets below)."""

    preset: str = "small"
    pt_dir: str = "runs/taalm-bio/pt-small-qwen"
    out: str = "runs/taalm-bio"
    cache_dir: str = "runs/taalm-bio/data-cache"
    method: str = "replay-all"
    people: int = 150
    probes_per_person: int = 2
    pair_seed: int = 1
    theta_lora: LoRAConfig = LoRAConfig(rank=16, alpha=4.0, dropout=0.1)
    phi: PhiConfig = PhiConfig(lora=LoRAConfig(rank=16, alpha=4.0, dropout=0.1))
    metatrain: MetaTrainConfig = MetaTrainConfig(epochs=6, meta_batch=8, val_size=16, val_every=10, val_lr=3e-3,
                                                 outer=AdamWConfig(lr=2e-2), meta=MetaConfig(pair_chunk=4))
    heatmap_docs: int = 2
    uniform_control: bool = True
    progress: bool = True
    seed: int = 0
    lora_seed: int = 0
    plain_dir: str | None = None

    def __post_init__(self):
        CPTSpec(preset=self.preset, method=self.method, seed=self.seed)  # validates preset, method and seed
        if self.people < 1 or self.probes_per_person < 1 or self.heatmap_docs < 0:
            raise ValueError("people and probes_per_person must be >= 1, heatmap_docs >= 0")


SEED_FIELDS = ("phi.seed", "lora_seed", "metatrain.seed", "metatrain.split_seed", "metatrain.order_seed")
"""The seeds of φ a study seed moves (``taalm.SEED_STRIDE`` apart): φ's head and adapters, the inner θ's LoRA, the
meta-training key, its validation split and pair order. The CPT seed is the study seed itself (``cfka bio-table``'s
``--seeds``, so a plain run of that study is the same run); ``pair_seed`` (the made-up people) is not moved."""


def with_seed(cfg: BioTaalmConfig, seed: int) -> BioTaalmConfig:
    """``cfg`` at study seed ``seed``: each of :data:`SEED_FIELDS` at its seed-0 value plus ``SEED_STRIDE · seed``,
    CPT seed ``seed`` (``with_seed(cfg, 0) == cfg`` for a preset)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_STRIDE:
        raise ValueError(f"--seeds: each seed must be an integer in [0, {SEED_STRIDE}), got {seed!r}")
    shift = SEED_STRIDE * (seed - cfg.seed)
    for path in SEED_FIELDS:
        cfg = set_field(cfg, path, get_field(cfg, path) + shift)
    return dataclasses.replace(cfg, seed=seed)


PRESETS = {
    "smoke": lambda: BioTaalmConfig(
        preset="smoke", people=12, uniform_control=False, probes_per_person=2, theta_lora=LoRAConfig(rank=4, alpha=1.0, dropout=0.1),
        phi=PhiConfig(lora=LoRAConfig(rank=4, alpha=1.0, dropout=0.1)), heatmap_docs=1,
        metatrain=MetaTrainConfig(epochs=1, meta_batch=4, val_size=4, val_every=2, max_steps=2, val_epochs=1)),
    "small": BioTaalmConfig,
}


def pt_model(cfg: BioTaalmConfig, bundle) -> nnx.Module:
    """The finished PT run's model (``runs/folder.RunFolder``; its step must be the preset's)."""
    p = BIOGRAPHY[cfg.preset]
    model = build_model(p, "qwen", len(bundle.tokenizer), 0)
    abstract = master_params(nnx.split(model, nnx.Param, ...)[1])
    params, step = RunFolder(cfg.pt_dir).load_params(abstract)
    if step != p.pt.steps:
        raise ValueError(f"{cfg.pt_dir} holds PT parameters of step {step}, preset {cfg.preset} has {p.pt.steps}")
    nnx.update(model, params)
    return model


def made_from(cfg: BioTaalmConfig, bundle) -> dict:
    """φ's provenance: the tokenizer, the world, the PT run it starts from (its identity and step) and the pairs."""
    return {"tokenizer": tokenizer_fingerprint(bundle.tokenizer), "world": fingerprint(
        dataclasses.asdict(bundle.world.config)), **RunFolder(cfg.pt_dir).identity(),
        "pairs": fingerprint([cfg.people, cfg.probes_per_person, cfg.pair_seed, dataclasses.asdict(cfg.phi),
                              dataclasses.asdict(cfg.theta_lora), dataclasses.asdict(cfg.metatrain)]
                             + ([cfg.lora_seed] if cfg.lora_seed else []))}


def phi_stage(cfg: BioTaalmConfig, bundle, model) -> pathlib.Path:
    """Meta-train φ on made-up people's pairs (module docstring), unless ``out/phi`` holds the φ of this PT run
    and these settings (another one is refused, naming ``--biography`` and the folder)."""
    out = pathlib.Path(cfg.out)
    folder = out / "phi"
    expected = made_from(cfg, bundle)
    if (folder / "phi.json").exists():
        meta = jsonio.read_json_object(folder / "phi.json", "a φ record (JSON object)")
        check_made_from(meta.get(KEY), expected, flag=f"--biography {cfg.pt_dir} with --out", folder=folder)
        return folder
    people = extra_people(bundle.world, cfg.people, seed=cfg.pair_seed)
    pairs, stats = biography_pairs(people, load_templates(bundle.world.config), bundle.tokenizer,
                                   probes_per_person=cfg.probes_per_person, seed=cfg.pair_seed)
    setup = meta_setup(model, cfg.phi, cfg.theta_lora, lora_seed=cfg.lora_seed)
    t0 = time.perf_counter()
    res = meta_train(setup.fns, setup.phi_train, setup.ops, pairs, cfg.metatrain, progress=cfg.progress)
    jsonio.write_json_atomic(out / "metatrain.json", {
        "best_step": res.best_step, "wall_s": time.perf_counter() - t0, "pairs": stats, "history": res.history,
        "validation": res.validation}, indent=1, default=float)
    save_phi(folder, merged_phi(setup, res.phi), cfg.phi, step=res.best_step, extra={"pairs": stats},
             made_from=expected)  # phi.json last: it marks a finished stage
    return folder


def value_weight_stats(weights, bundle, split: str = "cpt_train", docs: int = 64):
    """φ's mean weight on the value tokens and on the other tokens of the first ``docs`` biographies of
    ``split`` (each read alone, BOS = EOS prepended, right-padded into one batch), and the (tokens, weights,
    value mask) rows."""
    tok_split, eos = bundle.splits[split], bundle.eos_id
    seqs = [np.concatenate([[eos], d]).astype(np.int32) for d in tok_split.docs()[:docs]]
    tokens, _ = right_pad(seqs, np.arange(len(seqs)), pad_id=eos)
    w_all = np.asarray(weights({"tokens": tokens, "positions": np.broadcast_to(
        np.arange(tokens.shape[1], dtype=np.int32), tokens.shape)}))
    rows, val, other = [], [], []
    for i, ids in enumerate(seqs):
        mask = np.zeros(len(ids), np.float32)
        for start, end in _value_spans(tok_split, i):
            mask[1 + start:1 + end] = 1.0
        w = w_all[i, :len(ids)]
        val.append(w[1:][mask[1:] > 0])
        other.append(w[1:][mask[1:] == 0])
        rows.append((bundle.tokenizer.convert_ids_to_tokens([int(x) for x in ids[1:]]), w[1:].tolist(),
                     mask[1:].tolist()))
    val_all, other_all = np.concatenate(val), np.concatenate(other)
    return {"docs": len(rows), "w_value_mean": float(val_all.mean()), "w_other_mean": float(other_all.mean()),
            "w_other_p90": float(np.quantile(other_all, 0.9)),
            "value_share_median": float(np.median([v.sum() / (v.sum() + o.sum()) for v, o in zip(val, other)])),
            "value_fraction_median": float(np.median([v.size / (v.size + o.size) for v, o in zip(val, other)]))}, rows


def _value_spans(split, i: int):
    """Token spans [start, end) of the attribute values of document ``i`` (``TokenizedSplit.idx`` / ``idx2``)."""
    return [(int(a), int(b)) for a, b in zip(split.idx[i], split.idx2[i])]


EWC_OPTIONS = ("ewc_lambda", "ewc_fisher", "ewc_batches")
"""Spec fields only an EWC method reads: a reused plain run of another method may hold other values."""


def plain_run(cfg: BioTaalmConfig, spec: CPTSpec) -> dict | None:
    """The final record of the plain run of ``spec`` in ``cfg.plain_dir`` (another study's finished folder of the
    same run, EWC's options aside when the method has no EWC), or None without ``plain_dir``.

    Raises:
      RunFolderError: the folder holds another run (every differing field named).
      ValueError: the folder holds no finished run of it (names ``--plain-dirs`` and the folder).
    """
    if cfg.plain_dir is None:
        return None
    reused = dataclasses.replace(spec, out=cfg.plain_dir)
    folder = RunFolder(cfg.plain_dir)
    if not any(c.name == "ewc" for c in spec.resolved.components):  # EWC's options change nothing here
        stored = (folder.read_json("config.json") or {}).get("run") or {}
        reused = dataclasses.replace(reused, **{k: stored[k] for k in EWC_OPTIONS if k in stored})
    if not folder.check(reused, reused.scale) or folder.final() is None:
        raise ValueError(f"--plain-dirs: {cfg.plain_dir} holds no finished run of this plain CPT (seed {spec.seed}, "
                         f"PT {spec.pt_dir}); run it there first or leave --plain-dirs out")
    return folder.final()


def _evaluations(folder: str) -> dict:
    """``{step: {metric: value}}`` of the run's evaluation records (every metric of :data:`METRICS` present)."""
    return {str(r["step"]): {k: r[k] for k in METRICS if r.get(k) is not None}
            for r in RunFolder(folder).metrics.records() if r["kind"] == "eval"}


def cpt_stage(cfg: BioTaalmConfig, bundle, phi_dir: pathlib.Path) -> dict:
    """The CPT run with and without φ's weights (module docstring); their final records and evaluations."""
    out, results = pathlib.Path(cfg.out), {}

    def uniform_loss(logits_BSV, batch):  # TWPPL with w = 1: the per-row normalisation alone
        return twppl_loss(logits_BSV, {**batch, "token_weights": jnp.ones_like(batch["target_mask"])})

    # φ's run names φ in its spec (``CPTSpec.token_weights``), so its folder's config records the weighting model
    runs = (("", None, None), ("-phi", None, str(phi_dir)))
    runs += (("-uniform", uniform_loss, None),) if cfg.uniform_control else ()
    names = {"": "", "-phi": " + TAALM φ", "-uniform": " + TWPPL w = 1"}
    for tag, loss_fn, token_weights in runs:
        spec = CPTSpec(preset=cfg.preset, out=str(out / f"cpt-{cfg.method}{tag}"), method=cfg.method,
                       pt_dir=cfg.pt_dir, cache_dir=cfg.cache_dir, progress=cfg.progress, token_weights=token_weights,
                       seed=cfg.seed)
        t0 = time.perf_counter()
        final = plain_run(cfg, spec) if tag == "" else None
        if final is not None:
            spec = dataclasses.replace(spec, out=cfg.plain_dir)
        elif RunFolder(spec.out).check(spec, spec.scale) and RunFolder(spec.out).final() is not None:
            final = RunFolder(spec.out).final()
        else:
            final = continual(spec, data=bundle, **({} if loss_fn is None else {"loss_fn": loss_fn})).final
        results[f"{cfg.method}{names[tag]}"] = {
            **{k: final.get(k) for k in METRICS}, "folder": spec.out, "wall_s": time.perf_counter() - t0,
            "evaluations": _evaluations(spec.out)}
    return results


def write_table(cfg: BioTaalmConfig, results: dict, stats: dict, rows) -> str:
    out = pathlib.Path(cfg.out)
    head = "| run | " + " | ".join(METRICS) + " |\n|---|" + "---|" * len(METRICS) + "\n"
    body = "".join(f"| {name} | " + " | ".join("–" if r[k] is None else f"{r[k]:.4f}" for k in METRICS) + " |\n"
                   for name, r in results.items())
    meta = jsonio.read_json_object(out / "metatrain.json") if (out / "metatrain.json").exists() else {}
    text = (f"# TAALM φ in a Biography CPT run, preset {cfg.preset}, seed {cfg.seed}, PT {cfg.pt_dir}\n\nφ: "
            f"meta-step {meta.get('best_step')}, pairs "
            f"{json.dumps(meta.get('pairs'))}; on {stats['docs']} CPT training biographies its mean weight is "
            f"{stats['w_value_mean']:.3g} on value tokens and {stats['w_other_mean']:.3g} on the others (90th "
            f"percentile {stats['w_other_p90']:.3g}; median share of a document's weight on its values "
            f"{stats['value_share_median']:.3f})\n\n{head}{body}")
    jsonio.write_text_atomic(out / "table.md", text)
    history = [{"step": h["step"], "w_other": h.get("w_other"), "w_object": h.get("w_object")}
               for h in meta.get("history", ())]
    # table.json last: with runs, it marks a finished replicate
    jsonio.write_json_atomic(out / "table.json", {
        "preset": cfg.preset, "method": cfg.method, "seed": cfg.seed, "pt_dir": cfg.pt_dir, "phi_weights": stats,
        "runs": results, "phi_best_step": meta.get("best_step"), "phi_validation": meta.get("validation"),
        "phi_wall_s": meta.get("wall_s"), "metabatch": history}, indent=1, default=float)
    if rows:
        report.plot_heatmap(rows[:cfg.heatmap_docs], out / "phi_heatmap.png", title="φ's weights on CPT training "
                            "biographies (red underline: attribute values)")
    return text


def run(cfg: BioTaalmConfig, *, phi_only: bool = False, bundle=None) -> dict:
    """One replicate (module docstring): φ, then the CPT runs unless ``phi_only``; its table."""
    if RunFolder(cfg.pt_dir).final() is None:  # before any data is built or anything written
        raise ValueError(f"--biography {cfg.pt_dir} holds no finished PT run (no final.json); train it with "
                         f"`cfka pt --preset {cfg.preset} --out {cfg.pt_dir}`")
    bundle = bundle or build_data(BIOGRAPHY[cfg.preset].data_config(), cfg.cache_dir)
    phi_dir = phi_stage(cfg, bundle, pt_model(cfg, bundle))
    stats, rows = value_weight_stats(phi_token_weights(phi_dir, vocab_size=len(bundle.tokenizer),
                                                       tokenizer=bundle.tokenizer, flag="--out"), bundle)
    results = {} if phi_only else cpt_stage(cfg, bundle, phi_dir)
    write_table(cfg, results, stats, rows)
    return {"phi_weights": stats, "runs": results}


@dataclasses.dataclass(frozen=True)
class Replicate:
    """One (PT model, study seed) of the study: its PT label (``s<k>`` or the PT folder's name) and its config."""

    pt: str
    seed: int
    cfg: BioTaalmConfig

    def finished(self) -> dict | None:
        """The replicate's ``table.json`` once its CPT runs are in it (None before)."""
        path = pathlib.Path(self.cfg.out) / "table.json"
        if not path.exists():
            return None
        table = jsonio.read_json_object(path, "a TAALM Biography table")
        return table if table.get("runs") else None


@dataclasses.dataclass(frozen=True)
class Config:
    """``cfka taalm --biography PT_DIR``: φ for the Biography world of a finished ``cfka pt`` run, measured in
    ``cfka cpt``, over study seeds and PT replicates."""

    pt_dir: str = ""
    """a finished `cfka pt` run; with --pt-seeds, the folder of the PT replicates pt-seed<k>"""
    preset: str = "small"
    """the φ preset (PRESETS)"""
    out: str | None = None
    """study folder (default runs/taalm-bio-<preset>): one folder per replicate, seed<s>/ or pt<k>-seed<s>/"""
    cache_dir: str = "runs/data-cache"
    """where generated worlds and packs are cached"""
    method: str = "replay-all"
    """the CPT method the φ-weighted run is compared under"""
    phi_only: bool = False
    """meta-train φ and stop (no CPT runs)"""
    progress: bool = True
    """progress bars"""
    seeds: tuple[int, ...] = (0,)
    """study seeds: each moves φ's seeds by 1000·s and is the CPT seed"""
    pt_seeds: tuple[int, ...] = ()
    """PT replicates PT_DIR/pt-seed<k> (cfka bio-table --pt-seeds); empty: PT_DIR is the one PT run"""
    plain_dirs: str | None = None
    """read each replicate's plain run from this finished folder ({pt}, {seed}: the PT and study seed), e.g.
    runs/bio-s3/cpt-replay-all-full/pt{pt}-seed{seed}, instead of running it"""
    record: str | None = None
    """rewrite the produced record results/RECORD.json (e.g. taalm/biography_phi_small) after each replicate"""
    results: str = "results"
    """the folder of result records"""

    def __post_init__(self):
        rep.check_seed_list(self.seeds, "--seeds")
        rep.check_seed_list(self.pt_seeds, "--pt-seeds", allow_empty=True)
        if self.record is not None and (not self.record or self.record.startswith("/")
                                        or ".." in pathlib.PurePosixPath(self.record).parts):
            raise ValueError(f"--record must be a relative name under --results without '..', got {self.record!r}")
        if self.phi_only and self.record is not None:
            raise ValueError("--phi-only runs no CPT: nothing for --record")
        if self.plain_dirs is not None:
            try:
                self.plain_dirs.format(pt=0, seed=0)
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"--plain-dirs {self.plain_dirs!r}: only {{pt}} and {{seed}} may appear ({e})")
            if "{seed}" not in self.plain_dirs or (self.pt_seeds and "{pt}" not in self.plain_dirs):
                raise ValueError(f"--plain-dirs {self.plain_dirs!r} must name {{seed}} (and {{pt}} with --pt-seeds)")
        self.replicates()  # every replicate's config checked before anything runs

    @property
    def folder(self) -> pathlib.Path:
        return pathlib.Path(self.out or f"runs/taalm-bio-{self.preset}")

    def replicates(self) -> list[Replicate]:
        """Every (PT model, study seed), PT models outermost."""
        pts = ([(rep.pt_label(k), k, str(rep.pt_folder(self.pt_dir, k))) for k in self.pt_seeds] if self.pt_seeds
               else [(pathlib.Path(self.pt_dir).name or "pt", None, self.pt_dir)])
        out = []
        for label, k, pt_dir in pts:
            for s in self.seeds:
                name = f"seed{s}" if k is None else f"pt{k}-seed{s}"
                plain = None if self.plain_dirs is None else self.plain_dirs.format(pt=k, seed=s)
                cfg = dataclasses.replace(with_seed(PRESETS[self.preset](), s), pt_dir=pt_dir,
                                          out=str(self.folder / name), cache_dir=self.cache_dir, method=self.method,
                                          progress=self.progress, plain_dir=plain)
                out.append(Replicate(label, s, cfg))
        return out


FLAGS = Flags(Config, prog="cfka taalm --biography", description=__doc__.splitlines()[0],
              required=("pt_dir",), aliases={"pt_dir": ("--biography",)}, choices={"preset": lambda: sorted(PRESETS)},
              inputs=("pt_dir",),
              metavars={"pt_dir": "PT_DIR", "out": "DIR", "cache_dir": "DIR", "plain_dirs": "TEMPLATE",
                        "record": "NAME", "results": "DIR"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def main(argv: list[str] | None = None) -> int:
    return command(FLAGS.parse(argv))


def study(args: Config) -> list[Replicate]:
    """Runs (or skips, when finished) every replicate, PT models outermost, rewriting ``--record`` after each;
    returns the replicates."""
    from cfka_jax.experiments import taalm_bio_record

    reps = args.replicates()
    for r in reps:  # every PT run must be there before anything is built or written
        if RunFolder(r.cfg.pt_dir).final() is None:
            raise ValueError(f"--biography {r.cfg.pt_dir} holds no finished PT run (no final.json); train it with "
                             f"`cfka pt --preset {args.preset} --seed N --out {r.cfg.pt_dir}`")
    bundle = None
    for r in reps:
        if r.finished() is None or args.phi_only:
            bundle = bundle or build_data(BIOGRAPHY[args.preset].data_config(), args.cache_dir)
            clock = taalm_bio_record.Clock()
            run(r.cfg, phi_only=args.phi_only, bundle=bundle)
            if not args.phi_only:
                taalm_bio_record.stamp(r, clock)
        if args.record is not None:
            path = taalm_bio_record.write(args, reps)
            print(f"[taalm] record {path}", flush=True)
    return reps


def command(args: Config) -> int:
    """Meta-trains φ, runs CPT with and without it and prints each replicate's table: ``cfka taalm
    --biography``'s run function."""
    for r in study(args):
        print((pathlib.Path(r.cfg.out) / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
