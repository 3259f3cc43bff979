"""A continual-learning method as an object: components that carry their hooks, composed by one rule.

A *component* (EWC, STOC replay, RHO-1, RecAdam, K-Adapter, GPM, LwF, null-space updates, …) is a
:class:`Component`: the hooks it fills, each a callable of the recipe's *context* (the one object a recipe hands
every hook: model, θ0, data, schedule, run folder, as attributes and methods), and the context capabilities its
hooks read (``needs``). A *method* is a :class:`Method`: components composed by one rule (each hook filled by at
most one component; ``stoc + ewc``, ``TAALM + K-Adapter + Mix-review + RecAdam``). Recipes call the hooks that are
filled and fall back to their own default where one is not; none compares method or hook names.

The hooks (each called with the context; the recipe's default where no component fills it):

* ``documents(ctx)``: what the recipe's context makes of the component's replay: the training documents and their
  statistics (Biography, streams: new data mixed with replay), the replay corpus the recipe mixes by its own rule
  (corpus CPT, KnowEdit), or the review stream (CKL). Default: the new data alone.
* ``penalty(ctx) → (penalty_fn, operands)``: ``penalty_fn(params, operands)`` added to the loss, the operands
  passed to the jitted step as arguments (EWC's Fisher and anchor). Default: none.
* ``token_objective(ctx) → (loss_fn, batch_transform)``: ``loss_fn(logits_BSV, batch)`` and what each batch needs
  added (RHO-1's reference NLL, LwF's teacher, TWPPL weights). Default: the recipe's plain NLL.
* ``update(ctx) → θ``: which weights train (K-Adapter). Default: the recipe's update mode.
* ``optimizer(ctx) → optax core`` in place of AdamW (RecAdam). Default: the recipe's AdamW.
* ``transform(ctx) → optax transformation`` after the optimiser (GPM / null-space projection off the old keys'
  span; its per-stage state, the bases, comes from ``ctx.protected_bases``). Default: none.

A :class:`Recipe` declares the hooks it calls and the context capabilities it provides; which components it can
run is derived from that (:meth:`Recipe.refusal`), never kept in a table. The names (registry keys, aliases,
``+`` parsing) live in one module, ``runs/method.py``, the only place names are compared.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

HOOKS = ("documents", "penalty", "token_objective", "update", "optimizer", "transform")
RHO_MODES = ("faithful", "taalm_code")
EWC_FISHERS = ("code", "per_example")


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """The numbers a method's hooks read that come from a recipe's flags (defaults: the Biography spec's EWC, the
    CKL reference's RHO-1).

    ``ewc_lambda`` λ ≥ 0, ``ewc_fisher`` code | per_example (``continual/ewc``), ``ewc_batches`` old-data batches
    of the Fisher; ``rho_k`` ∈ (0, 1] the kept fraction of target tokens and ``rho_mode`` faithful | taalm_code
    (``continual/rho1``); ``kadapter_dropout`` overrides K-Adapter's dropout; ``gpm_threshold`` GPM's energy
    fraction ε (``continual/gpm``). A component's own options (LwF's T
    and λ, the null-space tolerance) are given in its name, ``lwf(T=2, weight=0.5)``, and checked by its file.
    """

    ewc_lambda: float = 1e3
    ewc_fisher: str = "code"
    ewc_batches: int = 8
    rho_k: float = 0.6
    rho_mode: str = "faithful"
    kadapter_dropout: float | None = None
    gpm_threshold: float = 0.97

    def __post_init__(self):
        if isinstance(self.ewc_lambda, bool) or not (isinstance(self.ewc_lambda, (int, float))
                                                     and math.isfinite(self.ewc_lambda) and self.ewc_lambda >= 0):
            raise ValueError(f"ewc_lambda must be a finite number >= 0 (a negative λ rewards drift), "
                             f"got {self.ewc_lambda!r}")
        if self.ewc_fisher not in EWC_FISHERS:
            raise ValueError(f"ewc_fisher must be one of {EWC_FISHERS}, got {self.ewc_fisher!r}")
        if isinstance(self.ewc_batches, bool) or not isinstance(self.ewc_batches, int) or self.ewc_batches < 1:
            raise ValueError(f"ewc_batches must be an integer >= 1, got {self.ewc_batches!r}")
        if isinstance(self.rho_k, bool) or not (isinstance(self.rho_k, (int, float)) and math.isfinite(self.rho_k)
                                                and 0 < self.rho_k <= 1):
            raise ValueError(f"rho_k (the kept fraction of target tokens) must be in (0, 1], got {self.rho_k!r}")
        if self.rho_mode not in RHO_MODES:
            raise ValueError(f"rho_mode must be one of {RHO_MODES}, got {self.rho_mode!r}")
        if isinstance(self.gpm_threshold, bool) or not (isinstance(self.gpm_threshold, (int, float))
                                                        and 0.0 < self.gpm_threshold < 1.0):
            raise ValueError(f"gpm_threshold must be in (0, 1), got {self.gpm_threshold!r}")


@dataclasses.dataclass(frozen=True)
class Hooks:
    """One callable (or None) per hook of the module table."""

    documents: Callable | None = None
    penalty: Callable | None = None
    token_objective: Callable | None = None
    update: Callable | None = None
    optimizer: Callable | None = None
    transform: Callable | None = None

    def filled(self) -> tuple[str, ...]:
        return tuple(h for h in HOOKS if getattr(self, h) is not None)


@dataclasses.dataclass(frozen=True)
class Component:
    """One algorithm's hooks. ``needs``: the context capabilities its hooks read (a recipe must provide them);
    ``tag``: what a run records for the hook it fills (the replay kind names replay corpora and run folders);
    ``mixes``: its documents are new data mixed with replay at new-data fraction α; ``state``: the folder name of
    its per-stage state (GPM / null-space bases)."""

    name: str
    hooks: Hooks = Hooks()
    needs: frozenset = frozenset()
    tag: str | None = None
    mixes: bool = False
    state: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "needs", frozenset(self.needs))

    @property
    def label(self) -> str:
        return self.tag or self.name


@dataclasses.dataclass(frozen=True)
class Method:
    """Components composed by :func:`compose`: the composed :class:`Hooks`, the options, and the component that
    fills each hook (for records: ``replay``, ``penalty``, ``token_loss``, ``update``, ``optimizer`` name them)."""

    name: str
    components: tuple[Component, ...]
    hooks: Hooks
    options: MethodOptions = MethodOptions()

    def filler(self, hook: str) -> Component | None:
        """The component that fills ``hook``, or None."""
        return next((c for c in self.components if getattr(c.hooks, hook) is not None), None)

    def _label(self, hook: str, default=None):
        c = self.filler(hook)
        return default if c is None else c.label

    @property
    def needs(self) -> frozenset:
        return frozenset().union(*(c.needs for c in self.components))

    @property
    def mixes(self) -> bool:
        """The training documents are new data mixed with replay at new-data fraction α."""
        return any(c.mixes for c in self.components)

    @property
    def state(self) -> str | None:
        """The folder name of the per-stage state of the ``transform`` hook (bases), or None."""
        c = self.filler("transform")
        return None if c is None else c.state

    replay = property(lambda self: self._label("documents"), doc="The documents component's tag, or None.")
    penalty = property(lambda self: self._label("penalty"), doc="The penalty component's name, or None.")
    token_loss = property(lambda self: self._label("token_objective", "nll"), doc="The token objective's name.")
    update = property(lambda self: self._label("update"), doc="The update component's name, or None.")
    optimizer = property(lambda self: self._label("optimizer", "adamw"), doc="The optimiser's name.")


def compose(name: str, components, options: MethodOptions | None = None) -> Method:
    """The :class:`Method` of ``components`` (the one composition rule: each hook filled at most once).

    Raises:
      ValueError: two components fill the same hook (the message names both and the hook).
    """
    components = tuple(components)
    fields, by = {}, {}
    for c in components:
        for hook in c.hooks.filled():
            if hook in by:
                raise ValueError(f"{name!r}: {by[hook]!r} and {c.name!r} both set the {hook} hook")
            fields[hook], by[hook] = getattr(c.hooks, hook), c.name
    return Method(name, components, Hooks(**fields), options or MethodOptions())


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a recipe calls: the hooks it honours and the context capabilities it provides. A component runs in
    the recipe when it fills only hooks the recipe calls and needs only capabilities the recipe provides."""

    name: str
    hooks: frozenset
    provides: frozenset = frozenset()

    def __post_init__(self):
        object.__setattr__(self, "hooks", frozenset(self.hooks))
        object.__setattr__(self, "provides", frozenset(self.provides))
        unknown = sorted(self.hooks - set(HOOKS))
        if unknown:
            raise ValueError(f"recipe {self.name!r}: unknown hooks {unknown}; hooks: {HOOKS}")

    def refusal(self, component: Component) -> str | None:
        """Why ``component`` cannot run here (the first hook it fills that the recipe does not call, or the
        capabilities it needs that the recipe's context does not provide), or None."""
        missing = [h for h in component.hooks.filled() if h not in self.hooks]
        if missing:
            return f"it fills the {missing[0]} hook, which the {self.name} recipe does not call"
        lacking = sorted(component.needs - self.provides)
        if lacking:
            return f"it needs {', '.join(lacking)}, which the {self.name} recipe's context does not provide"
        return None

    def check(self, method: Method) -> Method:
        """``method`` if every component runs here.

        Raises:
          ValueError: naming the component, the recipe and why.
        """
        for c in method.components:
            why = self.refusal(c)
            if why is not None:
                raise ValueError(f"method {method.name!r}: {c.name!r} is not available in the {self.name} recipe "
                                 f"({why})")
        return method
