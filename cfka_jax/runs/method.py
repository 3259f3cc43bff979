"""One continual-learning ``Method``, resolved once from its name by one registry, used by every recipe.

A method is one choice per hook of a CPT run; the algorithms stay in ``continual/`` (and ``data/mixing``), this
module only names and composes them:

=================  ==============  ==============================================  ==============================
hook               field           values                                          algorithm
=================  ==============  ==============================================  ==============================
documents/mixing   ``replay``      None, replay-all, replay-half (real old data),  ``data/mixing``,
                                   replay-stream (streams: PT + earlier stages'    ``continual/replay``,
                                   data at token share 1 − α), stoc, random,       ``continual/ckl``
                                   lamol, … (generative), mix-review (CKL:
                                   review documents per batch)
penalty            ``penalty``     None, ewc: (λ/2) Σ F (θ − θ*)²                  ``continual/ewc``
per-token loss     ``token_loss``  nll, rho1 (excess loss against θ0), taalm       ``train/losses``,
                                   (φ-weighted TWPPL), oracle, uniform             ``continual/rho1``, ``taalm``
trainable mask     ``update``      None (the recipe's ``--update full|freeze|      ``continual/peft``,
                                   lora``), kadapter                               ``continual/kadapter``
optimiser          ``optimizer``   adamw, recadam, gpm (AdamW updates projected    ``train/optim``,
                                   off earlier tasks' bases)                       ``continual/recadam``,
                                                                                   ``continual/gpm``
=================  ==============  ==============================================  ==============================

Names compose with ``+`` (``stoc + ewc``, ``TAALM + K-Adapter + Mix-review + RecAdam``); two components that
fill the same hook are refused. The CKL table's names (``Finetune``, ``RHO-1``, ``K-Adapter (dropout 0.1)``,
``RHO-1 (taalm_code)``, …) are aliases of the same components. :func:`resolve` checks the method against the
recipe's :data:`RECIPES` row (which hooks that recipe can honour), so a method a recipe cannot run fails before
anything is built, naming the component and the recipe. The energy-masking objective and φ weights of a Biography
run are spec fields (``runs/methods.token_objective``), not method names: they combine with any method here.
"""

from __future__ import annotations

import dataclasses
import math
import re

from cfka_jax.runs.replay import GENERATIVE

HOOKS = ("replay", "penalty", "token_loss", "update", "optimizer")
COMPONENTS: dict[str, dict[str, str]] = {
    "naive": {},
    "ewc": {"penalty": "ewc"},
    "replay-all": {"replay": "replay-all"},
    "replay-half": {"replay": "replay-half"},
    "replay": {"replay": "replay-stream"},
    **{kind: {"replay": kind} for kind in GENERATIVE},
    "mix-review": {"replay": "mix-review"},
    "rho1": {"token_loss": "rho1"},
    "taalm": {"token_loss": "taalm"},
    "oracle": {"token_loss": "oracle"},
    "uniform": {"token_loss": "uniform"},
    "recadam": {"optimizer": "recadam"},
    "kadapter": {"update": "kadapter"},
    "gpm": {"optimizer": "gpm"},
}
"""The one registry: component name → the hooks it fills (every other hook keeps its default)."""
ALIASES = {"finetune": "naive", "rho-1": "rho1", "k-adapter": "kadapter"}
"""The CKL table's spellings (matched case-insensitively, as are the component names)."""
DEFAULTS = {"replay": None, "penalty": None, "token_loss": "nll", "update": None, "optimizer": "adamw"}

_PT_REPLAY = (None, "replay-all", "replay-half", *GENERATIVE)
_HF_REPLAY = (None, "stoc", "lamol", "random")
RECIPES: dict[str, dict[str, tuple]] = {
    "biography": {"replay": _PT_REPLAY, "penalty": (None, "ewc"), "token_loss": ("nll", "rho1"),
                  "update": (None,), "optimizer": ("adamw", "recadam")},
    "corpus": {"replay": _HF_REPLAY, "penalty": (None, "ewc"), "token_loss": ("nll", "rho1"), "update": (None,),
               "optimizer": ("adamw", "recadam")},
    "knowedit": {"replay": _HF_REPLAY, "penalty": (None, "ewc"), "token_loss": ("nll", "rho1"),
                 "update": (None,), "optimizer": ("adamw", "recadam")},
    "ckl": {"replay": (None, "mix-review"), "penalty": (None,),
            "token_loss": ("nll", "rho1", "taalm", "oracle", "uniform"), "update": (None, "kadapter"),
            "optimizer": ("adamw", "recadam")},
    "stream": {"replay": (None, "replay-stream", *GENERATIVE), "penalty": (None, "ewc"), "token_loss": ("nll",),
               "update": (None,), "optimizer": ("adamw", "gpm")},
}
"""Per recipe, the values of each hook it runs (Biography / corpus / KnowEdit train through ``runs/engine.train_lm``
with AdamW or RecAdam, ``runs/methods.optimizer_core``; K-Adapter stays with the CKL protocols: its forward has no
KV-cached decoding and no packed-document segments, which the Biography EM and the packed CPT steps need; the CKL protocols through ``continual/ckl.Trainer``, which takes an optimiser and K-Adapter's θ but
no penalty operands; the task streams of ``runs/stream`` one component per stage)."""

_KADAPTER_DROPOUT = re.compile(r"k-adapter \(dropout ([0-9]*\.?[0-9]+)\)")
_RHO_MODE = re.compile(r"rho-1 \((faithful|taalm_code)\)")
RHO_MODES = ("faithful", "taalm_code")
EWC_FISHERS = ("code", "per_example")


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """The numbers a method's hooks read (defaults: the Biography spec's EWC, the CKL reference's RHO-1).

    ``ewc_lambda`` λ ≥ 0, ``ewc_fisher`` code | per_example (``continual/ewc``), ``ewc_batches`` old-data batches
    of the Fisher; ``rho_k`` ∈ (0, 1] the kept fraction of target tokens and ``rho_mode`` faithful | taalm_code
    (``continual/rho1``); ``kadapter_dropout`` overrides K-Adapter's dropout.
    """

    ewc_lambda: float = 1e3
    ewc_fisher: str = "code"
    ewc_batches: int = 8
    rho_k: float = 0.6
    rho_mode: str = "faithful"
    kadapter_dropout: float | None = None

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


@dataclasses.dataclass(frozen=True)
class Method:
    """A resolved method: its name, one value per hook (module table) and the options its hooks read."""

    name: str
    replay: str | None = None
    penalty: str | None = None
    token_loss: str = "nll"
    update: str | None = None
    optimizer: str = "adamw"
    options: MethodOptions = MethodOptions()

    @property
    def generative(self) -> bool:
        """Replay sampled from the model (STOC, Random, LAMOL and the prompt controls)."""
        return self.replay in GENERATIVE

    @property
    def real_replay(self) -> str | None:
        """``all`` / ``half`` for replay of real old data, else None."""
        return self.replay.split("-")[1] if self.replay in ("replay-all", "replay-half") else None

    @property
    def mixes(self) -> bool:
        """The training documents are new data mixed with replay at new-data fraction α."""
        return self.replay is not None and self.replay != "mix-review"

def _component(part: str, options: dict) -> str:
    """The registry key of one ``+``-separated part; a parenthesised option moves into ``options``."""
    low = part.strip().lower()
    m = _KADAPTER_DROPOUT.fullmatch(low)
    if m:
        low, options["kadapter_dropout"] = "k-adapter", float(m.group(1))
    m = _RHO_MODE.fullmatch(low)
    if m:
        low, options["rho_mode"] = "rho-1", m.group(1)
    return ALIASES.get(low, low)


def resolve(name: str, recipe: str, options: MethodOptions | None = None) -> Method:
    """The :class:`Method` of ``name`` for ``recipe`` (a key of :data:`RECIPES`), resolved once.

    Raises:
      ValueError: an unknown recipe or component, two components filling the same hook, or a hook value the
        recipe cannot run (the message names the component and the recipe's choices).
    """
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; one of {sorted(RECIPES)}")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"method name must be a non-empty string, got {name!r}")
    opts = dataclasses.asdict(options or MethodOptions())
    fields, filled_by = dict(DEFAULTS), {}
    for part in name.split("+"):
        key = _component(part, opts)
        if key not in COMPONENTS:
            raise ValueError(f"unknown method component {part.strip()!r} in {name!r}; components: "
                             f"{sorted(COMPONENTS)} (CKL spellings {sorted(ALIASES)} too)")
        for hook, value in COMPONENTS[key].items():
            if hook in filled_by:
                raise ValueError(f"{name!r}: {filled_by[hook]!r} and {part.strip()!r} both set the {hook} hook")
            fields[hook], filled_by[hook] = value, part.strip()
    row = RECIPES[recipe]
    for hook in HOOKS:
        if fields[hook] not in row[hook]:
            raise ValueError(f"method {name!r}: {filled_by.get(hook, hook)!r} ({hook} = {fields[hook]}) is not "
                             f"available in the {recipe} recipe; its components: {list(recipe_components(recipe))}")
    return Method(name.strip(), **fields, options=MethodOptions(**opts))


def resolve_each(names, recipe: str, *, flag: str, options: MethodOptions | None = None) -> tuple[Method, ...]:
    """:func:`resolve` of every name of a recipe's method list; an error names ``flag``.

    Raises:
      ValueError: ``flag: <the registry's message>``, or no name at all.
    """
    names = (names,) if isinstance(names, str) else tuple(names)
    if not names:
        raise ValueError(f"{flag}: no method given")
    try:
        return tuple(resolve(n, recipe, options) for n in names)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def method_options(**given) -> MethodOptions:
    """:class:`MethodOptions` from a recipe's optional fields (None = the default)."""
    return MethodOptions(**{k: v for k, v in given.items() if v is not None})


def recipe_components(recipe: str) -> tuple[str, ...]:
    """The registry components ``recipe`` runs (for ``--method`` help and choices)."""
    row = RECIPES[recipe]
    return tuple(k for k, v in COMPONENTS.items() if all(x in row[h] for h, x in v.items()))
