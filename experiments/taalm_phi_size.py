"""TAALM with a Train-Attention φ of ANOTHER size than θ0 on synthetic LAMA-CKL (claim ``taalm.phi-other-size``;
spec taalm.md §3, §4.4: the paper's φ is TinyLlama-1.1B serving a Llama-2-7B θ, over one shared tokenizer).

    python -m cfka_jax.experiments.taalm_phi_size --preset small --phi-widths 32 --seeds 0,1,2
    python -m cfka_jax.experiments.taalm_phi_size --preset small --phi-widths 32,64 --phi-layers 1,3 --seeds 0

Per seed N the world, tokenizer, θ0, selected LAMA-CKL sets and φ of ``cfka taalm --preset P --seed N`` are read
from ``--base-dirs`` (``runs/taalm-{preset}-s{seed}``; their stages run there first where the folder lacks them,
and a folder's ``config.json`` is checked, never rewritten). Each φ base of the grid ``--phi-widths`` ×
``--phi-layers`` (θ0's own size left out: that is the ``same`` row) is a from-scratch decoder of θ0's family:

* width D' (a multiple of θ0's head width H = D/N): N' = D'/H query heads, K' = max(1, N'·K/N) KV heads, MLP
  width F' = D'·F/D; ``--phi-layers`` blocks (default θ0's);
* pre-trained on the world's PT texts with θ0's tokenizer (its content hash is recorded in ``base.json`` and
  checked on every resume: a folder made over other token ids is refused) and θ0's PT settings and seed
  (``--pt-epochs`` / ``--pt-peak-lr`` override them);
* φ = that base + LoRA + scalar head, meta-trained against θ0 + LoRA exactly as ``cfka taalm``'s φ
  (``taalm_stages.phi_stage`` with ``body=``: same pairs, meta-gradient, selection of the checkpoint).

Then each method of ``--methods`` runs LAMA-CKL on θ0 at the preset's lr: a method that reads φ's weights (TAALM)
once per φ (``same``: ``cfka taalm``'s φ, a copy of θ0; ``d32``, ``d32-l2``, ...: the bases above), any other
(Finetune) once, all on the same θ0, sets and probes of seed N (paired per study seed).

Writes ``OUT/s<seed>/lama/<method>.json`` (methods without φ), ``OUT/s<seed>/<φ>/lama/<method>.json`` (each run;
an interrupted study resumes), ``OUT/s<seed>/<base>/{base.json, pt/, phi/, metatrain.json}`` (each base, resumable)
and, after every run, the record ``results/taalm/phi_size_<preset>.json``: one row per (seed, φ, method) with
``top_acc``, ``epoch``, ``nf_acc``, ``total`` (spec §5.6; ``phi`` null for a method without φ), each base's
parameter count and final PT loss in ``provenance.phi_bases``.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time

from cfka_jax.experiments import taalm, taalm_sweep
from cfka_jax.experiments import taalm_stages as stages
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.claims.results import Clock, provenance, write_record
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.continual.ckl_methods import needs_phi
from cfka_jax.continual.ckl_setup import build_lm, pretrain_texts
from cfka_jax.models.family import ModelSize
from cfka_jax.provenance import KEY, check_made_from, fingerprint, tokenizer_fingerprint
from cfka_jax.runs.method import method_options, resolve
from cfka_jax.train.throughput import param_count

CLOCK = Clock()
SAME = "same"
"""The φ of ``cfka taalm``: a copy of θ0 (read from the seed's base folder)."""
_RESUMABLE = ("seeds", "phi_widths", "phi_layers", "methods", "progress", "record", "results")


def phi_size(theta: ModelSize, width: int, layers: int | None = None) -> ModelSize:
    """φ base's size: width ``width`` at θ0's head width and MLP ratio (module docstring), ``layers`` blocks
    (default θ0's).

    Raises:
      ValueError: ``width`` is not a positive multiple of θ0's head width (names ``--phi-widths``).
    """
    head = theta.hidden // theta.heads
    if width < 1 or width % head:
        raise ValueError(f"--phi-widths: {width} is not a positive multiple of θ0's head width {head} "
                         f"(θ0: d {theta.hidden}, {theta.heads} heads)")
    heads = width // head
    kv = max(1, heads * theta.kv_heads // theta.heads)
    while heads % kv:  # grouped-query attention needs K' | N'
        kv -= 1
    return ModelSize(hidden=width, layers=theta.layers if layers is None else layers, heads=heads, kv_heads=kv,
                     intermediate=width * theta.intermediate // theta.hidden)


def base_name(size: ModelSize, theta: ModelSize) -> str:
    """``d<width>``, with ``-l<layers>`` where the blocks differ from θ0's."""
    return f"d{size.hidden}" + ("" if size.layers == theta.layers else f"-l{size.layers}")


@dataclasses.dataclass(frozen=True)
class Config:
    """TAALM on θ0 with a φ whose base is another size (same tokenizer), beside the same-size φ and Finetune."""

    preset: str = "small"
    """scale (taalm.PRESETS)"""
    phi_widths: tuple[int, ...] = (32,)
    """comma-separated widths of φ's base (multiples of θ0's head width; heads and MLP width scale with it)"""
    phi_layers: tuple[int, ...] = ()
    """comma-separated block counts of φ's base (empty: θ0's); the bases are widths × layers less θ0's own size"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """comma-separated study seeds (cfka taalm --seed N)"""
    methods: tuple[str, ...] = ("Finetune", "TAALM")
    """comma-separated LAMA-CKL methods (those reading φ run once per φ, the others once per seed)"""
    base_dirs: str = "runs/taalm-{preset}-s{seed}"
    """the folder of each seed's θ0, sets and same-size φ ({preset}, {seed}); made there when absent"""
    out: str | None = None
    """the study's folder (default runs/taalm-phi-size-<preset>)"""
    pt_epochs: int | None = None
    """pre-training epochs of φ's base (default: θ0's)"""
    pt_peak_lr: float | None = None
    """peak pre-training lr of φ's base (default: θ0's)"""
    record: bool = True
    """write results/taalm/phi_size_<preset>.json after every run"""
    results: str = "results"
    """the folder of result records"""
    progress: bool = False
    """progress bars of the shared stages and of φ's base pre-training"""

    def __post_init__(self):
        taalm.preset(self.preset)
        taalm_sweep.distinct(("--phi-widths", self.phi_widths), ("--seeds", self.seeds), ("--methods", self.methods))
        if len(set(self.phi_layers)) != len(self.phi_layers) or any(n < 1 for n in self.phi_layers):
            raise ValueError(f"--phi-layers must be integers >= 1 without repeats, got {self.phi_layers}")
        if self.pt_peak_lr is not None and not (math.isfinite(self.pt_peak_lr) and self.pt_peak_lr > 0):
            raise ValueError(f"--pt-peak-lr must be a finite number > 0, got {self.pt_peak_lr}")
        taalm_sweep.check_base_dirs(self.base_dirs, self.preset)
        for seed in self.seeds:
            self.taalm(seed)  # checks every method name and seed before anything is written
        if not any(needs_phi(_method(m)) for m in self.methods):
            raise ValueError(f"--methods {','.join(self.methods)}: none reads φ's weights (add TAALM)")
        if not self.bases():
            raise ValueError(f"--phi-widths / --phi-layers: every size is θ0's own (d {self.theta().hidden}, "
                             f"{self.theta().layers} layers), which is the 'same' row already")

    def theta(self) -> ModelSize:
        return taalm.preset(self.preset).model

    def bases(self) -> dict[str, ModelSize]:
        """``{name: size}`` of φ's bases: widths × layers, θ0's own size left out."""
        theta = self.theta()
        sizes = [phi_size(theta, w, n) for w in self.phi_widths for n in (self.phi_layers or (None,))]
        return {base_name(s, theta): s for s in sizes if s != theta}

    def out_dir(self) -> pathlib.Path:
        return pathlib.Path(self.out or f"runs/taalm-phi-size-{self.preset}")

    def taalm(self, seed: int) -> taalm.TaalmConfig:
        """Seed ``seed``'s study config: the preset in its base folder with this study's methods, no TemporalWiki."""
        return taalm_sweep.seed_config(self.base_dirs, self.preset, seed, methods=self.methods, twiki_methods=(),
                                       progress=self.progress)

    def pt(self, tcfg: taalm.TaalmConfig):
        """φ base's pre-training: θ0's (seed included) with this study's overrides."""
        over = {k: v for k, v in (("epochs", self.pt_epochs), ("peak_lr", self.pt_peak_lr)) if v is not None}
        return dataclasses.replace(tcfg.pt, **over)


FLAGS = Flags(Config, prog="python -m cfka_jax.experiments.taalm_phi_size",
              choices={"preset": lambda: sorted(taalm.PRESETS)},
              metavars={"out": "DIR", "base_dirs": "TEMPLATE", "results": "DIR"})


def _method(name: str):
    return resolve(name, "ckl", method_options())


def run_path(out: pathlib.Path, seed: int, phi: str | None, name: str) -> pathlib.Path:
    """A run's result file (``phi`` None: a method without φ)."""
    folder = out / f"s{seed}" if phi is None else out / f"s{seed}" / phi
    return folder / "lama" / f"{stages.slug(name)}.json"


@dataclasses.dataclass
class Base:
    """A pre-trained φ base: the module and what the record keeps of it."""

    model: object
    made_from: dict
    info: dict


def phi_base(folder: pathlib.Path, size: ModelSize, pt, tok, texts, *, world, progress: bool = False) -> Base:
    """φ's base of ``size`` pre-trained on the PT ``texts`` of the world ``world`` (its config) with ``tok``
    (resumed from ``folder/pt``). ``folder/base.json`` records what it is made from (``tok``'s content hash, the
    world, size and PT settings) before the first step; a folder that records anything else is refused before
    any parameter is read."""
    made_from = {"tokenizer": tokenizer_fingerprint(tok), "world": fingerprint(dataclasses.asdict(world)),
                 "size": fingerprint(dataclasses.asdict(size)), "pt": fingerprint(dataclasses.asdict(pt))}
    path = folder / "base.json"
    old = jsonio.read_json_object(path, "a φ base record") if path.exists() else {}
    if old:
        check_made_from(old.get(KEY), made_from, flag="--out", folder=folder)
    else:
        jsonio.write_json_atomic(path, {KEY: made_from}, indent=1)
    model = build_lm(size, len(tok), seed=pt.seed)
    t0 = time.perf_counter()
    rec = pretrain_texts(model, tok, texts, pt, folder / "pt", progress=progress)
    info = {"size": dataclasses.asdict(size), "pt": dataclasses.asdict(pt),
            "params": param_count(nnx.state(model, nnx.Param)), "pt_loss": rec.get("loss"),
            "pt_step": rec.get("step"), "pt_wall_s": round(time.perf_counter() - t0, 2)}
    if old.get("pt_step") == info["pt_step"]:  # finished by an earlier call: its seconds
        info["pt_wall_s"] = old.get("pt_wall_s")
    jsonio.write_json_atomic(path, {KEY: made_from, **info}, indent=1, default=float)
    return Base(model, made_from, info)


def _done(out: pathlib.Path, seed: int, phi: str | None, names) -> bool:
    return all(run_path(out, seed, phi, n).exists() for n in names)


def run_seed(cfg: Config, seed: int, out: pathlib.Path, on_run) -> None:
    """Every (φ, method) of ``seed`` not yet in ``out``; ``on_run()`` after each."""
    tcfg = cfg.taalm(seed)
    with_phi = tuple(m for m in cfg.methods if needs_phi(_method(m)))
    plain = tuple(m for m in cfg.methods if m not in with_phi)
    todo = [(None, plain), (SAME, with_phi), *((b, with_phi) for b in cfg.bases())]
    if all(_done(out, seed, phi, names) for phi, names in todo):
        return
    p = taalm.prepare(tcfg, write_config=not (pathlib.Path(tcfg.out) / "config.json").exists())
    probes = stages.descriptive_probes(p.tok, to_learn=p.sets.to_learn, not_to_forget=p.sets.not_to_forget)
    same = out / f"s{seed}" / SAME / "base.json"
    if not same.exists():  # θ0 as φ's base: what the record keeps of it (its φ is the base folder's)
        meta = pathlib.Path(tcfg.out) / "metatrain.json"
        m = jsonio.read_json_object(meta, "a φ meta-training record") if meta.exists() else {}
        jsonio.write_json_atomic(same, {
            "size": dataclasses.asdict(tcfg.model), "pt": dataclasses.asdict(tcfg.pt), "source": tcfg.out,
            "params": param_count(nnx.state(p.model, nnx.Param)), "pt_loss": p.pt_record.get("loss"),
            "pt_step": p.pt_record.get("step"), "phi_best_step": m.get("best_step"),
            "metatrain_wall_s": m.get("wall_s")}, indent=1, default=float)
    for phi, names in todo:
        if _done(out, seed, phi, names):
            continue
        handle = p.setup
        if phi not in (None, SAME):
            folder = out / f"s{seed}" / phi
            base = phi_base(folder, cfg.bases()[phi], cfg.pt(tcfg), p.tok, p.world.pt_texts, world=tcfg.data,
                            progress=cfg.progress)
            _, handle = stages.phi_stage(folder, tcfg, p.model, p.tok, p.sets, body=base.model,
                                         body_made_from=base.made_from)
        stream, review = stages.lama_streams(tcfg, p.tok, p.sets, handle, p.world)
        for name in names:
            path = run_path(out, seed, phi, name)
            if path.exists():
                continue
            res = stages.lama_method(tcfg, name, tcfg.ckl_for(name), p.model, stream, probes, review)
            res.update(method=name, phi=phi, seed=seed, n_to_learn=len(p.sets.to_learn),
                       n_not_to_forget=len(p.sets.not_to_forget))
            jsonio.write_json_atomic(path, res, indent=1, default=float)
            s = res["summary"]
            print(f"[taalm-phi-size] s{seed} {name} (φ {phi or '-'}): Top Acc {s['top_acc']:.4f} (epoch "
                  f"{s['epoch']}) NF {s['nf_acc']:.4f} Total {s['total_knowledge']:.4f}, {res['wall_s']:.0f}s",
                  flush=True)
            on_run()


def record_rows(out: pathlib.Path) -> tuple[list[dict], dict[int, float]]:
    """The rows of every finished run in ``out`` (every call into the folder: a later one may add seeds, bases or
    methods), and the seconds each seed's runs took."""
    rows, walls = [], {}
    for path in sorted(out.glob("s*/lama/*.json")) + sorted(out.glob("s*/*/lama/*.json")):
        res = jsonio.read_json_object(path, "a TAALM φ-size run (JSON object)")
        try:
            seed, s = int(res["seed"]), res["summary"]
            row = {"seed": seed, "phi": res["phi"], "method": res["method"], "top_acc": round(float(s["top_acc"]), 4),
                   "epoch": int(s["epoch"]), "nf_acc": round(float(s["nf_acc"]), 4),
                   "total": round(float(s["total_knowledge"]), 4), "n_to_learn": int(res["n_to_learn"]),
                   "n_not_to_forget": int(res["n_not_to_forget"])}
            walls[seed] = walls.get(seed, 0.0) + float(res["wall_s"])
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{path}: not a TAALM φ-size run ({err!r})") from None
        rows.append(row)
    rows.sort(key=lambda r: (r["seed"], r["phi"] is not None, r["phi"] != SAME, str(r["phi"]), r["method"]))
    return rows, walls


def base_infos(out: pathlib.Path, seeds) -> dict[str, dict]:
    """``{"s<seed>": {φ: base.json less its provenance}}``, with meta-training's selected step and seconds."""
    infos = {}
    for seed in seeds:
        for path in sorted((out / f"s{seed}").glob("*/base.json")):
            info = {k: v for k, v in jsonio.read_json_object(path, "a φ base record").items() if k != KEY}
            meta = path.parent / "metatrain.json"
            if meta.exists():
                m = jsonio.read_json_object(meta, "a φ meta-training record")
                info.update(phi_best_step=m.get("best_step"), metatrain_wall_s=round(float(m.get("wall_s", 0)), 2))
            infos.setdefault(f"s{seed}", {})[path.parent.name] = info
    return infos


def write_phi_size_record(cfg: Config, out: pathlib.Path) -> pathlib.Path | None:
    """``results/taalm/phi_size_<preset>.json`` over the finished runs (``None`` before the first)."""
    rows, walls = record_rows(out)
    if not rows:
        return None
    seeds = sorted(walls)
    tcfg = cfg.taalm(seeds[0])
    infos = base_infos(out, seeds)
    sizes = {name: info["size"] for by in infos.values() for name, info in by.items()}
    lora, tl, m, pt = tcfg.phi.lora, tcfg.theta_lora, tcfg.model, tcfg.pt
    theta0 = [by[SAME] for by in infos.values() if SAME in by]
    n_tl, n_nf = (min(r[k] for r in rows) for k in ("n_to_learn", "n_not_to_forget"))
    regime = {
        "model": f"Qwen2-architecture port, {m.layers} layers, d {m.hidden}, word-level tokenizer of the world; "
                 f"θ = θ0 + LoRA r {tl.rank}, α {tl.alpha:g}, dropout {tl.dropout:g}",
        "params": f"{theta0[0]['params'] / 1e6:.2f} M (θ0)" if theta0 else None,
        "pt_quality": f"θ0 pre-trained {pt.epochs} epochs ({theta0[0].get('pt_step') if theta0 else '?'} steps of "
                      f"{pt.batch_size} × {pt.seq_len} tokens) per seed; its final train loss per seed in "
                      f"provenance.phi_bases (with each φ base's)",
        "world": f"synthetic LAMA-CKL of cfka taalm --preset {cfg.preset} (the same world for every seed; the sets "
                 f"selected by each seed's θ0): {n_tl} TO-LEARN, {n_nf} NOT-TO-FORGET facts",
        "n_to_learn": n_tl, "n_not_to_forget": n_nf,
        "phi": f"φ = base + LoRA r {lora.rank}, α {lora.alpha:g}, dropout {lora.dropout:g} + scalar head (bias "
               f"{tcfg.phi.bias_init:g}), meta-trained against θ0 + LoRA as cfka taalm's φ ({tcfg.metatrain.epochs} "
               f"epochs of meta-batch {tcfg.metatrain.meta_batch}, outer AdamW lr {tcfg.metatrain.outer.lr:g}); base "
               f"'same': θ0 itself (cfka taalm's φ, read from --base-dirs); 'd<W>[-l<L>]': a from-scratch decoder of "
               f"θ0's family, width W at θ0's head width and MLP ratio, L blocks (default θ0's), pre-trained on the "
               f"same PT texts with θ0's word-level tokenizer (content hash checked) and θ0's PT settings and seed",
        "phi_bases": sizes,
        "dose": f"{tcfg.ckl.epochs} epochs of batch {tcfg.ckl.batch_size}, AdamW lr {tcfg.ckl.lr:g} wd "
                f"{tcfg.ckl.weight_decay}, no schedule",
        "lr_selection": f"the preset's lr {tcfg.ckl.lr:g} (cfka taalm's) for every method and φ; no selection here",
        "pairing": "every run of a seed starts from that seed's θ0 with the same LoRA init, sets, probes and epoch "
                   "order; the φ rows differ only in φ",
        "seeds": seeds}
    configs = {"study": dataclasses.asdict(cfg), **{f"s{s}": dataclasses.asdict(cfg.taalm(s)) for s in seeds}}
    prov = provenance(config=configs, seeds=seeds, pt_replicates=[f"θ0-s{s}" for s in seeds], clock=CLOCK,
                      command=_command(cfg, rows, sizes))
    prov.update(unit="run", phi_bases=infos, runs_wall_s={f"s{s}": round(w, 2) for s, w in walls.items()},
                note="wall_s / cpu_s: the process that wrote the record; runs_wall_s: the seeds' LAMA-CKL runs; "
                     "phi_bases: per seed, each φ base's parameter count (its LM, embedding included), final PT "
                     "train loss, PT seconds (of the call that finished it), meta-training's selected step and "
                     "seconds; 'same' is θ0 (made by cfka taalm --seed N)")
    return write_record(cfg.results, f"taalm/phi_size_{cfg.preset}", rows=rows, regime=regime, provenance=prov)


def _command(cfg: Config, rows: list[dict], sizes: dict[str, dict]) -> str:
    """One study command per block count of the recorded bases, joined by ``;``."""
    seeds = ",".join(str(s) for s in sorted({r["seed"] for r in rows}))
    methods = ",".join(dict.fromkeys(r["method"] for r in rows))
    by_layers: dict[int, list[int]] = {}
    for name in dict.fromkeys(r["phi"] for r in rows if r["phi"] not in (None, SAME)):
        size = sizes.get(name)
        if size is not None:
            by_layers.setdefault(size["layers"], []).append(size["hidden"])
    extra = "".join(f" --{flag} {v:g}" for flag, v in (("pt-epochs", cfg.pt_epochs), ("pt-peak-lr", cfg.pt_peak_lr))
                    if v is not None)
    groups = by_layers.items() or [(None, list(cfg.phi_widths))]
    return "; ".join(f"python -m cfka_jax.experiments.taalm_phi_size --preset {cfg.preset} --phi-widths "
                     f"{','.join(map(str, widths))}"
                     + (f" --phi-layers {n}" if n not in (None, cfg.theta().layers) else "")
                     + f" --seeds {seeds} --methods \"{methods}\" --base-dirs {cfg.base_dirs} --out {cfg.out_dir()}"
                     + extra for n, widths in groups)


def check_folder(cfg: Config, out: pathlib.Path) -> None:
    """Refuse a study folder made with other settings (its seeds, bases and methods may grow); write
    ``config.json``."""
    taalm_sweep.check_folder(cfg, out, resumable=_RESUMABLE, what="a TAALM φ-size config")


def command(cfg: Config) -> int:
    taalm_sweep.run(cfg, cfg.out_dir(), check=check_folder, run_seed=run_seed, write_record=write_phi_size_record,
                    tag="taalm-phi-size")
    return 0


def main(argv: list[str] | None = None) -> int:
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
