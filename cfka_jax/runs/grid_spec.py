"""A run grid of Biography CPT: which members, which axes vary, what stays fixed in the one program.

    axes = grid_axes("lr=1e-3,3e-4;alpha=0.5,0.8;seeds=0,1")          # or grid_axes("grid.toml") / "grid.json"
    grid = GridSpec(CPTSpec(preset="small", method="replay-all + ewc", out="runs/grid"), axes)
    grid.names, grid.member_spec(i)                                     # the lone run member i equals

A grid is the Cartesian product of its axes, in the order given (the last axis varies fastest). The axes are the
numbers a member may differ in while every member runs the same compiled step (``train/ensemble.make_grid_step``):

* ``seed`` (spelled ``seeds`` too): initialisation of LoRA adapters, the batch order (``EpochBatcher`` seed + 1);
* ``lr`` / ``min_lr`` / ``warmup``: the CPT schedule's peak and floor learning rates and warm-up steps
  (``CPTSpec.lr`` / ``min_lr`` / ``warmup``), traced numbers in each member's optimiser state;
* ``alpha``: the new-data fraction of a replay method: each member its own document mixture and batch stream;
* ``ewc_lambda`` (``lambda``): EWC's strength, a per-member scale of the shared Fisher penalty;
* ``freeze_layers`` (``freeze``), under ``--update freeze``: how many bottom blocks each member keeps fixed, a
  per-member 0 / 1 mask on the gradient and the update over the same parameters (every member differentiates every
  leaf; a lone freeze run differentiates only its trained ones: the same numbers, more work).

Everything else is static within one program and refused as an axis, naming it: the architecture, preset, steps
and batch shape, the method's structure, and the update mode (``update`` / ``lora_rank`` change which parameters
exist or are differentiated and the optimiser state's tree). Syntax: ``AXIS=V1,V2;AXIS=V1``
(quote it in a shell: ``;`` ends a shell command), or a ``.toml`` / ``.json`` file holding ``{AXIS: [values]}``.
Every member is validated as the lone :class:`~cfka_jax.runs.specs.CPTSpec` it stands for before anything is
built; duplicate members (``lr=1e-3,0.001``) are refused.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import pathlib

from cfka_jax.jsonio import parse_json, read_text, read_toml
from cfka_jax.runs.specs import CPTSpec

AXES = {"seed": int, "lr": float, "min_lr": float, "warmup": int, "alpha": float, "ewc_lambda": float,
        "freeze_layers": int}
"""The axes a grid may vary (a :class:`CPTSpec` field each) and their value types."""
ALIASES = {"seeds": "seed", "lambda": "ewc_lambda", "ewc-lambda": "ewc_lambda", "min-lr": "min_lr",
           "peak_lr": "lr", "freeze-layers": "freeze_layers", "freeze": "freeze_layers"}
STATIC = {
    **{k: "the update mode changes which parameters are differentiated and the optimiser state's tree (LoRA's "
          "rank its shapes), which one compiled program fixes; run one grid per value (freeze_layers may vary "
          "under --update freeze)" for k in ("update", "lora_rank")},
    **{k: "the method's structure (its documents, penalty, token loss, optimiser) is the program itself; run one "
          "grid per method" for k in ("method", "ewc_fisher", "ewc_batches", "rho_k", "token_weights",
                                      "energy_tau")},
    **{k: "the architecture, data and batch shape are fixed within one program; run one grid per value"
       for k in ("preset", "arch", "dtype", "bpe_vocab", "steps", "batch")},
}
"""Spec fields (and schedule numbers) a grid cannot vary, with the reason given when one is named as an axis."""
GRID_FILES = (".toml", ".json")

Axes = tuple[tuple[str, tuple], ...]


def _axis_name(raw: str, where: str) -> str:
    name = ALIASES.get(raw.strip().lower(), raw.strip().lower().replace("-", "_"))
    if name in STATIC:
        raise ValueError(f"{where}: axis {raw.strip()!r} cannot vary within one grid: {STATIC[name]}")
    if name not in AXES:
        raise ValueError(f"{where}: unknown axis {raw.strip()!r}; a grid varies {', '.join(AXES)}")
    return name


def _value(name: str, raw, where: str):
    kind = AXES[name]
    if isinstance(raw, str):
        text = raw.strip()
        try:
            raw = int(text) if kind is int else float(text)
        except ValueError:
            raise ValueError(f"{where}: axis {name!r}: {text!r} is not {'an integer' if kind is int else 'a number'}"
                             ) from None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (kind is int and not isinstance(raw, int)):
        raise ValueError(f"{where}: axis {name!r}: {raw!r} is not {'an integer' if kind is int else 'a number'}")
    if not math.isfinite(raw):
        raise ValueError(f"{where}: axis {name!r}: {raw!r} is not a finite number")
    return kind(raw)


def _axes(items: list[tuple[str, list]], where: str) -> Axes:
    out: dict[str, tuple] = {}
    for raw, values in items:
        name = _axis_name(raw, where)
        if name in out:
            raise ValueError(f"{where}: axis {name!r} is given twice")
        if not values:
            raise ValueError(f"{where}: axis {name!r} has no values")
        parsed = tuple(_value(name, v, where) for v in values)
        if len(set(parsed)) != len(parsed):
            raise ValueError(f"{where}: axis {name!r} repeats a value ({', '.join(map(repr, parsed))}): duplicate "
                             "members")
        out[name] = parsed
    if not out:
        raise ValueError(f"{where}: a grid needs at least one axis, e.g. 'lr=1e-3,3e-4;seeds=0,1'")
    return tuple(out.items())


def parse_grid(text: str, where: str = "--grid") -> Axes:
    """``AXIS=V1,V2;AXIS=V1`` → ``((axis, values), ...)`` (module docstring).

    Raises:
      ValueError: naming ``where`` and the axis: unknown or static axis, no ``=``, empty values, a value that is
        not a number of the axis's type, a repeated axis or value.
    """
    items = []
    for part in (p for p in text.split(";") if p.strip()):
        if "=" not in part:
            raise ValueError(f"{where}: {part.strip()!r} is not AXIS=V1,V2 (axes are separated by ';')")
        raw, _, values = part.partition("=")
        vals = [v for v in values.split(",")]
        if any(not v.strip() for v in vals):
            name = raw.strip() or "?"
            raise ValueError(f"{where}: axis {name!r} has an empty value ({values.strip()!r})")
        items.append((raw, vals))
    return _axes(items, where)


def read_grid_file(path: str | pathlib.Path) -> Axes:
    """The axes of a TOML or JSON grid file: one key per axis, each a non-empty list of numbers.

    Raises:
      ValueError: naming the file (and line, for a syntax error) and the key.
    """
    path = pathlib.Path(path)
    if path.suffix == ".toml":
        table = read_toml(path)
    else:
        table = parse_json(read_text(path), str(path))
    if not isinstance(table, dict):
        raise ValueError(f"{path}: a grid file holds one table {{AXIS: [values]}}, got {type(table).__name__}")
    items = []
    for key, values in table.items():
        if not isinstance(values, list):
            raise ValueError(f"{path}: key {key!r} must be a list of values, got {values!r}")
        items.append((key, values))
    return _axes(items, str(path))


def grid_axes(arg: str) -> Axes:
    """``--grid``'s value: a grid file (a name ending in .toml / .json, which must exist) or the inline syntax."""
    if arg.strip().endswith(GRID_FILES):
        if not pathlib.Path(arg).is_file():
            raise ValueError(f"--grid {arg}: no such grid file")
        return read_grid_file(arg)
    return parse_grid(arg)


def member_name(values: dict) -> str:
    """A member's folder name: ``lr0.001_alpha0.5_seed0`` (axes in grid order)."""
    return "_".join(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in values.items())


@dataclasses.dataclass(frozen=True)
class GridSpec:
    """The members of a grid: ``base`` fixes everything static (and the values of the axes not varied); ``out``
    of ``base`` is the grid's folder, member i writes ``<out>/<names[i]>``. ``mode``: the member step's form
    (``auto``: ``map`` on CPU, ``vmap`` on accelerators; ``train/ensemble.over_members``)."""

    base: CPTSpec
    axes: Axes
    mode: str = "auto"

    def __post_init__(self):
        _axes([(k, list(v)) for k, v in self.axes], "grid")  # the same checks as a parsed grid
        if self.mode not in ("auto", "vmap", "map"):
            raise ValueError(f"grid mode must be 'auto', 'vmap' or 'map', got {self.mode!r}")
        method, names = self.base.resolved, dict(self.axes)
        if "alpha" in names and not self.base.uses_alpha:
            raise ValueError(f"--grid: axis 'alpha': method {self.base.method!r} mixes no replay, so alpha changes "
                             "nothing (a replay method such as replay-all varies it)")
        if "freeze_layers" in names and self.base.update != "freeze":
            raise ValueError(f"--grid: axis 'freeze_layers' varies the frozen blocks of --update freeze; this grid "
                             f"trains with --update {self.base.update}")
        hooks = method.hooks
        if "ewc_lambda" in names and hooks.penalty is None:
            raise ValueError(f"--grid: axis 'ewc_lambda': method {self.base.method!r} has no EWC penalty to scale")
        # what one program can hold, read from the hooks and capabilities: real replay of the PT data (the
        # documents hook, a mixture per member), the EWC penalty (shared operands, λ per member), plain NLL, AdamW
        supported = (hooks.token_objective is None and hooks.optimizer is None and hooks.transform is None
                     and hooks.update is None
                     and all(n.startswith("real_replay:") or n == "old_batches" for n in method.needs))
        refused = {"--mesh": self.base.mesh is not None, "--token-weights": self.base.token_weights is not None,
                   "--energy-tau": self.base.energy_tau is not None, "--dtype": self.base.dtype != "float32",
                   f"--method {self.base.method!r}": not supported}
        bad = [k for k, v in refused.items() if v]
        if bad:
            raise ValueError(f"--grid runs naive, real-replay (replay-all / replay-half) and EWC CPT in float32 on "
                             f"its own member mesh; it does not take {', '.join(bad)}")
        for i in range(len(self)):
            self.member_spec(i)  # every member is a valid lone run (e.g. alpha in (0, 1), lr >= min_lr)
        if len(set(self.names)) != len(self.names):
            raise ValueError("--grid: two members have the same folder name (values that print alike)")

    def __len__(self) -> int:
        return math.prod(len(v) for _, v in self.axes)

    @property
    def values(self) -> list[dict]:
        """Each member's axis values, in grid order."""
        keys = [k for k, _ in self.axes]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in self.axes))]

    @property
    def names(self) -> list[str]:
        return [member_name(v) for v in self.values]

    @property
    def folder(self) -> pathlib.Path:
        return pathlib.Path(self.base.out)

    def member_spec(self, i: int) -> CPTSpec:
        """The lone run member ``i`` equals: ``base`` with the member's values, its folder under the grid's, and
        the grid's PT folder named explicitly (the base's default, beside the grid folder).

        Raises:
          ValueError: the member is not a valid run, naming the member and the field.
        """
        values = self.values[i]
        try:
            return dataclasses.replace(self.base, **values, out=str(self.folder / member_name(values)),
                                       pt_dir=str(self.base.pt_folder), progress=False)
        except ValueError as err:
            raise ValueError(f"--grid member {member_name(values)}: {err}") from None

    def as_dict(self) -> dict:
        return {"base": dataclasses.asdict(self.base), "axes": {k: list(v) for k, v in self.axes},
                "mode": self.mode}
