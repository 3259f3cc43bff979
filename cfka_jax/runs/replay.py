"""Generative replay configs of the studies, and building (or reusing) a corpus from the pre-CPT model.

Biography (:func:`synthetic_replay_config`, :func:`ensure_replay`) follows the synthetic reference (spec cfka_stoc.md §6.2, §6.4, §7): sources are the first ``num_source_seqs`` documents of
``cpt_train``, candidates are cut to the chunk length S of the preset (512 in the reference, the preset's
``seq_len`` here) with S new tokens sampled through EOS, and the budget is k = tokens(cpt_train) // S sequences
drawn with replacement, i.e. about one copy of the new data, mixed at new-data fraction α by
``data/mixing.mix_replay`` (rule ``reference_copies``). KnowEdit and your own corpus use
:func:`real_replay_config` (§6.3: window-sum spans of 10, stop at EOS, keep every candidate) with the sampling
sizes of their preset.

A Biography corpus records what it was sampled from (:func:`replay_made_from`: the tokenizer's content hash, the
world config's hash, the PT run's identity and step) and is reused only by a run with the same (else one line
naming ``--replay-dir`` and the folder; :func:`check_replay`, called before the CPT run folder is written). The
other corpora record the same things of their parent: a stream stage's the run it starts from (``runs/stream.py``),
a ``--pt-checkpoint`` corpus the PT run and checkpoint step (:func:`checkpoint_made_from`), a KnowEdit /
``corpus-cpt`` corpus the pretrained model's content hash and its source documents (:func:`model_replay_made_from`).
"""

from __future__ import annotations

import dataclasses
import pathlib

from cfka_jax.continual.dedup import MinHashConfig
from cfka_jax.continual.replay import ReplayConfig, ReplayCorpus, build_replay, check_replay_dir
from cfka_jax.provenance import docs_fingerprint, fingerprint, model_fingerprint, tokenizer_fingerprint
from cfka_jax.runs.folder import IGNORED, RunFolder, RunFolderError
from cfka_jax.runs.presets import Preset

GENERATIVE = ("stoc", "random", "lamol", "first_k", "random_no_eos", "random_vocab")
"""Generative replay methods of a CPT run (``continual/replay.KINDS``): the three of the paper and the prompt
controls of issue #23."""


@dataclasses.dataclass(frozen=True)
class ReplaySwitches:
    """The decision-table switches a CPT run exposes (#16, #17, #21, #23)."""

    score_norm: str = "j_plus_1"
    snippet_rule: str = "token_argmax"
    minhash: bool = True
    lamol_sampler: str = "stoc"
    num_source_seqs: int = 10_000
    batch_size: int = 256

    def __post_init__(self):
        if self.lamol_sampler not in ("stoc", "topk20"):
            raise ValueError(f"lamol_sampler must be 'stoc' or 'topk20', got {self.lamol_sampler!r}")

    @property
    def tag(self) -> str:
        """A folder suffix naming the non-default switches ('' for the defaults)."""
        diff = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                if f.name != "batch_size" and getattr(self, f.name) != f.default]
        return ("-" + "-".join(diff)) if diff else ""


def synthetic_replay_config(kind: str, seq_len: int, switches: ReplaySwitches, seed: int) -> ReplayConfig:
    """The synthetic replay config of a preset with chunk length ``seq_len``."""
    return ReplayConfig.synthetic(
        kind, score_norm=switches.score_norm, snippet_rule=switches.snippet_rule,
        span_len=3 if switches.snippet_rule == "token_argmax" else 10, num_source_seqs=switches.num_source_seqs,
        sampler_top_k=20 if kind == "lamol" and switches.lamol_sampler == "topk20" else 0,
        max_new_tokens=seq_len, max_len=seq_len, minhash=MinHashConfig() if switches.minhash else None, seed=seed,
        batch_size=switches.batch_size)


def real_replay_config(kind: str, preset: Preset, *, seed: int, minhash: bool = True) -> ReplayConfig:
    """§6.3 real-data replay with the preset's sampling sizes and chunk length."""
    s = preset.replay
    return ReplayConfig.real(kind, num_source_seqs=s.sources, max_new_tokens=s.new_tokens, max_len=preset.seq_len,
                             num_samples=s.samples, batch_size=s.batch, seed=seed,
                             **({} if minhash else {"minhash": None}))


def replay_made_from(bundle, pt_folder: str | pathlib.Path) -> dict:
    """What a Biography corpus sampled from the finished PT run in ``pt_folder`` is made from
    (``cfka_jax.provenance``): ``tokenizer`` (content hash), ``world`` (hash of the world config),
    ``parent_run`` / ``parent_step`` (``RunFolder.identity``).

    Raises:
      RunFolderError: ``pt_folder`` holds no finished run.
    """
    return {"tokenizer": tokenizer_fingerprint(bundle.tokenizer),
            "world": fingerprint(dataclasses.asdict(bundle.world.config)), **RunFolder(pt_folder).identity()}


def checkpoint_made_from(bundle, pt_folder: str | pathlib.Path, step: int) -> dict:
    """:func:`replay_made_from` of a corpus sampled from a training checkpoint of a PT run still in progress
    (``cfka stoc-regime --pt-checkpoint``): ``parent_run`` is the run's identity as ``RunFolder.identity`` computes
    it (its stored config minus the fields that change no result; no ``final.json`` needed), ``parent_step`` the
    checkpoint's step.

    Raises:
      RunFolderError: ``pt_folder`` holds no run (no ``config.json``).
    """
    folder = RunFolder(pt_folder)
    config = folder.read_json("config.json")
    if config is None:
        raise RunFolderError(f"{folder.path} holds no run (config.json)")
    run = {k: v for k, v in (config.get("run") or {}).items() if k not in IGNORED}
    return {"tokenizer": tokenizer_fingerprint(bundle.tokenizer),
            "world": fingerprint(dataclasses.asdict(bundle.world.config)),
            "parent_run": fingerprint({"run": run, "preset": config.get("preset")}), "parent_step": int(step)}


def model_replay_made_from(model_dir: str | pathlib.Path, tokenizer, source_docs) -> dict:
    """What a real-data corpus (``cfka knowedit``, ``cfka corpus-cpt``) sampled from the pretrained model in
    ``model_dir`` is made from: ``tokenizer`` (content hash), ``parent_model`` (the content hash of its config and
    weights, ``provenance.model_fingerprint``; a pretrained model has no run or step) and ``sources`` (the hash of
    the token ids of the documents it was prompted from)."""
    return {"tokenizer": tokenizer_fingerprint(tokenizer), "parent_model": model_fingerprint(model_dir),
            "sources": docs_fingerprint(source_docs)}


def check_replay(folder: pathlib.Path, bundle, pt_folder: str | pathlib.Path) -> None:
    """Refuse a corpus in ``folder`` made from another tokenizer, world or PT run (or recording none): one line
    naming ``--replay-dir`` and the folder. Reads ``config.json`` only; nothing when the folder holds no corpus."""
    if (pathlib.Path(folder) / "config.json").exists():
        check_replay_dir(folder, replay_made_from(bundle, pt_folder), flag="--replay-dir")


def ensure_replay(folder: pathlib.Path, model, bundle, cfg: ReplayConfig, made_from: dict | None = None,
                  flag: str = "--replay-dir") -> ReplayCorpus:
    """The corpus in ``folder`` (built from the PT ``model`` on ``cpt_train`` when absent). ``made_from``
    (:func:`replay_made_from`) is recorded in a new corpus; a corpus found in ``folder`` must record the same
    (else one line naming ``flag``, the option that chose the folder, and the folder)."""
    new = bundle.splits["cpt_train"]
    corpus = build_replay(model, new.docs(), bundle.tokenizer, cfg, budget_tokens=len(new.tokens),
                          out_dir=folder, made_from=made_from, flag=flag)
    s = corpus.stats
    print(f"[replay {cfg.kind}] {s['num_prompts']} prompts ({s['num_unique_prompts']} distinct), "
          f"{s['num_candidates']} candidates, MinHash dropped {s['minhash_dropped']}, {s['num_sequences']} drawn "
          f"({s['replay_tokens']} tokens), built in {s['total_s']:.1f} s -> {folder}")
    return corpus
