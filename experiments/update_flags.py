"""The update-mode and mesh flags shared by the pretrained-model recipes (``cfka corpus-cpt``, ``cfka knowedit``).

``--update full|freeze|lora`` are the paper's three update modes (spec cfka_stoc.md §4.4, §4.6), applied by
``runs/methods.apply_update`` after the replay corpus is drawn from the unchanged base model:

* ``freeze``: the input embedding and the first ``--freeze-layers`` blocks frozen (default: half of the model's
  blocks, the paper's Pythia N = 6 of 12 and Qwen N = 12 of 24);
* ``lora``: rank ``--lora-rank`` adapters (default 128, §4.6; alpha = 2r) on the family's attention and MLP
  projections, every base weight frozen.

``--mesh data=2,fsdp=4`` (or ``auto``) shards the run over devices (``parallel/mesh.py``).
"""

from __future__ import annotations

import argparse
import dataclasses

from cfka_jax.parallel.mesh import parse_mesh
from cfka_jax.runs.method import MethodOptions, method_options
from cfka_jax.runs.methods import apply_update
from cfka_jax.runs.specs import UPDATES


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainedRunFields:
    """The fields the pretrained-model recipes share (``CorpusCPTConfig``, ``KnowEditRun`` derive from it): replay
    de-duplication, dtype, seed, progress, the update mode and mesh (module docstring) and the method options of
    the one registry (None = ``runs/method.MethodOptions``' default). Keyword-only, so each recipe keeps its own
    required fields first; ``__post_init__`` checks the update flags (subclasses call it first)."""

    minhash: bool = True
    dtype: str = "float32"
    seed: int = 0
    progress: bool = True
    update: str = "full"
    freeze_layers: int | None = None
    lora_rank: int = 128
    mesh: str | None = None
    ewc_lambda: float | None = None
    ewc_batches: int | None = None
    rho_k: float | None = None

    def __post_init__(self):
        check_update_flags(self.update, self.freeze_layers, self.lora_rank, self.mesh)

    def options(self, **more) -> MethodOptions:
        """The registry's :class:`MethodOptions` of these fields (and ``more``, e.g. a recipe's ``ewc_fisher``)."""
        return method_options(ewc_lambda=self.ewc_lambda, ewc_batches=self.ewc_batches, rho_k=self.rho_k, **more)


def add_update_flags(ap: argparse.ArgumentParser) -> None:
    """Adds ``--update``, ``--freeze-layers``, ``--lora-rank`` and ``--mesh`` to ``ap``."""
    ap.add_argument("--update", default="full", choices=UPDATES, help="which weights train (spec §4.4, §4.6)")
    ap.add_argument("--freeze-layers", type=int, default=None,
                    help="--update freeze: blocks frozen after the embedding (default: half of the model's)")
    ap.add_argument("--lora-rank", type=int, default=128, help="--update lora: adapter rank (alpha = 2 x rank)")
    ap.add_argument("--mesh", default=None, help="shard the run over devices, e.g. data=2,fsdp=4 or auto")


def check_update_flags(update: str, freeze_layers: int | None, lora_rank: int, mesh: str | None) -> None:
    """Validates the flags before anything is loaded (ValueError naming the flag)."""
    if update not in UPDATES:
        raise ValueError(f"--update must be one of {UPDATES}, got {update!r}")
    if freeze_layers is not None and (isinstance(freeze_layers, bool) or not isinstance(freeze_layers, int)
                                      or freeze_layers < 0):
        raise ValueError(f"--freeze-layers must be an integer >= 0, got {freeze_layers!r}")
    if isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or lora_rank < 1:
        raise ValueError(f"--lora-rank must be an integer >= 1, got {lora_rank!r}")
    if freeze_layers is not None and update != "freeze":
        raise ValueError(f"--freeze-layers applies to --update freeze only (got --update {update})")
    if mesh is not None:
        parse_mesh(mesh)


def frozen_blocks(model, freeze_layers: int | None) -> int:
    """``--freeze-layers`` or, unset, half of the model's blocks."""
    return model.cfg.num_hidden_layers // 2 if freeze_layers is None else freeze_layers


def check_freeze_layers(model, freeze_layers: int | None) -> None:
    """``--freeze-layers`` is at most the model's number of blocks (ValueError naming the flag)."""
    if freeze_layers is not None and freeze_layers > model.cfg.num_hidden_layers:
        raise ValueError(f"--freeze-layers {freeze_layers} exceeds the model's {model.cfg.num_hidden_layers} blocks")


def updated_model(model, update: str, freeze_layers: int | None, lora_rank: int, seed: int):
    """``(model, trainable-mask factory or None)`` of the update mode (``runs/methods.apply_update``)."""
    return apply_update(model, update, freeze_layers=frozen_blocks(model, freeze_layers), lora_rank=lora_rank,
                        seed=seed)
