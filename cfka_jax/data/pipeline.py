"""Everything a PT/CPT run needs from one ``DataConfig``: world → tokenizer → tokenised splits with value
positions → packed chunks with loss masks and FTA targets, cached on disk (spec cfka_stoc.md §3, §5.1).

Presets (``preset(name)``):

* ``smoke``: 40 PT + 10 CPT people, K = 5, chunks of 128 — built in a few seconds (mostly imports); for tests.
  PT train 20k tokens (157 chunks), vocabulary 977.
* ``small``: 300 PT + 100 CPT people, K = 5, chunks of 256. Sized for a ~1–3M-parameter model on 2 CPU cores:
  PT train ≈ 1,500 biographies ≈ 150k tokens (≈ 100 tokens per biography with the project's templates), so one
  pass is ≈ 600 chunks of 256; at a few thousand tokens/s a 10-minute PT budget buys roughly 10–20 passes, i.e.
  50–100 exposures of each fact (K = 5 per pass). The facts themselves (≈ 45 bits per person, ≈ 14k bits for
  300 people) are far below the ~2 bits/parameter capacity of such a model, so compute, not capacity, is the
  limit; trim ``num_pt_people`` if the trainer measures fewer passes. CPT: 500 biographies ≈ 50k tokens.
  Measured: PT train 152,155 tokens (595 chunks), CPT train 49,427 (194 chunks), vocabulary 2,224.
* ``paper``: the reference sizes (100k PT + 20k CPT people, K = 5, chunks of 512) for GPUs/TPUs. Measured with
  the project's tokenizer (vocabulary 4,283): PT train 50.3M tokens (≈ 100.6 per biography; the reference's
  Qwen tokens ≈ 153) = 98,256 chunks, CPT train 10.0M tokens = 19,627 chunks; first build ≈ 10 min on a busy
  2-core machine at ≈ 5.7 GB peak memory, cached reload ≈ 40 s.

Cache layout: ``<cache_dir>/data-<config_hash>/`` holds ``world/``, ``tokenizer/`` (when trained),
``tokenized/<split>.parquet``, ``packed/<name>.npz`` and ``manifest.json`` (sizes and token counts), written last.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import numpy as np

from cfka_jax import jsonio
from cfka_jax.data import io
from cfka_jax.data.biography import BiographyConfig, World
from cfka_jax.data.packing import FtaTargets, Packed, epoch_order, fta_targets, pack
from cfka_jax.data.sharing import name_sharing
from cfka_jax.data.tokenize import (BPE_MIN_VOCAB, TokenizedSplit, load_tokenizer, tokenize_split,
                                    train_word_tokenizer)

SPLITS = ("pt_train", "pt_test", "cpt_train", "cpt_test")
REPLAY_SPLITS = ("replay_all", "replay_half")
EVAL_SETS = ("pt_train", "pt_test", "cpt_test")
"""FTA sets packed in file order: [Train] (PT), [Original] / [Test], [Continual] (§5.1)."""
TRAIN_SETS = ("pt_train", "cpt_train")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """World plus tokenisation and packing settings.

    Attributes:
      bio: the Biography world.
      seq_len: chunk length S (reference 512).
      max_length: truncation length of one biography (reference 512).
      tokenizer_path: a local HF tokenizer folder; None trains the project's tokenizer on the world.
      bpe_vocab: None: the trained tokenizer is word-level (every word its own token); an integer: BPE with that
        many entries (names split into shared pieces, as with a real LM tokenizer). Ignored with
        ``tokenizer_path``.
      doc_mask: pack with document masking (§11 row 6 ``pack.doc_mask``; reference: False).
      pack_seed: seed of the per-epoch document order of training packs.
    """

    bio: BiographyConfig
    seq_len: int = 512
    max_length: int = 512
    tokenizer_path: str | None = None
    bpe_vocab: int | None = None
    doc_mask: bool = False
    pack_seed: int = 42

    def __post_init__(self):
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {self.seq_len}")
        if self.max_length < 2:
            raise ValueError(f"max_length must be >= 2, got {self.max_length}")
        if self.bpe_vocab is not None and (not isinstance(self.bpe_vocab, int) or isinstance(self.bpe_vocab, bool)
                                           or self.bpe_vocab < BPE_MIN_VOCAB):
            raise ValueError(f"bpe_vocab must be an integer >= {BPE_MIN_VOCAB}, got {self.bpe_vocab!r}")


PRESETS = {
    "smoke": DataConfig(BiographyConfig(num_pt_people=40, num_cpt_people=10, train_bios_per_person=5), seq_len=128),
    "small": DataConfig(BiographyConfig(num_pt_people=300, num_cpt_people=100, train_bios_per_person=5), seq_len=256),
    "paper": DataConfig(BiographyConfig(num_pt_people=100_000, num_cpt_people=20_000, train_bios_per_person=5)),
}


def preset(name: str, **overrides) -> DataConfig:
    """A preset ``DataConfig``; ``overrides`` replace top-level fields (e.g. ``doc_mask=True``).

    Raises:
      ValueError: unknown preset name.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown data preset {name!r}; choose from {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)


@dataclasses.dataclass(frozen=True)
class DataBundle:
    """What a training run needs.

    Attributes:
      config: the data config.
      folder: the cache folder of this config.
      world: people and biographies.
      tokenizer: a transformers fast tokenizer.
      splits: tokenised ``pt_train``, ``pt_test``, ``cpt_train``, ``cpt_test``, ``replay_all``, ``replay_half``.
      train: epoch-0 packs of ``pt_train`` and ``cpt_train`` (shuffled; use ``pack_epoch`` for later epochs).
      eval: ``EVAL_SETS`` packed in file order, each with its FTA targets.
    """

    config: DataConfig
    folder: str
    world: World
    tokenizer: object
    splits: dict[str, TokenizedSplit]
    train: dict[str, Packed]
    eval: dict[str, tuple[Packed, FtaTargets]]

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    def pack_epoch(self, docs: list[np.ndarray], epoch: int) -> Packed:
        """Pack ``docs`` in the shuffled order of ``epoch`` (the reference reshuffles every epoch)."""
        return pack(docs, self.config.seq_len, self.eos_id, order=epoch_order(len(docs), self.config.pack_seed, epoch),
                    doc_mask=self.config.doc_mask)


def _train_tokenizer(world: World, folder: str, bpe_vocab: int | None):
    return train_word_tokenizer((b.text for bios in world.splits.values() for b in bios),
                                os.path.join(folder, "tokenizer"), bpe_vocab=bpe_vocab)


def _tokenize_all(config: DataConfig, world: World, tokenizer) -> dict[str, TokenizedSplit]:
    splits = {name: tokenize_split(world.splits[name], world.people, tokenizer, max_length=config.max_length)
              for name in SPLITS}
    for kind in ("all", "half"):
        splits[f"replay_{kind}"] = tokenize_split(world.replay_pool(kind), world.people, tokenizer,
                                                  max_length=config.max_length)
    return splits


def _pack_all(config: DataConfig, splits, eos_id: int):
    train = {}
    for name in TRAIN_SETS:
        docs = splits[name].docs()
        order = epoch_order(len(docs), config.pack_seed, 0)
        train[name] = pack(docs, config.seq_len, eos_id, order=order, doc_mask=config.doc_mask)
    evals = {}
    for name in EVAL_SETS:
        packed = pack(splits[name].docs(), config.seq_len, eos_id, doc_mask=config.doc_mask)
        evals[name] = (packed, fta_targets(packed, splits[name].idx))
    return train, evals


def _manifest(config: DataConfig, world: World, tokenizer, splits, train, evals) -> dict:
    return {
        "config": dataclasses.asdict(config), "vocab_size": len(tokenizer), "eos_id": int(tokenizer.eos_token_id),
        "docs": {k: len(v) for k, v in splits.items()},
        "tokens": {k: int(len(v.tokens)) for k, v in splits.items()},
        "train_chunks": {k: v.num_chunks for k, v in train.items()},
        "eval_chunks": {k: p.num_chunks for k, (p, _) in evals.items()},
        "fta_occurrences": {k: int(len(f.chunk)) for k, (_, f) in evals.items()},
        "fta_dropped_pos0": {k: f.num_dropped for k, (_, f) in evals.items()},
        "name_sharing": name_sharing(world),
    }


def _load_cached(config: DataConfig, folder: str, tokenizer) -> DataBundle:
    """The bundle read back from ``folder`` (``tokenizer``: the user's, or None to read the cached one).

    Raises:
      io.CorruptCacheError: a cache file is missing, truncated or unreadable (the message names it).
    """
    try:
        world = io.load_world(os.path.join(folder, "world"))
        if tokenizer is None:
            tokenizer = load_tokenizer(os.path.join(folder, "tokenizer"))
        splits = {n: io.load_tokenized(os.path.join(folder, "tokenized", f"{n}.parquet"))
                  for n in SPLITS + REPLAY_SPLITS}
        train = {n: io.load_packed(os.path.join(folder, "packed", f"train_{n}.npz"))[0] for n in TRAIN_SETS}
        evals = {n: io.load_packed(os.path.join(folder, "packed", f"eval_{n}.npz")) for n in EVAL_SETS}
    except io.CorruptCacheError:
        raise
    except (ValueError, OSError) as err:
        raise io.CorruptCacheError(str(err)) from err
    return DataBundle(config, folder, world, tokenizer, splits, train, evals)


def _write(folder: str, world, splits, train, evals, manifest) -> None:
    io.save_world(world, os.path.join(folder, "world"))
    os.makedirs(os.path.join(folder, "tokenized"), exist_ok=True)
    os.makedirs(os.path.join(folder, "packed"), exist_ok=True)
    for n, s in splits.items():
        io.save_tokenized(s, os.path.join(folder, "tokenized", f"{n}.parquet"))
    for n, p in train.items():
        io.save_packed(p, None, os.path.join(folder, "packed", f"train_{n}.npz"))
    for n, (p, f) in evals.items():
        io.save_packed(p, f, os.path.join(folder, "packed", f"eval_{n}.npz"))
    jsonio.write_json_atomic(os.path.join(folder, "manifest.json"), manifest, newline=False, indent=1,
                             sort_keys=True)


def build_data(config: DataConfig, cache_dir: str | os.PathLike) -> DataBundle:
    """Build (or read from ``cache_dir``) the world, tokenizer, tokenised splits and packs of ``config``.

    A cache entry with a truncated or corrupt file is deleted and rebuilt, with an ``io.CacheRebuildWarning``
    naming the file.

    Raises:
      ValueError: invalid pool/template/tokenizer inputs or an unlocatable value (see ``tokenize_split``).
    """
    folder = os.path.join(os.fspath(cache_dir), f"data-{io.config_hash(config)}")
    # the user's tokenizer is input, not cache: its errors are raised before the cache is touched
    user_tokenizer = load_tokenizer(config.tokenizer_path) if config.tokenizer_path else None
    if os.path.exists(os.path.join(folder, "manifest.json")):
        try:
            return _load_cached(config, folder, user_tokenizer)
        except io.CorruptCacheError as err:
            io.warn_rebuild(folder, err)
    if os.path.exists(folder):
        shutil.rmtree(folder)  # an interrupted earlier build, or a corrupt one
    from cfka_jax.data.biography import generate_world

    world = generate_world(config.bio)  # validates pool and template files before anything is written
    os.makedirs(folder)
    try:
        tokenizer = user_tokenizer if user_tokenizer is not None else _train_tokenizer(world, folder, config.bpe_vocab)
        splits = _tokenize_all(config, world, tokenizer)
        train, evals = _pack_all(config, splits, int(tokenizer.eos_token_id))
        _write(folder, world, splits, train, evals, _manifest(config, world, tokenizer, splits, train, evals))
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)  # a rejected input leaves no half-built entry behind
        raise
    return DataBundle(config, folder, world, tokenizer, splits, train, evals)


def read_manifest(bundle: DataBundle) -> dict:
    """The sizes and token counts recorded for ``bundle``."""
    return jsonio.read_json_object(os.path.join(bundle.folder, "manifest.json"), "a data manifest (JSON object)")
