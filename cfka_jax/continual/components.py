"""The components of the algorithms that predate :mod:`continual.method` (EWC, replay, Mix-review, RHO-1, the TWPPL
objectives, RecAdam, K-Adapter, GPM): each a factory ``(options, **given) → Component`` whose hooks call the
algorithm's file with what the recipe's context gives (``continual/method.py`` lists the hooks).

Context capabilities read here (a recipe that provides one implements the method named in brackets):

* ``real_replay:<subset>`` [``ctx.real_replay(subset) → (docs, stats)``]: new data mixed with real old data
  (``all`` / ``half`` of the Biography PT population; ``stream``: PT + earlier stages of a task stream);
* ``generative_replay:<kind>`` [``ctx.generative_replay(kind) → (docs, stats)``]: new data mixed with a corpus
  sampled from the start model (``continual/replay``);
* ``review`` [``ctx.review()``]: CKL's review stream, concatenated to each batch (Mix-review);
* ``old_batches`` [``ctx.model``, ``ctx.old_batches(n) → (batches, total_chunks)``]: old-data batches of the
  model the run starts from (EWC's Fisher);
* ``reference`` [``ctx.reference(fn) → batch ↦ fn(logits of θ0, batch)``, jitted, θ0 frozen];
* ``unpacked_rows``: each batch row is one document (TWPPL's per-sequence mean is meaningful);
  ``object_mask`` / ``phi_weights``: the batches carry the object tokens' mask / φ's token weights;
* ``kadapter`` [``ctx.base``, ``ctx.kadapter``]: θ is built from a base model and a K-Adapter config;
* ``old_keys`` [``ctx.protected_bases(state, update) → Bases``]: the per-stage bases of the old data's key
  activations (``continual/gpm.py``; ``update(bases or None, grams) → bases``).

Every recipe's context also gives ``ctx.total_steps`` and ``ctx.peak_lr`` (the optimiser hook) and
``ctx.recadam_reference_groups``.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from flax import nnx

from cfka_jax.continual import gpm
from cfka_jax.continual.ewc import ewc_anchor, ewc_penalty, fisher_batch_mean, fisher_per_example
from cfka_jax.continual.method import Component, Hooks, MethodOptions


def no_options(name: str, given: dict) -> None:
    """Refuses options in the name of a component that takes none."""
    if given:
        raise ValueError(f"{name!r} takes no options in its name, got {sorted(given)}")


def naive(options: MethodOptions, **given) -> Component:
    """No hook: the recipe's plain fine-tuning on the new data."""
    no_options("naive", given)
    return Component("naive")


def real_replay(subset: str, name: str, tag: str | None = None):
    """Factory of replay of real old data (``subset`` of the recipe's old data), recorded as ``tag``."""
    def factory(options: MethodOptions, **given) -> Component:
        no_options(name, given)
        return Component(name, Hooks(documents=lambda ctx: ctx.real_replay(subset)),
                         needs={f"real_replay:{subset}"}, tag=tag, mixes=True)
    return factory


def generative_replay(kind: str):
    """Factory of generative replay of ``kind`` (``continual/replay.KINDS``)."""
    def factory(options: MethodOptions, **given) -> Component:
        no_options(kind, given)
        return Component(kind, Hooks(documents=lambda ctx: ctx.generative_replay(kind)),
                         needs={f"generative_replay:{kind}"}, mixes=True)
    return factory


def mix_review(options: MethodOptions, **given) -> Component:
    """Mix-review (TAALM §7.3): each batch concatenated with as many review documents (ratio 1)."""
    no_options("mix-review", given)
    return Component("mix-review", Hooks(documents=lambda ctx: ctx.review()), needs={"review"})


def ewc_operands(model, batches: list[dict], *, total_chunks: int, options: MethodOptions):
    """``(ewc_penalty, EWCAnchor)``: the Fisher of ``model`` on the old-data ``batches`` (``options.ewc_fisher``:
    ``code`` divides by ``total_chunks``, ``per_example`` by the rows used), anchored at ``model``'s parameters
    with λ = ``options.ewc_lambda``."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    if options.ewc_fisher == "code":
        fisher = fisher_batch_mean(params, graphdef, rest, batches, total_chunks=total_chunks)
    else:
        fisher = fisher_per_example(params, graphdef, rest, batches)
    return ewc_penalty, ewc_anchor(fisher, jax.tree.map(np.asarray, params), options.ewc_lambda)


def ewc(options: MethodOptions, **given) -> Component:
    """EWC (``continual/ewc``): (λ/2) Σ F (θ − θ*)², F the diagonal Fisher of the start model on old data."""
    no_options("ewc", given)

    def penalty(ctx):
        batches, total = ctx.old_batches(options.ewc_batches)
        return ewc_operands(ctx.model, batches, total_chunks=total, options=options)

    return Component("ewc", Hooks(penalty=penalty), needs={"old_batches"})


def rho1(options: MethodOptions, **given) -> Component:
    """RHO-1 (``continual/rho1``): the excess loss against the frozen θ0, top ``rho_k`` of the target tokens."""
    no_options("rho1", given)
    from cfka_jax.continual.rho1 import make_rho1_loss, reference_nll

    def objective(ctx):
        ref = ctx.reference(lambda logits, batch: reference_nll(logits, batch["tokens"]))
        return make_rho1_loss(options.rho_k, options.rho_mode), lambda batch: {**batch, "ref_nll": ref(batch)}

    return Component("rho1", Hooks(token_objective=objective), needs={"reference"})


def _twppl(name: str, weights, needs: set):
    def factory(options: MethodOptions, **given) -> Component:
        no_options(name, given)
        from cfka_jax.continual.taalm.twppl import twppl_loss

        return Component(name, Hooks(token_objective=lambda ctx: (twppl_loss, lambda b: dict(
            b, token_weights=weights(b)))), needs={"unpacked_rows", *needs})
    return factory


taalm = _twppl("taalm", lambda b: b["phi_weights"] * b["target_mask"], {"phi_weights"})
"""TAALM (§5.4): TWPPL with φ's frozen weights, ``w = φ(x)·m``."""
oracle = _twppl("oracle", lambda b: b["object_mask"], {"object_mask"})
"""Oracle (§6): TWPPL with weight 1 on the evidence's object tokens."""
uniform = _twppl("uniform", lambda b: b["target_mask"], set())
"""Uniform: TWPPL with w = 1 on the targets (the per-sequence mean NLL)."""


def recadam(options: MethodOptions, **given) -> Component:
    """RecAdam (§7.4, ``continual/recadam``) rescaled to the run (``RecAdamConfig.rescaled``)."""
    no_options("recadam", given)
    from cfka_jax.continual.recadam import RecAdamConfig, recadam as recadam_tx

    def optimizer(ctx):
        groups = {"reference_groups": True} if ctx.recadam_reference_groups else {}
        return recadam_tx(RecAdamConfig.rescaled(ctx.total_steps, ctx.peak_lr, **groups))

    return Component("recadam", Hooks(optimizer=optimizer))


def kadapter(options: MethodOptions, **given) -> Component:
    """K-Adapter (§7.5, ``continual/kadapter``) on the frozen base (``options.kadapter_dropout`` overrides the
    config's dropout)."""
    no_options("kadapter", given)
    from cfka_jax.continual.ckl_methods import kadapter_theta

    def update(ctx):
        cfg = ctx.kadapter
        if options.kadapter_dropout is not None:
            cfg = dataclasses.replace(cfg, dropout=options.kadapter_dropout)
        return kadapter_theta(ctx.base, cfg)

    return Component("kadapter", Hooks(update=update), needs={"kadapter"})


def gpm_component(options: MethodOptions, threshold: float | None = None, **given) -> Component:
    """GPM (``continual/gpm``): updates projected off the bases of the old tasks' key activations, each task's
    directions kept up to the energy fraction ``threshold`` (``gpm(threshold=0.99)``; default: the recipe's
    ``--gpm-threshold``, 0.97)."""
    no_options("gpm", given)
    eps = float(options.gpm_threshold if threshold is None else threshold)
    gpm.GPMConfig(threshold=eps)

    def transform(ctx):
        return gpm.gpm_projection(ctx.protected_bases("gpm", lambda bases, grams: gpm.update_bases(
            bases, grams, eps)))

    return Component("gpm", Hooks(transform=transform), needs={"old_keys"}, state="gpm")
