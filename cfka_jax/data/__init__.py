"""Synthetic Biography data for continual factual-knowledge acquisition (spec cfka_stoc.md §3).

Layers: ``pools`` and ``templates`` (value pools and sentence templates, the project's own or read from the
reference's files) → ``biography`` (the deterministic world: PT and CPT people, training/test biographies, replay
pools) → ``tokenize`` (word-level tokenizer or any local HF tokenizer; first-match value location) → ``packing``
(EOS-separated fixed chunks, loss and document masks, FTA coordinates) → ``io`` (on-disk formats and caches) →
``pipeline`` (presets and ``build_data``); ``mixing`` (replay into new data at α), ``corpus`` (your own text
files), ``knowedit`` and ``mmlu`` (local benchmark files). Imports only.
"""

from cfka_jax.data.biography import Biography, BiographyConfig, Person, World, generate_world, replay_pool
from cfka_jax.data.mixing import mix_replay, replay_copies
from cfka_jax.data.packing import FtaTargets, Packed, epoch_order, fta_targets, pack
from cfka_jax.data.pipeline import PRESETS, DataBundle, DataConfig, build_data, preset, read_manifest
from cfka_jax.data.pools import PoolSizes, ValuePools, project_pools, read_pool_json
from cfka_jax.data.templates import ATTRIBUTES, Templates, project_templates, read_template_table
from cfka_jax.data.tokenize import (EOS_TOKEN, TokenizedSplit, load_tokenizer, locate_values, tokenize_split,
                                    train_word_tokenizer)

__all__ = [
    "ATTRIBUTES", "EOS_TOKEN", "PRESETS", "Biography", "BiographyConfig", "DataBundle", "DataConfig", "FtaTargets",
    "Packed", "Person", "PoolSizes", "Templates", "TokenizedSplit", "ValuePools", "World", "build_data",
    "epoch_order", "fta_targets", "generate_world", "load_tokenizer", "locate_values", "mix_replay", "pack",
    "preset", "project_pools", "project_templates", "read_manifest", "read_pool_json", "read_template_table",
    "replay_copies", "replay_pool", "tokenize_split", "train_word_tokenizer",
]
