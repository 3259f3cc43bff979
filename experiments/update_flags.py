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

import dataclasses

from cfka_jax.parallel.mesh import parse_mesh
from cfka_jax.runs.method import MethodOptions, method_options
from cfka_jax.runs.methods import apply_update
from cfka_jax.runs.specs import check_loop_options, check_update_options, loop_config
from cfka_jax.train.loop import LoopConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainedRunFields:
    """The fields the pretrained-model recipes share (``CorpusCPTConfig``, ``KnowEditRun`` derive from it): replay
    de-duplication, dtype, seed, progress, the update mode and mesh (module docstring), the accelerator loop
    options (:meth:`loop`) and the method options of the one registry (None = ``runs/method.MethodOptions``' default). Keyword-only, so each recipe keeps its own
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
    accumulate: int | None = None
    profile: str | None = None
    keep_checkpoints: int | None = None

    def __post_init__(self):
        check_update_flags(self.update, self.freeze_layers, self.lora_rank, self.mesh)
        check_loop_options(self.accumulate, self.profile, self.keep_checkpoints)

    def loop(self, schedule) -> LoopConfig:
        """The CPT schedule's training loop with the accelerator options (``--accumulate`` micro-batches per
        optimiser step, which must divide the schedule's batch; ``--profile START:STOP``; ``--keep-checkpoints``;
        unset: the loop's defaults), ``runs/specs.loop_config``."""
        check_loop_options(self.accumulate, self.profile, self.keep_checkpoints, schedule.batch)
        return loop_config(schedule, self, self.progress)

    def options(self, **more) -> MethodOptions:
        """The registry's :class:`MethodOptions` of these fields (and ``more``, e.g. a recipe's ``ewc_fisher``)."""
        return method_options(ewc_lambda=self.ewc_lambda, ewc_batches=self.ewc_batches, rho_k=self.rho_k, **more)


def check_update_flags(update: str, freeze_layers: int | None, lora_rank: int, mesh: str | None) -> None:
    """Validates the flags before anything is loaded (ValueError naming the flag): the one check of the update
    options (``runs/specs.check_update_options``) and the mesh's spelling."""
    check_update_options(update, freeze_layers, lora_rank)
    if mesh is not None:
        parse_mesh(mesh)


def frozen_blocks(model, freeze_layers: int | None) -> int:
    """``--freeze-layers`` or, unset, half of the model's blocks."""
    return model.cfg.num_hidden_layers // 2 if freeze_layers is None else freeze_layers


def model_config(path: str, flag: str = "--model", **kwargs):
    """The port config of the local HF folder ``path`` from its ``config.json`` (the weight files' headers checked,
    no tensor read): what the options are checked against before anything is written (``kwargs``:
    ``models.config_from_hf``'s).

    Raises:
      FileNotFoundError / ValueError: no such folder or ``config.json``, or one no registered family reads; the
        message names ``flag``.
    """
    from cfka_jax.models import config_from_hf
    from cfka_jax.models.hub import CONFIG_FILE, open_tensors, read_config

    try:
        cfg = config_from_hf(read_config(path), **kwargs)
        open_tensors(path)  # the weight files and their headers, no tensor read
        return cfg
    except OSError as err:
        raise type(err)(f"{flag} {path}: {err}") from None
    except ValueError as err:
        raise ValueError(f"{flag} {path}/{CONFIG_FILE}: {err}") from None


def check_model_update(cfg: PretrainedRunFields, model_cfg) -> None:
    """The run's update options against the model's shape (``model_cfg``: its port config), before anything is
    written: ``--freeze-layers`` below its blocks (ValueError naming both options)."""
    check_update_options(cfg.update, cfg.freeze_layers, cfg.lora_rank, blocks=model_cfg.num_hidden_layers,
                         model=f"--model {getattr(cfg, 'model', '')}".strip())


def run_mesh(text: str | None):
    """The device mesh of ``--mesh`` (None without it), made before anything is written: a mesh larger than this
    machine is refused naming ``--mesh`` (``parallel/mesh.mesh_of``)."""
    from cfka_jax.parallel.mesh import mesh_of

    return mesh_of(text)


def updated_model(model, update: str, freeze_layers: int | None, lora_rank: int, seed: int):
    """``(model, trainable-mask factory or None)`` of the update mode (``runs/methods.apply_update``)."""
    return apply_update(model, update, freeze_layers=frozen_blocks(model, freeze_layers), lora_rank=lora_rank,
                        seed=seed)
