"""The hooks of a CPT run's :class:`runs.method.Method` for the recipes that train through ``runs/engine.train_lm``
(Biography, corpus CPT, KnowEdit): training documents, penalty operands, the token loss, the update mode.

* :func:`cpt_documents`: the new data alone (naive, EWC), mixed with real replay ('all' / 'half') or with a
  generative replay corpus (STOC / Random / LAMOL) at new-data fraction α, by the synthetic reference's rule
  (``data/mixing.py``, ``reference_copies``);
* :func:`ewc_operands` (any recipe) / :func:`ewc_setup` (Biography's old data): the Fisher (decision #9) over
  old-data batches and the penalty operands, passed to the jitted step as arguments;
  :func:`lora_effective_penalty` applies it to the effective weights W + (α/r)·A·B of a LoRA model (the Fisher
  lives on the base weights, which LoRA never moves);
* :func:`rho1_objective`: RHO-1's selective loss (``continual/rho1``) with θ0's per-token NLL added to every batch
  as ``ref_nll`` (θ0 = the parameters the run starts from, frozen);
* :func:`method_objective`: the step's ``(loss_fn, batch transform)`` of a method (mean NLL or RHO-1);
  :func:`token_objective`: Biography's spec-level token objectives (NLL, φ-weighted TWPPL of a Train-Attention
  model, ``continual/taalm``, or update-energy masking, ``geometry/energy.py``);
* :func:`update_mode` / :func:`apply_update`: full fine-tuning, freezing (embeddings + first N blocks, §4.4) or
  LoRA (§4.6 with alpha = 2r; adapter dropout 0 because the step keeps no RNG state across steps);
* :func:`optimizer_core`: the optimiser hook, AdamW (the recipe's schedule) or RecAdam (``continual/recadam``)
  rescaled to the run: its learning rate is the schedule's peak, held constant (RecAdam's own annealing
  λ(t) = sigmoid(k·(t − t0)) with t0 = half the run replaces warm-up and cosine), clipping kept.
"""

from __future__ import annotations

import pathlib
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx

from cfka_jax.continual import peft
from cfka_jax.continual.recadam import RecAdamConfig, recadam
from cfka_jax.continual.ewc import ewc_anchor, ewc_penalty, fisher_batch_mean, fisher_per_example
from cfka_jax.data.batching import packed_batch
from cfka_jax.data.mixing import mix_replay
from cfka_jax.data.pipeline import DataBundle
from cfka_jax.runs.method import Method
from cfka_jax.runs.presets import Preset
from cfka_jax.runs.replay import ensure_replay, replay_made_from, synthetic_replay_config
from cfka_jax.runs.specs import CPTSpec, check_update_options
from cfka_jax.train.optim import OptimConfig
from cfka_jax.train.step import make_eval_logits, token_nll_loss


def cpt_documents(spec: CPTSpec, bundle: DataBundle, model) -> tuple[list, dict]:
    """(training documents, replay statistics) of the run's method (§4.3); ``model`` is the PT model."""
    new, method = bundle.splits["cpt_train"].docs(), spec.resolved
    if method.generative:
        rcfg = synthetic_replay_config(method.replay, bundle.config.seq_len, spec.replay, spec.seed)
        made_from = replay_made_from(bundle, spec.pt_folder)  # recorded; a reused corpus must record the same
        corpus = ensure_replay(spec.replay_folder, model, bundle, rcfg, made_from=made_from)
        docs, _ = mix_replay(new, corpus.sequences, spec.alpha, rule="reference_copies")
        return docs, {f"replay/{k}": v for k, v in corpus.stats.items()}
    if method.real_replay is None:
        return new, {}
    real = bundle.splits[f"replay_{method.real_replay}"].docs()
    return mix_replay(new, real, spec.alpha, rule="reference_copies")[0], {}


def ewc_operands(method: Method, model, batches: list[dict], *, total_chunks: int):
    """``(ewc_penalty, EWCAnchor)``: the Fisher of ``model`` on the old-data ``batches`` (``options.ewc_fisher``:
    ``code`` divides by ``total_chunks``, ``per_example`` by the rows used), anchored at ``model``'s parameters
    with λ = ``options.ewc_lambda``."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    if method.options.ewc_fisher == "code":
        fisher = fisher_batch_mean(params, graphdef, rest, batches, total_chunks=total_chunks)
    else:
        fisher = fisher_per_example(params, graphdef, rest, batches)
    return ewc_penalty, ewc_anchor(fisher, jax.tree.map(np.asarray, params), method.options.ewc_lambda)


def ewc_setup(spec: CPTSpec, bundle: DataBundle, model):
    """Biography's EWC operands: the Fisher of the PT model on up to ``ewc_batches`` batches of 8 old chunks
    (``total_chunks`` = all PT chunks, the reference's scale), anchored at the PT parameters."""
    pt = bundle.train["pt_train"]
    rows = [slice(i, i + 8) for i in range(0, min(pt.num_chunks, 8 * spec.ewc_batches) - 7, 8)]
    return ewc_operands(spec.resolved, model, [packed_batch(pt, r) for r in rows], total_chunks=pt.num_chunks)


def rho1_objective(method: Method, model, compute_dtype=None):
    """``(loss_fn, add_ref)``: RHO-1's loss (``continual/rho1.make_rho1_loss`` with ``options.rho_k`` /
    ``rho_mode``) and the batch transform adding ``ref_nll``, the per-token NLL of ``model``'s current
    parameters θ0 (copied, frozen; the same forward as the step's, ``train.step.make_eval_logits``)."""
    from cfka_jax.continual.rho1 import make_rho1_loss, reference_nll

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    theta0 = jax.tree.map(jax.numpy.copy, params)
    logits = make_eval_logits(graphdef, rest, compute_dtype)
    ref = jax.jit(lambda p, batch: reference_nll(logits(p, batch), batch["tokens"]))
    return (make_rho1_loss(method.options.rho_k, method.options.rho_mode),
            lambda batch: {**batch, "ref_nll": ref(theta0, batch)})


def method_objective(method: Method, model, compute_dtype=None):
    """``(loss_fn, batch transform)`` of the method's token loss: mean NLL (identity transform) or RHO-1
    (:func:`rho1_objective` against ``model``'s parameters, taken before any update mode is applied)."""
    if method.token_loss == "rho1":
        return rho1_objective(method, model, compute_dtype)
    if method.token_loss != "nll":
        raise ValueError(f"method {method.name!r}: token loss {method.token_loss!r} needs the CKL recipe")
    return token_nll_loss, lambda batch: batch


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


def update_mode(spec: CPTSpec, p: Preset, model):
    """(model, trainable-mask factory or None) of the run's update mode (:func:`apply_update`; the preset gives
    ``freeze_layers`` / ``lora_rank`` when the spec leaves them unset)."""
    return apply_update(model, spec.update, seed=spec.seed,
                        freeze_layers=spec.freeze_layers if spec.freeze_layers is not None else p.freeze_layers,
                        lora_rank=spec.lora_rank if spec.lora_rank is not None else p.lora_rank)


def check_token_weights(spec: CPTSpec) -> None:
    """Before any data is built: ``spec.token_weights`` is a saved φ folder."""
    if spec.token_weights is None:
        return
    from cfka_jax.continual.taalm.weights import PHI_JSON

    if not (pathlib.Path(spec.token_weights) / PHI_JSON).is_file():
        raise ValueError(f"--token-weights {spec.token_weights}: no {PHI_JSON} there; not a Train-Attention (φ) "
                         f"folder (`cfka taalm` writes one under <out>/phi)")


def token_objective(spec: CPTSpec, vocab_size: int, tokenizer=None):
    """``(loss_fn, add_weights)``: the step's ``loss_fn(logits_BSV, batch)`` and a batch transform (identity
    unless φ's token weights are added as ``batch['token_weights']``).

    * plain: mean next-token NLL over the targets (``train.step.token_nll_loss``);
    * ``token_weights``: TWPPL, per sequence ``Σ w·m·nll / (Σ w·m + ε)`` averaged over sequences, with
      ``w = φ(tokens)`` of the frozen φ in ``spec.token_weights`` (``continual/taalm/twppl.py``); given the
      run's ``tokenizer``, φ must record that tokenizer's fingerprint (a φ over other tokens is refused);
    * ``energy_tau``: tokens whose update energy ``E = ‖e_y − softmax(z)‖²`` (same forward, detached) is ≥ τ are
      dropped from the loss, normalised by all supervised tokens or the kept ones (``geometry/energy.py``).
    """
    if spec.token_weights is not None:
        from cfka_jax.continual.taalm.twppl import twppl_loss
        from cfka_jax.continual.taalm.weights import phi_token_weights

        weights = phi_token_weights(spec.token_weights, vocab_size=vocab_size, tokenizer=tokenizer)
        return twppl_loss, lambda batch: {**batch, "token_weights": weights(batch)}
    if spec.energy_tau is not None:
        from cfka_jax.geometry.energy import EnergyMaskConfig, make_energy_loss

        cfg = EnergyMaskConfig(tau=spec.energy_tau, normalize=spec.energy_normalize or "all")
        return make_energy_loss(cfg), lambda batch: batch
    return token_nll_loss, lambda batch: batch


def objective_evaluators(spec: CPTSpec, bundle: DataBundle) -> dict:
    """Evaluators that come with the token objective: under energy masking, the masked fraction, mean energy and
    band counts of the first 16 chunks of the new (``cpt_train``) and old (``pt_train``) training data at every
    evaluation (``geometry.energy.energy_evaluator``)."""
    if spec.energy_tau is None:
        return {}
    from cfka_jax.geometry.energy import EnergyMaskConfig, energy_evaluator

    cfg = EnergyMaskConfig(tau=spec.energy_tau, normalize=spec.energy_normalize or "all")
    sets = {name: [packed_batch(bundle.train[name], slice(i, i + 8)) for i in (0, 8)
                   if i + 8 <= bundle.train[name].num_chunks] for name in ("cpt_train", "pt_train")}
    return {"energy": energy_evaluator({k: v for k, v in sets.items() if v}, cfg)}


class TrainHooks(NamedTuple):
    """What a method gives ``runs/engine.train_lm``: penalty and its operands, the token loss, the batch stream."""

    penalty: Any
    penalty_args: Any
    loss_fn: Any
    batch_at: Any


def train_hooks(method: Method, model, batch_at, *, compute_dtype=None) -> TrainHooks:
    """The hooks of ``method`` for a pretrained-model recipe (corpus CPT, KnowEdit), from the base ``model``
    before its update mode is applied (:func:`with_update`).

    * EWC: no pre-training data of an HF checkpoint is at hand, so the Fisher is the base model's on the first
      ``options.ewc_batches`` batches of the training stream (``batch_at(0 …)``; ``code``: Σ_b B_b (∇ℓ̄_b)² over
      all rows used), anchored at the base parameters: the penalty resists moving along the directions of the
      base model's steepest loss on the stream;
    * RHO-1: the reference θ0 is the base model (:func:`rho1_objective`), ``ref_nll`` added to every batch.
    """
    penalty = penalty_args = None
    if method.penalty == "ewc":
        batches = [batch_at(t) for t in range(method.options.ewc_batches)]
        rows = sum(int(b["tokens"].shape[0]) for b in batches)
        penalty, penalty_args = ewc_operands(method, model, batches, total_chunks=rows)
    loss_fn, add = method_objective(method, model, compute_dtype)
    return TrainHooks(penalty, penalty_args, loss_fn,
                      batch_at if method.token_loss == "nll" else (lambda t: add(batch_at(t))))


def with_update(hooks: TrainHooks, model, update: str) -> TrainHooks:
    """``hooks`` for ``model`` after its update mode: under LoRA the EWC penalty acts on the effective weights
    (:func:`lora_effective_penalty`)."""
    if hooks.penalty is None or update != "lora":
        return hooks
    return hooks._replace(penalty=lora_effective_penalty(model, hooks.penalty))


def optimizer_core(method: Method, opt: OptimConfig):
    """The transformation the method puts in place of AdamW (``runs/engine.train_lm``'s ``optimizer``), or None.

    RecAdam (spec taalm.md §7.4): ``RecAdamConfig.rescaled(opt.total_steps, opt.peak_lr)``: t0 at half the run,
    the reference's sharpness k·t0 and pull lr·γ, every trainable parameter annealed towards its start value;
    the schedule's warm-up and cosine do not apply (RecAdam's step is its own).
    """
    if method.optimizer == "adamw":
        return None
    if method.optimizer == "recadam":
        return recadam(RecAdamConfig.rescaled(opt.total_steps, opt.peak_lr))
    raise ValueError(f"method {method.name!r}: optimiser {method.optimizer!r} is not one train_lm runs")
