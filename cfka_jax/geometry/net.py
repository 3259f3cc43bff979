"""The model view the geometry functions share: a split model (``Net``) and the roles of its parameters.

Every geometry function is pure in ``params`` (the ``nnx.Param`` state of ``nnx.split(model, nnx.Param, ...)``,
or the same tree as a plain nested dict): ``f(params, batch, *, net)``. ``net`` carries what does not change
during a computation: the graph definition, the non-parameter state and the model config.

Model facts the package relies on (spec §2 "Model facts", read by :func:`model_facts` from the config through the
model-family registry, ``models/family.py``; any registered family works):

* Pythia (GPT-NeoX): untied ``embed_out`` without bias; LayerNorm (γ, β), eps from the config (1e-5 for Pythia);
  parallel residual ``x + attn(ln1(x)) + mlp(ln2(x))``.
* Qwen2/2.5/3 (small sizes): tied head (``logits = h @ embed_tokensᵀ``); RMSNorm (γ), eps 1e-6; sequential
  residual. Qwen3's ``q_norm``/``k_norm`` are internal, not streams.
* Llama: as Qwen (RMSNorm, sequential residual), head tied only in the Llama-3.2 1B/3B shapes.
* OLMo: LayerNorms without γ or β (eps 1e-5), sequential pre-norm residual; head tied only in OLMo-1B.
* OLMo-2: RMSNorm (γ) *after* each sublayer, inside the residual branch (``Traits.norm_position == "post"``), so
  the attention and MLP inputs are raw residuals (``geometry/streams.py``); whole-projection q/k norms (internal).

Parameter roles (:func:`param_roles`), used by the gradient scopes of ``onestep``:

* ``readout``: the tensor that holds W (an untied head kernel);
* ``embedding``: the input embedding of an untied model;
* ``tied``: the shared embedding/readout tensor of a tied model;
* ``kernel``: a block parameter of rank ≥ 2 (a projection weight);
* ``other``: norms and biases.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from flax import nnx

from cfka_jax.models import family

ROLES = ("readout", "embedding", "tied", "kernel", "other")


def names(cfg) -> dict[str, str]:
    """Attribute names of the embedding, head and final norm of ``cfg``'s family, and the family's name.

    Raises:
        ValueError: ``cfg`` is not the config of a registered family.
    """
    fam = family.of(cfg)
    return {"embed": fam.embed, "head": fam.head, "final_norm": fam.final_norm, "family": fam.name}


@dataclasses.dataclass(frozen=True, eq=False)
class Net:
    """A split model: ``graphdef``, the non-parameter state ``rest`` and the config ``cfg``.

    Build with :meth:`split`; ``net.model(params)`` merges a model for one call (inside jitted functions too).
    """

    graphdef: Any
    rest: Any
    cfg: Any

    @classmethod
    def split(cls, model: nnx.Module) -> tuple[Net, Any]:
        """``(net, params)`` of ``model`` (``nnx.split(model, nnx.Param, ...)``)."""
        names(model.cfg)
        if model.cfg.scan_layers:
            raise ValueError("geometry needs the looped layer form (scan_layers=False): streams are per block")
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        return cls(graphdef, rest, model.cfg), params

    def model(self, params) -> nnx.Module:
        return nnx.merge(self.graphdef, params, self.rest)

    @property
    def num_layers(self) -> int:
        return self.cfg.num_hidden_layers


def model_facts(cfg) -> dict[str, Any]:
    """The spec's model facts read from a port config (§2): head tying, norm kind and eps, residual form."""
    t = family.of(cfg).traits(cfg)
    return {"family": t.family, "tied": t.tied, "norm": t.norm, "eps": t.norm_eps,
            "parallel_residual": t.parallel_residual, "head_bias": False}


def leaf_path(keys) -> tuple:
    """A jax key path as plain names, e.g. ``('layers', 0, 'mlp', 'up_proj', 'kernel')`` (no ``.value``)."""
    out = []
    for k in keys:
        if isinstance(k, jax.tree_util.DictKey):
            out.append(k.key)
        elif isinstance(k, jax.tree_util.SequenceKey):
            out.append(k.idx)
        elif isinstance(k, jax.tree_util.GetAttrKey) and k.name != "value":
            out.append(k.name)
    return tuple(out)


def role_of(path: tuple, ndim: int, cfg) -> str:
    """The role (:data:`ROLES`) of the parameter at ``path`` with ``ndim`` dimensions."""
    n = names(cfg)
    if path[0] == n["embed"]:
        return "tied" if cfg.tie_word_embeddings else "embedding"
    if path[0] == n["head"]:
        return "readout"
    if path[0] == "layers" and ndim >= 2:
        return "kernel"
    return "other"


def param_roles(params, cfg) -> dict[tuple, str]:
    """``{path: role}`` for every parameter leaf of ``params``."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {leaf_path(k): role_of(leaf_path(k), x.ndim, cfg) for k, x in flat}
