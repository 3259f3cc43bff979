"""What the recipes that train through ``runs/engine.train_lm`` (Biography, corpus CPT, KnowEdit) do with a
method's hooks (``continual/method.py``) and the update modes and token objectives that are recipe options, not
methods. The hooks are called with the recipe's context (``runs/contexts.py``); nothing here compares names.

* :func:`cpt_hooks`: a Biography run's documents, penalty, token objective, projection and optimiser;
* :func:`train_hooks` (corpus CPT, KnowEdit): the same from the base model and the training stream
  (:class:`runs.contexts.HFContext`), :func:`with_update` after the update mode (under LoRA the penalty acts on
  the effective weights W + (α/r)·A·B, :func:`lora_effective_penalty`: the Fisher lives on the base weights);
* :func:`update_mode` / :func:`apply_update`: full fine-tuning, freezing (embeddings + first N blocks, §4.4) or
  LoRA (§4.6 with alpha = 2r; adapter dropout 0 because the step keeps no RNG state across steps);
* :func:`token_objective`: Biography's spec-level token objectives (NLL, φ-weighted TWPPL of a Train-Attention
  model, ``continual/taalm``, or update-energy masking, ``geometry/energy.py``);
* :func:`optimizer_core`: the optimiser hook (RecAdam, ``continual/recadam``, rescaled to the run: its learning
  rate is the schedule's peak, held constant; RecAdam's own annealing λ(t) = sigmoid(k·(t − t0)) with t0 = half
  the run replaces warm-up and cosine, clipping kept), or None for AdamW.
"""

from __future__ import annotations

import pathlib
from typing import Any, NamedTuple

from flax import nnx

from cfka_jax.continual import peft
from cfka_jax.data.batching import packed_batch
from cfka_jax.data.pipeline import DataBundle
from cfka_jax.runs.contexts import BiographyContext, HFContext, Schedule
from cfka_jax.runs.method import Method
from cfka_jax.runs.presets import Preset
from cfka_jax.runs.specs import TokenObjective, UpdateMode, check_update_options
from cfka_jax.train.optim import OptimConfig
from cfka_jax.train.step import token_nll_loss


class CPTHooks(NamedTuple):
    """What a Biography run's method gives ``train_lm``: documents and their statistics, penalty and operands,
    the token objective (None: the spec's), the update projection and the optimiser core (None: AdamW)."""

    docs: list
    stats: dict
    penalty: Any
    penalty_args: Any
    objective: Any
    post_update: Any


def cpt_hooks(method: Method, ctx: BiographyContext, init_params=None) -> CPTHooks:
    """The hooks of ``method`` called with ``ctx``, a :class:`BiographyContext` whose model holds the PT
    parameters: replay is sampled from, EWC anchored at, and the old keys taken with the PT model; the token
    objective's θ0 is the parameters CPT starts from (``init_params`` when given, written into ``ctx.model``)."""
    h = method.hooks
    docs, stats = h.documents(ctx) if h.documents else (ctx.new_docs, {})
    penalty, args = h.penalty(ctx) if h.penalty else (None, None)
    post = h.transform(ctx) if h.transform else None
    if init_params is not None:
        nnx.update(ctx.model, init_params)
    objective = h.token_objective(ctx) if h.token_objective else None
    return CPTHooks(docs, {**stats, **ctx.stats}, penalty, args, objective, post)


def lora_effective_penalty(lora_model, penalty):
    """``penalty`` applied to the effective weights of ``lora_model``'s parameters (``peft.merged_params``); the
    operands keep the base model's structure and are converted to pure dicts once."""
    scale = next(m.scale for _, m in nnx.iter_modules(lora_model) if isinstance(m, peft.LoRALinear))

    def effective(params, args):
        pure = lambda tree: nnx.to_pure_dict(tree) if isinstance(tree, nnx.State) else tree  # noqa: E731
        anchor = type(args)(pure(args.fisher), pure(args.anchor), args.lam)
        return penalty(peft.merged_params(pure(params), scale), anchor)

    return effective


def apply_update(model, update: str, *, freeze_layers: int, lora_rank: int, seed: int):
    """(model, trainable-mask factory or None) of an update mode, for any recipe (Biography, corpus, KnowEdit).

    * ``full``: every parameter trains (mask None);
    * ``freeze``: the input embedding and blocks ``0 … freeze_layers − 1`` are frozen (§4.4);
    * ``lora``: rank-``lora_rank`` adapters with alpha = 2r on the family's LoRA targets, base weights frozen
      (§4.6; adapter dropout 0 because the step keeps no RNG state across steps), adapters seeded by ``seed``.

    Raises:
      ValueError: an unknown mode or ``freeze_layers`` outside ``[0, number of blocks)``
        (``specs.check_update_options``; recipes call it before anything is written).
    """
    check_update_options(update, freeze_layers if update == "freeze" else None,
                         lora_rank if update == "lora" else None, blocks=model.cfg.num_hidden_layers)
    if update == "full":
        return model, None
    if update == "freeze":
        filt = peft.trainable_filter(model, num_frozen_blocks=freeze_layers, freeze_embeddings=True)
    else:
        model = peft.apply_lora(model, peft.LoRAConfig(rank=lora_rank, alpha=2.0 * lora_rank, dropout=0.0),
                                rngs=nnx.Rngs(seed))
        filt = peft.trainable_filter(model)
    return model, lambda params: peft.trainable_mask(params, filt)


def update_mode(mode: UpdateMode, p: Preset, model, seed: int):
    """(model, trainable-mask factory or None) of the run's update mode (:func:`apply_update`; the preset gives
    ``freeze_layers`` / ``lora_rank`` when the mode leaves them unset, ``UpdateMode.at``; LoRA adapters seeded by
    ``seed``)."""
    freeze_layers, lora_rank = mode.at(p)
    return apply_update(model, mode.update, seed=seed, freeze_layers=freeze_layers, lora_rank=lora_rank)


def check_token_weights(objective: TokenObjective) -> None:
    """Before any data is built: ``objective.token_weights`` is a saved φ folder."""
    if objective.token_weights is None:
        return
    from cfka_jax.continual.taalm.weights import PHI_JSON

    if not (pathlib.Path(objective.token_weights) / PHI_JSON).is_file():
        raise ValueError(f"--token-weights {objective.token_weights}: no {PHI_JSON} there; not a Train-Attention "
                         f"(φ) folder (`cfka taalm` writes one under <out>/phi)")


def token_objective(objective: TokenObjective, vocab_size: int, tokenizer=None):
    """``(loss_fn, add_weights)``: the step's ``loss_fn(logits_BSV, batch)`` and a batch transform (identity
    unless φ's token weights are added as ``batch['token_weights']``).

    * plain: mean next-token NLL over the targets (``train.step.token_nll_loss``);
    * ``token_weights``: TWPPL, per sequence ``Σ w·m·nll / (Σ w·m + ε)`` averaged over sequences, with
      ``w = φ(tokens)`` of the frozen φ in ``objective.token_weights`` (``continual/taalm/twppl.py``); given the
      run's ``tokenizer``, φ must record that tokenizer's fingerprint (a φ over other tokens is refused);
    * ``energy_tau``: tokens whose update energy ``E = ‖e_y − softmax(z)‖²`` (same forward, detached) is ≥ τ are
      dropped from the loss, normalised by all supervised tokens or the kept ones (``geometry/energy.py``).
    """
    if objective.token_weights is not None:
        from cfka_jax.continual.taalm.twppl import twppl_loss
        from cfka_jax.continual.taalm.weights import phi_token_weights

        weights = phi_token_weights(objective.token_weights, vocab_size=vocab_size, tokenizer=tokenizer)
        return twppl_loss, lambda batch: {**batch, "token_weights": weights(batch)}
    if objective.energy_tau is not None:
        from cfka_jax.geometry.energy import EnergyMaskConfig, make_energy_loss

        cfg = EnergyMaskConfig(tau=objective.energy_tau, normalize=objective.energy_normalize or "all")
        return make_energy_loss(cfg), lambda batch: batch
    return token_nll_loss, lambda batch: batch


def objective_evaluators(objective: TokenObjective, bundle: DataBundle) -> dict:
    """Evaluators that come with the token objective: under energy masking, the masked fraction, mean energy and
    band counts of the first 16 chunks of the new (``cpt_train``) and old (``pt_train``) training data at every
    evaluation (``geometry.energy.energy_evaluator``)."""
    if objective.energy_tau is None:
        return {}
    from cfka_jax.geometry.energy import EnergyMaskConfig, energy_evaluator

    cfg = EnergyMaskConfig(tau=objective.energy_tau, normalize=objective.energy_normalize or "all")
    sets = {name: [packed_batch(bundle.train[name], slice(i, i + 8)) for i in (0, 8)
                   if i + 8 <= bundle.train[name].num_chunks] for name in ("cpt_train", "pt_train")}
    return {"energy": energy_evaluator({k: v for k, v in sets.items() if v}, cfg)}


class TrainHooks(NamedTuple):
    """What a method gives ``runs/engine.train_lm``: penalty and its operands, the token loss, the batch stream,
    the update projection."""

    penalty: Any
    penalty_args: Any
    loss_fn: Any
    batch_at: Any
    post_update: Any = None


def train_hooks(method: Method, model, batch_at, *, compute_dtype=None, replay=None, key_batches=None,
                stats: dict | None = None) -> TrainHooks:
    """The hooks of ``method`` for a pretrained-model recipe (corpus CPT, KnowEdit), called with an
    :class:`HFContext` of the base ``model`` before its update mode is applied (:func:`with_update`): EWC's Fisher
    on the first ``options.ewc_batches`` batches of the stream, θ0 = the base model (RHO-1's ``ref_nll``, LwF's
    teacher added to every batch), the old keys from ``key_batches()``; what hooks record lands in ``stats``."""
    ctx = HFContext(model, batch_at, compute_dtype, replay=replay, key_batches=key_batches)
    h = method.hooks
    penalty, args = h.penalty(ctx) if h.penalty else (None, None)
    loss_fn = token_nll_loss
    if h.token_objective:
        loss_fn, add = h.token_objective(ctx)
        batch_at = (lambda at: lambda t: add(at(t)))(batch_at)
    post = h.transform(ctx) if h.transform else None
    if stats is not None:
        stats.update(ctx.stats)
    return TrainHooks(penalty, args, loss_fn, batch_at, post)


def replay_documents(method: Method, model, replay) -> tuple[list, dict] | None:
    """A pretrained-model recipe's documents hook: ``(replay documents, statistics)`` of the method's generative
    replay, ``replay(kind)`` (the recipe samples the corpus from the base ``model`` and mixes it by its own rule),
    or None when the method mixes nothing."""
    h = method.hooks.documents
    return None if h is None else h(HFContext(model, None, replay=replay))


def with_update(hooks: TrainHooks, model, update: str) -> TrainHooks:
    """``hooks`` for ``model`` after its update mode: under LoRA the EWC penalty acts on the effective weights
    (:func:`lora_effective_penalty`)."""
    if hooks.penalty is None or update != "lora":
        return hooks
    return hooks._replace(penalty=lora_effective_penalty(model, hooks.penalty))


def optimizer_core(method: Method, opt: OptimConfig, *, reference_groups: bool = False):
    """The transformation the method's optimiser hook puts in place of AdamW (``runs/engine.train_lm``'s
    ``optimizer``), or None (AdamW). RecAdam (spec taalm.md §7.4): ``RecAdamConfig.rescaled(opt.total_steps,
    opt.peak_lr)``: t0 at half the run, the reference's sharpness k·t0 and pull lr·γ, every trainable parameter
    annealed towards its start value; the schedule's warm-up and cosine do not apply (RecAdam's step is its own).
    """
    h = method.hooks.optimizer
    return None if h is None else h(Schedule(opt.total_steps, opt.peak_lr, reference_groups))
