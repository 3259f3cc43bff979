"""Metrics sinks next to ``metrics.jsonl``: TensorBoard event files (tensorboardX) and, when asked, Weights & Biases.

    tracker = Tracker(TrackingConfig(tensorboard="runs/x/tb", wandb_project=None))
    train_lm(..., hooks=RunHooks(on_record=tracker.record))   # every train/eval record of the loop, as written
    tracker.close()

A record ``{"kind": "train" | "eval", "step": t, name: value, ...}`` becomes one scalar per numeric scalar value,
tagged ``<prefix><kind>/<name>`` at global step ``offset + t`` (a task stream gives each stage the offset of the
steps before it). TensorBoard events are written by ``tensorboardX.SummaryWriter`` (no TensorFlow, no hand-written
protobufs; ``pip install tensorboardX`` or the ``tracking`` extra). W&B is used only when ``wandb_project`` is set,
and then it must be installed (``pip install wandb``); the run is started with ``mode`` online / offline.
"""

from __future__ import annotations

import dataclasses
import math
import numbers


@dataclasses.dataclass(frozen=True)
class TrackingConfig:
    """``tensorboard``: an event-file folder or None; ``wandb_project`` (+ ``wandb_mode`` online/offline,
    ``run_name``): a W&B run, or None."""

    tensorboard: str | None = None
    wandb_project: str | None = None
    wandb_mode: str = "online"
    run_name: str | None = None

    def __post_init__(self):
        if self.wandb_mode not in ("online", "offline"):
            raise ValueError(f"wandb_mode must be 'online' or 'offline', got {self.wandb_mode!r}")


def scalars(record: dict) -> dict[str, float]:
    """``{"<kind>/<name>": value}`` of a record's finite numeric scalars (``kind``/``step`` and lists left out)."""
    kind = record.get("kind", "metrics")
    out = {}
    for name, value in record.items():
        if name in ("kind", "step") or isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        if math.isfinite(float(value)):
            out[f"{kind}/{name}"] = float(value)
    return out


class Tracker:
    """The sinks of one run (module docstring); a no-op when neither sink is configured."""

    def __init__(self, cfg: TrackingConfig = TrackingConfig()):
        self.cfg, self.offset, self.prefix = cfg, 0, ""
        self._tb = self._wandb = None
        if cfg.tensorboard is not None:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                raise ValueError("TensorBoard logging needs tensorboardX: pip install tensorboardX "
                                 "(or the 'tracking' extra)") from None
            self._tb = SummaryWriter(logdir=cfg.tensorboard)
        if cfg.wandb_project is not None:
            try:
                import wandb
            except ImportError:
                raise ValueError("--wandb was asked for but wandb is not installed: pip install wandb") from None
            self._wandb = wandb.init(project=cfg.wandb_project, name=cfg.run_name, mode=cfg.wandb_mode,
                                     reinit="finish_previous")

    def at(self, offset: int, prefix: str = "") -> "Tracker":
        """Later records are logged at global step ``offset + step`` with tags prefixed by ``prefix``."""
        self.offset, self.prefix = int(offset), prefix
        return self

    def record(self, record: dict) -> None:
        step = self.offset + int(record.get("step", 0))
        values = {self.prefix + k: v for k, v in scalars(record).items()}
        if self._tb is not None:
            for tag, v in values.items():
                self._tb.add_scalar(tag, v, step)
        if self._wandb is not None and values:
            self._wandb.log(values, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
