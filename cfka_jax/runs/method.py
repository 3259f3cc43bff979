"""The one method registry: names, aliases and ``+`` parsing. A name resolves once to a composed
:class:`continual.method.Method` (components carrying their hooks as callables, ``continual/method.py``), checked
against the recipe that will run it. This module is the only place where method names are compared.

* a component is one registry line: name → factory ``(MethodOptions, **options in the name) → Component``
  (``continual/components.py`` for EWC, replay, Mix-review, RHO-1, the TWPPL objectives, RecAdam, K-Adapter, GPM;
  ``continual/lwf.py``; ``continual/nullspace.py``);
* names compose with ``+`` (``stoc + ewc``, ``stoc + lwf``, ``TAALM + K-Adapter + Mix-review + RecAdam``); two
  components filling the same hook are refused (``continual/method.compose``);
* a component's own options go in its name: ``lwf(T=2 weight=0.5)``, ``nullspace(tol=1e-3)``, ``gpm(threshold=0.99)``
  (separated by spaces, commas or semicolons; in a comma list of names, such as a stream's ``--method``, use
  spaces); the CKL table's ``K-Adapter (dropout 0.1)`` and ``RHO-1 (taalm_code)`` set ``MethodOptions`` fields;
* the CKL table's spellings (``Finetune``, ``RHO-1``, ``K-Adapter``) are aliases, matched case-insensitively as
  the component names are;
* which components a recipe runs is derived from the hooks it calls and the context it provides (each recipe
  module's ``RECIPES``: ``runs/contexts.py`` for Biography, corpus CPT and KnowEdit, ``runs/stream.py``,
  ``continual/ckl_methods.py``), never listed by hand.
"""

from __future__ import annotations

import dataclasses
import importlib
import re

from cfka_jax.continual import components as C
from cfka_jax.continual import lwf, nullspace
from cfka_jax.continual.method import EWC_FISHERS, RHO_MODES, Method, MethodOptions, Recipe, compose
from cfka_jax.runs.replay import GENERATIVE

__all__ = ["COMPONENTS", "ALIASES", "EWC_FISHERS", "RHO_MODES", "Method", "MethodOptions", "Recipe", "resolve",
           "resolve_each", "method_options", "recipe", "recipe_components"]

COMPONENTS = {
    "naive": C.naive,
    "ewc": C.ewc,
    "replay-all": C.real_replay("all", "replay-all"),
    "replay-half": C.real_replay("half", "replay-half"),
    "replay": C.real_replay("stream", "replay", tag="replay-stream"),
    **{kind: C.generative_replay(kind) for kind in GENERATIVE},
    "mix-review": C.mix_review,
    "rho1": C.rho1,
    "taalm": C.taalm,
    "oracle": C.oracle,
    "uniform": C.uniform,
    "recadam": C.recadam,
    "kadapter": C.kadapter,
    "gpm": C.gpm_component,
    "lwf": lwf.component,
    "nullspace": nullspace.component,
}
"""The one registry: component name → its factory (every hook a component leaves unfilled keeps the recipe's
default)."""
ALIASES = {"finetune": "naive", "rho-1": "rho1", "k-adapter": "kadapter"}
"""The CKL table's spellings (matched case-insensitively, as are the component names)."""
BUILTIN_RECIPES = ("cfka_jax.runs.contexts", "cfka_jax.runs.stream", "cfka_jax.continual.ckl_methods")
"""The modules whose ``RECIPES`` declare the recipes (the hooks each calls, the context it provides)."""

_KADAPTER_DROPOUT = re.compile(r"k-adapter \(dropout ([0-9]*\.?[0-9]+)\)")
_RHO_MODE = re.compile(r"rho-1 \((faithful|taalm_code)\)")
_WITH_OPTIONS = re.compile(r"([a-z0-9_\-]+)\s*\((.*)\)")
_OPTION = re.compile(r"\s*([A-Za-z_]\w*)\s*=\s*([^\s,;=()]+)\s*[,;]?")


def recipe(name: str | Recipe) -> Recipe:
    """The declared :class:`Recipe` of ``name`` (or ``name`` itself).

    Raises:
      ValueError: an unknown recipe name.
    """
    if isinstance(name, Recipe):
        return name
    known = []
    for mod in BUILTIN_RECIPES:  # in order, stopping at the first match (a module may still be importing)
        for r in importlib.import_module(mod).RECIPES:
            if r.name == name:
                return r
            known.append(r.name)
    raise ValueError(f"unknown recipe {name!r}; one of {sorted(known)}")


def _value(text: str):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _options_in(part: str, body: str) -> dict:
    given, pos = {}, 0
    while pos < len(body):
        m = _OPTION.match(body, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"{part!r}: options must read key=value (e.g. lwf(T=2 weight=0.5)), got {body!r}")
        given[m.group(1)], pos = _value(m.group(2)), m.end()
    return given


def _part(part: str, options: dict) -> tuple[str, dict]:
    """(the registry key, options given in the name) of one ``+``-separated part; the CKL table's parenthesised
    options move into ``options`` (``MethodOptions`` fields)."""
    low = part.strip().lower()
    m = _KADAPTER_DROPOUT.fullmatch(low)
    if m:
        low, options["kadapter_dropout"] = "k-adapter", float(m.group(1))
    m = _RHO_MODE.fullmatch(low)
    if m:
        low, options["rho_mode"] = "rho-1", m.group(1)
    given = {}
    m = _WITH_OPTIONS.fullmatch(part.strip())
    if m and m.group(1).lower() in (*COMPONENTS, *ALIASES):
        low, given = m.group(1).lower(), _options_in(part.strip(), m.group(2))
    return ALIASES.get(low, low), given


def resolve(name: str, recipe_name: str | Recipe, options: MethodOptions | None = None) -> Method:
    """The :class:`Method` of ``name`` for the recipe (a name of a declared recipe, or a :class:`Recipe`).

    Raises:
      ValueError: an unknown recipe or component, a bad option, two components filling the same hook, or a
        component the recipe cannot run (the message names the component, the recipe and what it lacks).
    """
    rec = recipe(recipe_name)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"method name must be a non-empty string, got {name!r}")
    opts = dataclasses.asdict(options or MethodOptions())
    parts = []
    for part in name.split("+"):
        key, given = _part(part, opts)
        if key not in COMPONENTS:
            raise ValueError(f"unknown method component {part.strip()!r} in {name!r}; components: "
                             f"{sorted(COMPONENTS)} (CKL spellings {sorted(ALIASES)} too)")
        parts.append((key, given))
    final = MethodOptions(**opts)
    comps = []
    for key, given in parts:
        try:
            comps.append(COMPONENTS[key](final, **given))
        except TypeError as err:  # an option the factory does not take
            raise ValueError(f"{name!r}: {err}") from None
    method = compose(name.strip(), comps, final)
    try:
        return rec.check(method)
    except ValueError as err:
        raise ValueError(f"{err}; its components: {list(recipe_components(rec))}") from None


def resolve_each(names, recipe_name: str | Recipe, *, flag: str,
                 options: MethodOptions | None = None) -> tuple[Method, ...]:
    """:func:`resolve` of every name of a recipe's method list; an error names ``flag``.

    Raises:
      ValueError: ``flag: <the registry's message>``, or no name at all.
    """
    names = (names,) if isinstance(names, str) else tuple(names)
    if not names:
        raise ValueError(f"{flag}: no method given")
    try:
        return tuple(resolve(n, recipe_name, options) for n in names)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def method_options(**given) -> MethodOptions:
    """:class:`MethodOptions` from a recipe's optional fields (None = the default)."""
    return MethodOptions(**{k: v for k, v in given.items() if v is not None})


def recipe_components(recipe_name: str | Recipe) -> tuple[str, ...]:
    """The registry components ``recipe`` runs, derived from its hooks and context (for ``--method`` help)."""
    rec = recipe(recipe_name)
    return tuple(k for k, make in COMPONENTS.items() if rec.refusal(make(MethodOptions())) is None)
