"""LAMA-CKL on the reference's own files with a local HF model (spec taalm.md §5.1, §5.2, §5.4–§5.6): the recipe
behind ``cfka taalm --lama-ckl DIR --model HF_DIR``, plus the pieces the TemporalWiki recipe
(``runs/twiki_real.py``) shares: the model and tokenizer, θ0 per method and update mode, φ, resumable results.

    spec = RealCKLSpec(model="models/TinyLlama", out="runs/lama-real", lama_ckl="data/LAMA_ckl",
                       phi_train="data/LAMA_ckl/train_attention_traindata.jsonl", methods=("Finetune", "TAALM"))
    results = run_lama(spec)      # {method: {"history": [...], "summary": {...}}}; resumes from spec.out

Files: ``DIR/variant.jsonl`` (TO-LEARN: its ``evidence`` is the training stream, its ``task_descriptive`` the
learning probe) and ``DIR/invariant_descriptive.jsonl`` (NOT-TO-FORGET: its descriptive probes measure
forgetting; its evidence is Mix-review's replay, quirk #25). Each point k = 0 … epochs scores both probe sets with
the §5.5 object accuracy (partial credit) and NLL; Top Acc / Epoch / NF Acc / Total Knowledge follow §5.6.

θ0 of a method (``theta_for``): the HF model with fresh LoRA (``update="lora"``, the reference: r 64, α 16,
dropout 0.1 on every linear layer), every weight (``full``) or every weight but the embedding and the first
``freeze_layers`` blocks (``freeze``); K-Adapter methods always train the adapter blocks on the frozen model.

φ (``phi_stage``, TAALM methods only): meta-trained (``continual.taalm.meta_train``) on the pairs of
``phi_train`` — the LAMA ``train_attention_traindata.jsonl`` layout (D = ``evidence``, T_D = ``task_schematic``)
or TemporalWiki TA rows ``{text, subject, relation, object}`` (D = ``text``, T_D = the schematic template) —
with the inner θ = the ``model`` with LoRA and φ's body = ``phi_model`` (default ``model``). A φ body from
another model must share θ's tokenizer, because φ's weights reach θ by token id: the two tokenizers' content
hashes (``provenance.tokenizer_fingerprint``) must be equal, else one error names ``--phi-model``. φ is saved to
``out/phi`` with the fingerprint of the tokenizer it was made for, and reused by a later call only with that
tokenizer (else one line names ``--out`` and the folder); meta-training itself restarts if killed.

Resuming: each method's run checkpoints its train state and PRNG key after every epoch (``out/lama/<slug>/``,
``train.checkpoint.CheckpointDir``) next to its per-point history (written atomically before the checkpoint);
a killed run restarts from its last complete epoch and reproduces the uninterrupted run's batches. A finished
method is one atomic ``out/lama/<slug>.json``; its checkpoints are then removed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import time
from typing import Callable

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax import jsonio
from cfka_jax.continual import peft
from cfka_jax.continual.ckl import CKLConfig, Stream, Trainer, updates_per_epoch
from cfka_jax.continual.ckl_methods import Theta, build_theta, needs_phi, review_of
from cfka_jax.continual.ckl_setup import meta_setup, merged_phi
from cfka_jax.continual.peft import LoRAConfig
from cfka_jax.continual.taalm import MetaTrainConfig, PhiConfig, doc_weights, load_phi, meta_train, save_phi
from cfka_jax.continual.taalm.metatrain import PairSet
from cfka_jax.continual.taalm.phi import make_logits_fn, make_weights_fn, phi_trainable, split_trainable
from cfka_jax.data.ckl_encode import Encoded, encode
from cfka_jax.data.io import iter_jsonl
from cfka_jax.data.lama_ckl import read_lama_ckl, schematic_probe
from cfka_jax.data.temporalwiki import read_ta_rows
from cfka_jax.eval.knowledge_probes import ckl_summary
from cfka_jax.parallel.mesh import mesh_of, parse_mesh
from cfka_jax.parallel.rules import batch_sharding, place, tree_shardings
from cfka_jax.provenance import KEY, check_made_from, tokenizer_fingerprint
from cfka_jax.runs.method import Method, method_options, resolve_each
from cfka_jax.runs.specs import DTYPES, UPDATES, check_update_options
from cfka_jax.train.checkpoint import CheckpointDir

LAMA_FILES = {"to_learn": "variant.jsonl", "not_to_forget": "invariant_descriptive.jsonl"}
_RESUMABLE = ("methods", "progress", "out")


@dataclasses.dataclass(frozen=True)
class RealCKLSpec:
    """One ``cfka taalm --lama-ckl`` / ``--temporalwiki`` run on real files (module docstring).

    Attributes:
        model: local HF folder of θ (config.json, safetensors, tokenizer).
        lama_ckl / temporalwiki: the data folder (exactly one is set).
        phi_model: HF folder of φ's body (default ``model``); phi_train: the meta-training pairs file.
        update: ``lora`` (reference), ``full`` or ``freeze`` (``freeze_layers`` blocks, default half).
        ckl: the protocol's training settings (reference: 30 epochs, batch 64, AdamW lr 1e-4, wd 0.01).
        limit: use only the first ``limit`` records of each file (cost measurements, smoke runs; not the benchmark).
        review: TemporalWiki Mix-review documents (JSONL of ``{"text"}`` or a CSV, column 0).
        max_docs: TemporalWiki: at most this many diff-set documents per period (None: all).
    """

    model: str
    out: str
    lama_ckl: str | None = None
    temporalwiki: str | None = None
    phi_model: str | None = None
    phi_train: str | None = None
    methods: tuple[str, ...] = ("Finetune", "TAALM")
    update: str = "lora"
    lora_rank: int = 64
    lora_alpha: float = 16.0
    lora_dropout: float = 0.1
    freeze_layers: int | None = None
    dtype: str = "float32"
    mesh: str | None = None
    ckl: CKLConfig = CKLConfig()
    metatrain: MetaTrainConfig = MetaTrainConfig()
    max_length: int = 512
    limit: int | None = None
    review: str | None = None
    max_docs: int | None = None
    progress: bool = True

    def __post_init__(self):
        if isinstance(self.methods, list):
            object.__setattr__(self, "methods", tuple(self.methods))
        if (self.lama_ckl is None) == (self.temporalwiki is None):
            raise ValueError("give exactly one of --lama-ckl DIR and --temporalwiki DIR")
        self.resolved  # noqa: B018 (resolves every method: unknown or unavailable components fail here)
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"--methods: a method repeats in {self.methods}")
        if self.update not in UPDATES:
            raise ValueError(f"--update must be one of {UPDATES}, got {self.update!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        for name in ("lora_rank", "max_length", "limit", "max_docs"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (2 if name == "max_length"
                                                                                       else 1)):
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {v!r}")
        if self.freeze_layers is not None and (self.update != "freeze" or self.freeze_layers < 0):
            raise ValueError("--freeze-layers needs --update freeze and a value >= 0")
        if self.mesh is not None:
            parse_mesh(self.mesh)
        if self.needs_phi and self.phi_train is None:
            raise ValueError(f"--phi-train FILE is required for the TAALM methods in --methods {self.methods}")
        for flag, path in (("--model", self.model), ("--phi-model", self.phi_model), ("--phi-train", self.phi_train),
                           ("--lama-ckl", self.lama_ckl), ("--temporalwiki", self.temporalwiki),
                           ("--review", self.review)):
            if path is not None and not os.path.exists(path):
                raise FileNotFoundError(f"{flag} {path}: no such file or folder")

    @property
    def needs_phi(self) -> bool:
        return any(needs_phi(m) for m in self.resolved)

    @property
    def resolved(self) -> tuple[Method, ...]:
        """The methods of ``methods``, resolved by the one registry (``runs/method``) for LAMA-CKL or TemporalWiki
        (whose documents carry no object: no Oracle), with ``ckl.rho_k``."""
        return resolve_each(self.methods, "ckl" if self.lama_ckl is not None else "temporalwiki", flag="--methods",
                            options=method_options(rho_k=self.ckl.rho_k))

    @property
    def lora(self) -> LoRAConfig:
        return LoRAConfig(rank=self.lora_rank, alpha=self.lora_alpha, dropout=self.lora_dropout)


# ------------------------------------------------------------------------------------------------- files


def _read_list(path: pathlib.Path, key: str) -> list[dict]:
    """A per-epoch / per-period record list written by ``jsonio.write_json_atomic``, each record holding ``key``.

    Raises:
      ValueError: invalid JSON (file and line), not a list of objects, or a record without ``key`` (file and index).
    """
    records = jsonio.read_json(path)
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
    for i, r in enumerate(records):
        if not isinstance(r, dict) or key not in r:
            raise ValueError(f"{path}: record [{i}] is not an object with key {key!r}")
    return records


def slug(name: str) -> str:
    return name.lower().replace(" + ", "+").replace("(", "").replace(")", "").replace(" ", "-")


def check_folder(spec: RealCKLSpec) -> pathlib.Path:
    """``--out``, checked and left as it is: a folder made with other settings (the method list may change) is
    refused. :func:`start_folder` writes its ``config.json`` once every input is resolved."""
    out = pathlib.Path(spec.out)
    new = json.loads(json.dumps({k: v for k, v in dataclasses.asdict(spec).items() if k not in _RESUMABLE}))
    path = out / "config.json"
    if path.exists():
        old = jsonio.read_json_object(path, "a TAALM run config (JSON object)")
        diff = sorted(k for k in new if k in old and new[k] != old[k])
        if diff:
            raise ValueError(f"--out {out} holds a run made with other settings ({', '.join(diff)}); use another "
                             f"--out")
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} is not an empty folder and holds no run config.json; refusing to write a "
                         f"run into it")
    return out


def start_folder(spec: RealCKLSpec) -> pathlib.Path:
    """Write ``out/config.json`` (after :func:`check_folder` and every input check)."""
    out = pathlib.Path(spec.out)
    jsonio.write_json_atomic(out / "config.json", dataclasses.asdict(spec), indent=1, default=float)
    return out


# ------------------------------------------------------------------------------------------- model, tokenizer


def load_lm(path: str, dtype: str):
    """(NNX model, tokenizer) of a local HF folder (``models.from_pretrained``; nothing is downloaded)."""
    from cfka_jax.models import from_pretrained, load_tokenizer

    tok = load_tokenizer(path)
    model = from_pretrained(path, dtype=DTYPES[dtype] or jnp.float32)
    if model.cfg.vocab_size < len(tok):
        raise ValueError(f"--model {path}: the embedding has {model.cfg.vocab_size} rows but the tokenizer "
                         f"{len(tok)} tokens")
    return model, tok


def phi_body(spec: RealCKLSpec, theta_model, tok):
    """φ's body: a copy of θ's model, or ``--phi-model`` after checking that its tokenizer is θ's (float32)."""
    from cfka_jax.models import from_pretrained, load_tokenizer

    if spec.phi_model is None:
        return theta_model
    other = load_tokenizer(spec.phi_model)
    a, b = tokenizer_fingerprint(tok), tokenizer_fingerprint(other)
    if a != b:
        raise ValueError(f"--phi-model {spec.phi_model}: its tokenizer differs from --model's (content hash "
                         f"{b} vs {a}); φ's weights reach θ by token id, so both must share a tokenizer")
    body = from_pretrained(spec.phi_model, dtype=jnp.float32)
    if body.cfg.vocab_size < len(tok):
        raise ValueError(f"--phi-model {spec.phi_model}: {body.cfg.vocab_size} embedding rows < {len(tok)} tokens")
    return body


def check_theta(spec: RealCKLSpec, model) -> None:
    """The update options against θ's shape, before anything is written (``runs/specs.check_update_options``:
    ``--freeze-layers`` below its blocks)."""
    check_update_options(spec.update, spec.freeze_layers, spec.lora_rank, blocks=model.cfg.num_hidden_layers,
                         model=f"--model {spec.model}")


def theta_for(base, method: Method, spec: RealCKLSpec) -> Theta:
    """θ0 of ``method`` under ``spec.update`` (module docstring)."""
    if method.hooks.update is not None or spec.update == "lora":
        return build_theta(base, method, spec.lora, spec.ckl.kadapter)
    model = nnx.clone(base)
    if spec.update == "full":
        trainable = nnx.Param
    else:
        check_theta(spec, model)
        n = model.cfg.num_hidden_layers // 2 if spec.freeze_layers is None else spec.freeze_layers
        trainable = peft.trainable_filter(model, num_frozen_blocks=n, freeze_embeddings=True, lora=False)
    graphdef, train, frozen, rest = nnx.split(model, trainable, nnx.Param, ...)
    return Theta(make_logits_fn(graphdef, rest), train, frozen)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where θ and the batches live: one device (``put`` = ``jnp.asarray``) or ``--mesh`` (parameters by the
    logical-axis rules, batch rows over the data × fsdp axes)."""

    mesh: object = None

    @classmethod
    def of(cls, spec: RealCKLSpec) -> "Placement":
        if spec.mesh is None:
            return cls()
        mesh = mesh_of(spec.mesh)
        width = mesh.shape["data"] * mesh.shape["fsdp"]
        if spec.ckl.batch_size % width:
            raise ValueError(f"--batch-size {spec.ckl.batch_size} is not a multiple of the {width} batch shards of "
                             f"--mesh {spec.mesh}")
        return cls(mesh)

    def theta(self, theta: Theta) -> Theta:
        if self.mesh is None:
            return theta
        return Theta(theta.logits, place(theta.train, tree_shardings(theta.train, self.mesh)),
                     place(theta.frozen, tree_shardings(theta.frozen, self.mesh)))

    def put(self) -> Callable:
        if self.mesh is None:
            return jnp.asarray
        rows = batch_sharding(self.mesh)
        return lambda v: jax.device_put(np.asarray(v), rows)


# ------------------------------------------------------------------------------------------------------ φ


def read_pairs(path: str, tok, *, max_length: int = 512, limit: int | None = None) -> PairSet:
    """(D, T_D) pairs of a LAMA TA file (§5.2 records) or TemporalWiki TA rows (§4.1), detected from the first
    record; D is truncated to ``max_length`` tokens, T_D never.

    Raises:
        ValueError: an empty file, or records of neither layout (naming the file and line).
    """
    first = next(iter_jsonl(path), None)
    if first is None:
        raise ValueError(f"--phi-train {path}: no records")
    where, rec = first
    if "evidence" in rec:
        rows = [(r.evidence, r.task_schematic, r.object) for r in read_lama_ckl(path)]
    elif "text" in rec:
        rows = [(r["text"], schematic_probe(r["subject"], r["relation"], r["object"]), r["object"])
                for r in read_ta_rows(path)]
    else:
        raise ValueError(f"{where}: neither a LAMA-CKL record (evidence, task_schematic, object, ...) nor a "
                         f"TemporalWiki TA row (text, subject, relation, object); keys {sorted(rec)}")
    rows = rows[:limit] if limit else rows
    objects = [o for _, _, o in rows]
    return PairSet(encode(tok, [d for d, _, _ in rows], objects, max_length=max_length),
                   encode(tok, [t for _, t, _ in rows], objects, max_length=1 << 30))


@dataclasses.dataclass
class PhiHandle:
    """φ's pure weights function and pytrees; ``docs(enc)`` gives one weight array per document."""

    weights_fn: object
    train: object
    frozen: object

    def docs(self, enc: Encoded) -> tuple[np.ndarray, ...]:
        return doc_weights(self.weights_fn, self.train, self.frozen, enc, batch_size=16)


@dataclasses.dataclass(frozen=True)
class PhiInputs:
    """What φ is made from, resolved before anything is written (:func:`phi_inputs`): a saved φ in ``out/phi``
    (checked against θ's tokenizer), or φ's body and meta-training pairs."""

    saved: bool
    body: object = None
    pairs: PairSet | None = None


def phi_inputs(out: pathlib.Path, spec: RealCKLSpec, theta_model, tok) -> PhiInputs | None:
    """φ's inputs, checked and read, writing nothing: a φ saved in ``out/phi`` must record θ's tokenizer (before any
    parameter is read); otherwise ``--phi-model`` must share θ's tokenizer and ``--phi-train`` is read."""
    if not spec.needs_phi:
        return None
    folder = out / "phi"
    if (folder / "phi.json").exists():
        meta = jsonio.read_json_object(folder / "phi.json", "a φ record (JSON object)")
        check_made_from(meta.get(KEY), {"tokenizer": tokenizer_fingerprint(tok)}, flag="--out", folder=folder)
        return PhiInputs(saved=True)
    body = phi_body(spec, theta_model, tok)
    return PhiInputs(False, body, read_pairs(spec.phi_train, tok, max_length=spec.max_length, limit=spec.limit))


def phi_stage(out: pathlib.Path, spec: RealCKLSpec, theta_model, tok, inputs: PhiInputs | None) -> PhiHandle | None:
    """φ for the TAALM methods: ``out/phi`` when saved, else meta-trained on the pairs of ``inputs`` (module
    docstring)."""
    if inputs is None:
        return None
    folder = out / "phi"
    phi_cfg = PhiConfig(lora=spec.lora)
    if inputs.saved:
        phi, phi_cfg, _ = load_phi(folder)
    else:
        pairs = inputs.pairs
        setup = meta_setup(theta_model, phi_cfg, spec.lora, phi_body=inputs.body)
        t0 = time.perf_counter()
        res = meta_train(setup.fns, setup.phi_train, setup.ops, pairs, spec.metatrain, progress=spec.progress)
        phi = merged_phi(setup, res.phi)
        jsonio.write_json_atomic(out / "metatrain.json", {
            "best_step": res.best_step, "wall_s": time.perf_counter() - t0, "pairs": len(pairs.d),
            "empty_object_masks": pairs.t.empty, "history": res.history, "validation": res.validation},
            indent=1, default=float)
        save_phi(folder, phi, phi_cfg, step=res.best_step, extra={"pairs": len(pairs.d)},
                 made_from={"tokenizer": tokenizer_fingerprint(tok)})
    pg, train, frozen, rest = split_trainable(phi, phi_trainable(phi, lora=phi_cfg.lora is not None))
    return PhiHandle(make_weights_fn(pg, rest), train, frozen)


def stream_of(tok, texts, objects, handle: PhiHandle | None, max_length: int) -> Stream:
    enc = encode(tok, texts, objects, max_length=max_length)
    return Stream(enc, handle.docs(enc) if handle is not None else None)


# ------------------------------------------------------------------------------------------------ LAMA-CKL


def read_lama_dir(spec: RealCKLSpec) -> dict:
    """``{"to_learn": records, "not_to_forget": records}`` of the LAMA-CKL folder (first ``limit`` of each)."""
    out = {}
    for name, file in LAMA_FILES.items():
        path = os.path.join(spec.lama_ckl, file)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--lama-ckl {spec.lama_ckl}: no {file} (expected "
                                    f"{', '.join(LAMA_FILES.values())})")
        out[name] = read_lama_ckl(path)[:spec.limit] if spec.limit else read_lama_ckl(path)
    return out


def resumable_lama(folder: pathlib.Path, trainer: Trainer, stream: Stream, probes: dict[str, Encoded],
                   review: Stream | None, epochs: int) -> list[dict]:
    """The LAMA-CKL points k = 0 … ``epochs`` of one method, checkpointed per epoch (module docstring)."""
    ckpts, hist_path = CheckpointDir(folder / "checkpoints", keep=1), folder / "history.json"
    history = _read_list(hist_path, "epoch") if hist_path.exists() else []
    restored = ckpts.restore_latest({"state": trainer.state, "key": trainer.key})
    done = 0
    if restored is not None:
        tree, done = restored
        trainer.state, trainer.key = tree["state"], tree["key"]
    history = [h for h in history if h["epoch"] <= done]
    if not history:
        history = [{"epoch": 0, "train_loss": float("nan"), **trainer.score(probes)}]
        jsonio.write_json_atomic(hist_path, history, indent=1, default=float)
    for epoch in range(done + 1, epochs + 1):
        t0 = time.perf_counter()
        loss = trainer.train_epoch(stream, review, epoch)
        history.append({"epoch": epoch, "train_loss": loss, **trainer.score(probes),
                        "epoch_s": time.perf_counter() - t0})
        # before the checkpoint: a kill in between redoes this epoch
        jsonio.write_json_atomic(hist_path, history, indent=1, default=float)
        ckpts.save(epoch, {"state": trainer.state, "key": trainer.key})
    return history


def run_lama(spec: RealCKLSpec) -> dict:
    """Every method of ``spec`` on the LAMA-CKL folder; returns {method: {"history", "summary"}} (module docstring)."""
    out = check_folder(spec)  # every input is resolved before --out is written
    where = Placement.of(spec)
    data = read_lama_dir(spec)
    model, tok = load_lm(spec.model, spec.dtype)
    check_theta(spec, model)
    phi = phi_inputs(out, spec, model, tok)
    start_folder(spec)
    handle = phi_stage(out, spec, model, tok, phi)
    tl, nf = data["to_learn"], data["not_to_forget"]
    stream = stream_of(tok, [r.evidence for r in tl], [r.object for r in tl], handle, spec.max_length)
    review = stream_of(tok, [r.evidence for r in nf], [r.object for r in nf], handle, spec.max_length)
    probes = {name: encode(tok, [r.task_descriptive for r in rows], [r.object for r in rows], max_length=1 << 30)
              for name, rows in data.items()}
    results = {}
    for name, method in zip(spec.methods, spec.resolved):
        path = out / "lama" / f"{slug(name)}.json"
        if path.exists():
            results[name] = jsonio.read_json_object(path, "a method result (JSON object)")
            continue
        t0 = time.perf_counter()
        theta = where.theta(theta_for(model, method, spec))
        trainer = Trainer(theta, method, spec.ckl, spec.ckl.epochs * updates_per_epoch(len(stream.docs), spec.ckl),
                          put=where.put())
        history = resumable_lama(out / "lama" / slug(name), trainer, stream, probes,
                                 review_of(method, review), spec.ckl.epochs)
        summary = ckl_summary([h["to_learn/acc"] for h in history], [h["not_to_forget/acc"] for h in history])
        res = {"history": history, "summary": summary, "wall_s": time.perf_counter() - t0,
               "empty_object_masks": {"evidence": stream.docs.empty, **{k: v.empty for k, v in probes.items()}}}
        jsonio.write_json_atomic(path, res, indent=1, default=float)
        shutil.rmtree(out / "lama" / slug(name), ignore_errors=True)
        results[name] = res
        if spec.progress:
            print(f"[taalm] LAMA-CKL {name}: Top Acc {summary['top_acc']:.4f} (epoch {summary['epoch']}), "
                  f"NF Acc {summary['nf_acc']:.4f}, {res['wall_s']:.0f}s", flush=True)
    return results
