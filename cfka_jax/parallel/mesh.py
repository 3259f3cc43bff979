"""The device mesh: named axes ``data`` (batch), ``fsdp`` (batch and parameter shards) and ``tensor`` (heads, MLP
and vocabulary shards), plus the multi-host start.

    mesh = make_mesh(MeshConfig(data=2, fsdp=4))              # 8 devices
    mesh = make_mesh(parse_mesh("data=2,fsdp=2,tensor=2"))

Axes use ``AxisType.Auto``: the compiler propagates shardings from the placed inputs and the jit's out_shardings
(GSPMD), so model code carries no sharding annotations. A mesh of size 1 is the single-device case.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

AXES = ("data", "fsdp", "tensor")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Sizes of the mesh axes; their product must equal the number of devices used."""

    data: int = 1
    fsdp: int = 1
    tensor: int = 1

    def __post_init__(self):
        for name in AXES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"mesh axis {name} must be an integer >= 1, got {value!r}")

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.data, self.fsdp, self.tensor)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


def parse_mesh(text: str) -> MeshConfig:
    """``"data=2,fsdp=4"`` → ``MeshConfig(data=2, fsdp=4)``; ``"auto"`` → every device on ``data``.

    Raises:
      ValueError: an unknown axis, a repeated axis or a size that is not a positive integer (named).
    """
    if text.strip() == "auto":
        return MeshConfig(data=jax.device_count())
    sizes: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        if name not in AXES or name in sizes:
            raise ValueError(f"--mesh: unknown or repeated axis {name!r} in {text!r}; axes are {AXES}")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"--mesh: axis {name} needs a positive integer size, got {value!r}")
        sizes[name] = int(value)
    return MeshConfig(**sizes)


def make_mesh(cfg: MeshConfig, devices=None) -> jax.sharding.Mesh:
    """A mesh over ``devices`` (default: every device of every process) with axes ``AXES``.

    Raises:
      ValueError: the mesh size differs from the number of devices.
    """
    devices = jax.devices() if devices is None else list(devices)
    if cfg.size != len(devices):
        raise ValueError(f"mesh {dict(zip(AXES, cfg.shape))} has {cfg.size} devices, but {len(devices)} are "
                         f"available; choose sizes whose product is {len(devices)}")
    auto = (jax.sharding.AxisType.Auto,) * len(AXES)
    return jax.make_mesh(cfg.shape, AXES, devices=devices, axis_types=auto)


def mesh_of(text: str | None) -> jax.sharding.Mesh | None:
    """The mesh of a ``--mesh`` value (None for None), made before a run writes anything: a mesh whose size is not
    this machine's device count is refused naming ``--mesh``.

    Raises:
      ValueError: "--mesh <text>: ..." (``parse_mesh``, :func:`make_mesh`).
    """
    if text is None:
        return None
    cfg = parse_mesh(text)
    try:
        return make_mesh(cfg)
    except ValueError as err:
        raise ValueError(f"--mesh {text}: {err}") from None


def initialize_distributed(coordinator: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None) -> None:
    """Start multi-host JAX (``jax.distributed.initialize``) before any device is touched.

    Arguments override the environment variables ``CFKA_COORDINATOR``, ``CFKA_NUM_PROCESSES`` and
    ``CFKA_PROCESS_ID``; with none of them set, JAX's own cluster detection (SLURM, Cloud TPU, MPI, …) is used.
    """
    env = os.environ
    coordinator = coordinator or env.get("CFKA_COORDINATOR")
    num_processes = num_processes if num_processes is not None else _env_int("CFKA_NUM_PROCESSES")
    process_id = process_id if process_id is not None else _env_int("CFKA_PROCESS_ID")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    if not value.isdigit():
        raise ValueError(f"environment variable {name} must be a non-negative integer, got {value!r}")
    return int(value)
