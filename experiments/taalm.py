"""TAALM on synthetic LAMA-CKL and TemporalWiki (Seo et al., NeurIPS 2024, Table 1 and the TemporalWiki table;
spec taalm.md §4–§9): meta-train the Train-Attention model φ, then run every method on the same θ0.

    cfka taalm --preset smoke|small|paper --out DIR [--methods "Finetune,Oracle,TAALM"] [--no-twiki]
    cfka taalm --preset small --lr 1e-2 --method-lr "K-Adapter=3e-2" --method-epochs "K-Adapter=60" --out DIR
    cfka taalm --biography PT_DIR --preset smoke|small --out DIR     # φ for a Biography CPT run (taalm_biography)
    cfka taalm --lama-ckl DIR | --temporalwiki DIR --model HF_DIR ...  # the real files (taalm_real)
    python -m cfka_jax.experiments.taalm_command --preset small --out runs/taalm-small

Pipeline (every stage resumes from ``DIR``): the synthetic world (``data/ckl_world.py``) → a word-level tokenizer →
θ0 pre-trained on the PT corpus (``DIR/pt``) → θ0 scores every candidate fact and the LAMA-CKL files are selected
(``DIR/lama_ckl/*.jsonl``) → φ (a copy of θ0 with LoRA and a scalar head) is meta-trained on the TA pairs
(``DIR/phi``, ``DIR/metatrain.json``) → LAMA-CKL for each method (``DIR/lama/<method>.json``) → TemporalWiki
(``DIR/twiki/<method>.json``). Writes ``table.md`` / ``table.json`` (LAMA-CKL beside the paper's Llama-2-7B
numbers, TemporalWiki beside TinyLlama's), ``accuracy.png`` (TO-LEARN and NOT-TO-FORGET accuracy per epoch per
method) and ``phi_heatmap.png`` (φ's weights on a few TO-LEARN evidence paragraphs).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

from cfka_jax.continual.ckl import CKLConfig
from cfka_jax.continual.ckl_setup import ModelSize, PTConfig, build_lm, candidate_scores, pretrain_texts
from cfka_jax.continual.peft import LoRAConfig
from cfka_jax.continual.taalm import AdamWConfig, MetaConfig, MetaTrainConfig, PhiConfig
from cfka_jax.data.ckl_world import build_synthetic_world
from cfka_jax.data.lama_ckl import SyntheticCKLConfig
from cfka_jax.experiments import taalm_stages as stages
from cfka_jax.runs.method import resolve_each

LAMA_METHODS = ("Finetune", "Oracle", "RHO-1", "Mix-review", "RecAdam", "K-Adapter", "TAALM", "TAALM + K-Adapter",
                "TAALM + Mix-review", "TAALM + RecAdam", "TAALM + K-Adapter + RecAdam",
                "TAALM + K-Adapter + Mix-review + RecAdam", "K-Adapter (dropout 0.1)",
                "TAALM + K-Adapter (dropout 0.1)", "RHO-1 (taalm_code)")
TWIKI_METHODS = ("Finetune", "Oracle", "RHO-1", "Mix-review", "RecAdam", "K-Adapter", "TAALM", "TAALM + K-Adapter",
                 "K-Adapter (dropout 0.1)")


@dataclasses.dataclass(frozen=True)
class TaalmConfig:
    """Everything one ``cfka taalm`` run does (presets below). ``review``: Mix-review replays the NOT-TO-FORGET
    evidence (reference, quirk #25) or evidence of other invariant facts (``disjoint``). ``seed``: the study seed
    N that :func:`with_seed` spread over every stage's seed (:data:`SEED_FIELDS`); ``lora_seed``: θ0's fresh
    LoRA adapters (meta-training's θ0 and every method's)."""

    preset: str = "small"
    out: str = "runs/taalm-small"
    data: SyntheticCKLConfig = SyntheticCKLConfig()
    model: ModelSize = ModelSize()
    pt: PTConfig = PTConfig()
    theta_lora: LoRAConfig = LoRAConfig(rank=16, alpha=4.0, dropout=0.1)
    phi: PhiConfig = PhiConfig(lora=LoRAConfig(rank=16, alpha=4.0, dropout=0.1))
    metatrain: MetaTrainConfig = MetaTrainConfig()
    ckl: CKLConfig = CKLConfig()
    twiki: CKLConfig = CKLConfig(epochs=1)
    methods: tuple[str, ...] = LAMA_METHODS
    twiki_methods: tuple[str, ...] = TWIKI_METHODS
    strict_selection: bool = True
    review: str = "not_to_forget"
    unchanged_per_period: int = 100
    heatmap_docs: int = 4
    progress: bool = True
    seed: int = 0
    lora_seed: int = 0
    method_lr: tuple[tuple[str, float], ...] = ()
    """(method, lr) pairs: that method's LAMA-CKL and TemporalWiki lr instead of ``ckl.lr`` / ``twiki.lr``."""
    method_epochs: tuple[tuple[str, int], ...] = ()
    """(method, epochs) pairs: that method's LAMA-CKL epochs instead of ``ckl.epochs`` (a budget of its own, e.g.
    for K-Adapter, whose adapter starts from a random init)."""

    def __post_init__(self):
        for flag, names in (("--methods", self.methods), ("--twiki-methods", self.twiki_methods)):
            if names:  # the one registry (runs/method, CKL recipe): raises on names it cannot run
                resolve_each(names, "ckl", flag=flag)
        if self.review not in ("not_to_forget", "disjoint"):
            raise ValueError(f"review must be 'not_to_forget' (reference) or 'disjoint', got {self.review!r}")
        if self.heatmap_docs < 0 or self.unchanged_per_period < 1:
            raise ValueError("heatmap_docs must be >= 0 and unchanged_per_period >= 1")
        _check_overrides("--method-lr", self.method_lr, set(self.methods) | set(self.twiki_methods), float)
        _check_overrides("--method-epochs", self.method_epochs, set(self.methods), int)

    def ckl_for(self, name: str) -> CKLConfig:
        """The LAMA-CKL settings of method ``name``: ``ckl`` with its ``method_lr`` / ``method_epochs``."""
        over = {k: v for k, v in (("lr", dict(self.method_lr).get(name)),
                                   ("epochs", dict(self.method_epochs).get(name))) if v is not None}
        return dataclasses.replace(self.ckl, **over)

    def twiki_for(self, name: str) -> CKLConfig:
        """The TemporalWiki settings of method ``name``: ``twiki`` with its ``method_lr``."""
        lr = dict(self.method_lr).get(name)
        return self.twiki if lr is None else dataclasses.replace(self.twiki, lr=lr)


def _check_overrides(flag: str, pairs, names: set[str], kind: type) -> None:
    """Per-method overrides: each a (method of this run, value) pair, a method at most once, an lr finite and
    > 0, epochs an integer >= 0."""
    seen = set()
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"{flag}: expected METHOD=VALUE items, got {pair!r}")
        name, value = pair
        if name not in names:
            raise ValueError(f"{flag}: {name!r} is not a method of this run (choose from {', '.join(sorted(names))})")
        if name in seen:
            raise ValueError(f"{flag}: {name!r} given twice")
        seen.add(name)
        if kind is int and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"{flag}: {name} epochs must be an integer >= 0, got {value!r}")
        if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{flag}: {name} lr must be a finite number > 0, got {value!r}")


def _smoke(out: str) -> TaalmConfig:
    lora = LoRAConfig(rank=4, alpha=1.0, dropout=0.1)
    return TaalmConfig(
        preset="smoke", out=out, strict_selection=False, unchanged_per_period=6, heatmap_docs=2,
        data=SyntheticCKLConfig(pt_changed=4, to_learn_pool=10, ta_pool=10, twiki_pool=6, other=6, to_learn=8,
                                not_to_forget=8, bios_per_person=1, distractors=1),
        model=ModelSize(hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64),
        pt=PTConfig(epochs=2, batch_size=8, seq_len=64), theta_lora=lora, phi=PhiConfig(lora=lora),
        metatrain=MetaTrainConfig(epochs=1, meta_batch=4, val_size=4, val_every=2, max_steps=3, val_epochs=1),
        ckl=CKLConfig(epochs=2, batch_size=4, lr=1e-3, eval_batch=16),
        twiki=CKLConfig(epochs=1, batch_size=4, lr=1e-3, eval_batch=16))


def _small(out: str) -> TaalmConfig:
    lora = LoRAConfig(rank=16, alpha=4.0, dropout=0.1)
    data = SyntheticCKLConfig(pt_changed=30, to_learn_pool=60, ta_pool=120, twiki_pool=60, other=30, to_learn=45,
                              not_to_forget=50, bios_per_person=1)
    return TaalmConfig(
        preset="small", out=out, theta_lora=lora, phi=PhiConfig(lora=lora), data=data,
        model=ModelSize(hidden=64, layers=3, heads=4, kv_heads=2, intermediate=192),
        pt=PTConfig(epochs=40, batch_size=16, seq_len=128), unchanged_per_period=50,
        metatrain=MetaTrainConfig(epochs=16, meta_batch=8, val_size=16, val_every=10, val_lr=3e-3,
                                  outer=AdamWConfig(lr=2e-2), meta=MetaConfig(pair_chunk=4)),
        ckl=CKLConfig(epochs=30, batch_size=16, lr=3e-3, eval_batch=50),
        twiki=CKLConfig(epochs=1, batch_size=16, lr=3e-3, eval_batch=50))


def _paper(out: str) -> TaalmConfig:
    lora = LoRAConfig(rank=64, alpha=16.0, dropout=0.1)
    data = SyntheticCKLConfig(pt_changed=300, to_learn_pool=600, ta_pool=4200, twiki_pool=1800, other=800,
                              to_learn=500, not_to_forget=500, bios_per_person=3)
    return TaalmConfig(
        preset="paper", out=out, data=data, theta_lora=lora, phi=PhiConfig(lora=lora),
        model=ModelSize(hidden=768, layers=12, heads=12, kv_heads=12, intermediate=3072),
        pt=PTConfig(epochs=60, batch_size=64, seq_len=512, peak_lr=1e-3, min_lr=5e-5),
        metatrain=MetaTrainConfig(epochs=30, meta_batch=16, val_size=16, val_every=10),
        ckl=CKLConfig(epochs=30, batch_size=64, lr=1e-4), twiki=CKLConfig(epochs=1, batch_size=64, lr=1e-4),
        unchanged_per_period=500)


PRESETS = {"smoke": _smoke, "small": _small, "paper": _paper}


def preset(name: str, out: str | None = None) -> TaalmConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    return PRESETS[name](out or f"runs/taalm-{name}")


SEED_FIELDS = ("pt.seed", "lora_seed", "ckl.seed", "ckl.kadapter.seed", "twiki.seed", "twiki.kadapter.seed",
               "phi.seed", "metatrain.seed", "metatrain.split_seed", "metatrain.order_seed")
"""Every seed of the study, as dotted field paths: θ0's pre-training (initialisation and batch order), θ0's LoRA
initialisation, the LAMA-CKL and TemporalWiki epoch order, dropout and K-Adapter initialisation, φ's head and
adapters, φ's meta-training key, its validation split and its pair order. The world (``data.seed``: people,
changes, evidence, the TemporalWiki periods and review sample) is not among them: every seed runs the same
benchmark, though the LAMA-CKL sets are selected by each seed's own θ0 (strict selection, spec §5.5)."""
SEED_STRIDE = 1000
"""Study seed N moves every seed of :data:`SEED_FIELDS` by ``SEED_STRIDE · N`` from the preset's value (N = 0: the
preset itself). The presets' seeds lie within 0..42, far below the stride, so no stage's seed at one N equals
another stage's seed at another N (N < 1000)."""


def get_field(cfg, path: str):
    """The value of ``cfg`` at a dotted field path (``"metatrain.seed"``)."""
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def set_field(cfg, path: str, value):
    """``cfg`` (a frozen dataclass) with the field at a dotted path replaced by ``value``."""
    head, _, rest = path.partition(".")
    return dataclasses.replace(cfg, **{head: set_field(getattr(cfg, head), rest, value) if rest else value})


def stage_seeds(cfg: TaalmConfig) -> dict[str, int]:
    """Every stage's seed (:data:`SEED_FIELDS`) of ``cfg``."""
    return {path: get_field(cfg, path) for path in SEED_FIELDS}


def with_seed(cfg: TaalmConfig, seed: int) -> TaalmConfig:
    """``cfg`` at study seed ``seed``: each seed of :data:`SEED_FIELDS` becomes its value at study seed 0 plus
    ``SEED_STRIDE · seed`` (``with_seed(preset(p), 0) == preset(p)``; applying it again replaces the shift)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_STRIDE:
        raise ValueError(f"--seed must be an integer in [0, {SEED_STRIDE}), got {seed!r}")
    shift = SEED_STRIDE * (seed - cfg.seed)
    for path in SEED_FIELDS:
        cfg = set_field(cfg, path, get_field(cfg, path) + shift)
    return dataclasses.replace(cfg, seed=seed)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What every method of one run shares: the world, its tokenizer, θ0, the selected sets, φ."""

    world: object
    tok: object
    model: object
    pt_record: dict
    sets: object
    setup: stages.PhiHandle


def prepare(cfg: TaalmConfig, *, write_config: bool = True) -> Prepared:
    """The shared stages (world → tokenizer → θ0 → set selection → φ), each resumed from ``cfg.out``.
    ``write_config=False``: a folder's ``config.json`` is checked against ``cfg`` but not rewritten (a study that
    only reads the folder's θ0 and φ, ``taalm_lr``)."""
    out = pathlib.Path(cfg.out)
    stages.check_config(out, cfg, write=write_config)
    world = build_synthetic_world(cfg.data)
    tok = stages.tokenizer(out, world)
    model = build_lm(cfg.model, len(tok), seed=cfg.pt.seed)
    pt_record = pretrain_texts(model, tok, world.pt_texts, cfg.pt, out / "pt", progress=cfg.progress)
    sets = stages.select_sets(out, world, lambda: candidate_scores(model, tok, world.all_records()),
                              cfg.strict_selection)
    _, setup = stages.phi_stage(out, cfg, model, tok, sets)
    return Prepared(world, tok, model, pt_record, sets, setup)


def run(cfg: TaalmConfig, *, twiki: bool = True, on_stage=None) -> dict:
    """Every stage (module docstring); returns ``{"lama": {method: result}, "twiki": {method: [periods]}}``.
    ``on_stage(name)`` is called when the LAMA-CKL (``"lama"``) and TemporalWiki (``"twiki"``) tables are done
    (``cfka taalm --record`` writes its records there)."""
    out = pathlib.Path(cfg.out)
    p = prepare(cfg)
    world, tok, model, pt_record, sets, setup = p.world, p.tok, p.model, p.pt_record, p.sets, p.setup
    lama = stages.lama_stage(out, cfg, model, tok, sets, setup, world)
    if on_stage is not None:
        on_stage("lama")
    tw = stages.twiki_stage(out, cfg, model, tok, world, setup, sets) if twiki else {}
    if on_stage is not None and twiki:
        on_stage("twiki")
    stages.write_reports(out, cfg, lama, tw, sets, pt_record, setup, tok)
    return {"lama": lama, "twiki": tw}

