"""The linear datamodeling score (LDS) of attribution scores against retrained subsets (Park et al. 2023, TRAK §2.2).

Letters of this file (besides ``S`` positions, ``V`` vocabulary): ``Q`` test items, ``Z`` training items (the
pool), ``U`` retrained subsets (the members of one ensemble).

**Definition.** Draw U random subsets ``S_u`` of the Z training items, each keeping ``k = round(α·Z)`` items
(:func:`subset_masks`, α the kept fraction; a subset is a 0/1 mask ``m_u ∈ {0,1}^Z``). Retrain the model from the
same start on each subset and measure each test item's loss ``L_u(q)``. An attribution method with scores
``τ(q, i)`` predicts for subset u the group effect

    g_u(q) = Σ_{i∈S_u} τ(q, i) = (τ mᵤᵀ)(q)                                       (:func:`predicted`)

and its score on test item q is the Spearman rank correlation over the U subsets

    LDS(q) = ρ_s( (g_u(q))_u , (−L_u(q))_u ),                                       (:func:`lds`)

averaged over the test items (the study reports that mean per seed, and its spread over seeds).

**Sign convention.** Every score here is a *similarity*: ``τ(q, i) > 0`` says training on i helps test item q
(raises its log-likelihood, lowers its loss) — CH1 / CH1 + CH2, the exact gradient product
``⟨∇log p_q, ∇log p_i⟩``, DataInf's ``+score``, LESS's cosine and HyperINF's ``+∇ℓ_qᵀA⁻¹∇ℓ_i``. A larger
predicted g therefore means a *lower* loss, and the LDS correlates g with the **negated** loss ``−L``: a perfect
method has LDS = 1, a method that gets the direction wrong has LDS < 0, random scores LDS ≈ 0.

**Retraining in one program** (:func:`make_subset_trainer`). Every subset starts from the same parameters and takes
the same full-batch AdamW steps (``synthetic.optim_config``: warm-up, cosine decay, no weight decay) on the
*masked* loss: member u's ``target_mask`` is the pool's target mask with the rows outside ``S_u`` zeroed, so its
loss is the mean NLL over its own items' targets — the loss of a run on the subset alone (all items have the same
number of targets or not, the mean is over targets either way). The members are the engine's ensemble step
(``train.step.make_train_step(..., placement=Placement(ensemble="vmap"))``) in its loop (``train.loop.run_loop``):
member u equals a lone run on ``S_u`` to float32 rounding (``tests/geometry/test_lds.py``). Full batches make the
retraining deterministic given the subset, so the only randomness the LDS sees is which items each subset keeps.

**Per-test forms of the selection baselines.** LESS and HyperINF (``selection.py``) score the pool against one
target mean gradient; their general forms ``selection.less_per_test`` and ``selection.hyperinf_per_test`` (used
here, and importable from this module) give every test item its own target (``[Q, Z]``; one target is
``selection``'s score).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry.selection import hyperinf_per_test, less_per_test  # the LDS's per-test-item forms
from cfka_jax.geometry.synthetic import optim_config
from cfka_jax.shapes import Array, Float, Int
from cfka_jax.train.ensemble import init_ensemble, stack_members
from cfka_jax.train.loop import LoopConfig, run_loop
from cfka_jax.train.losses import next_token_nll
from cfka_jax.train.optim import make_optimizer
from cfka_jax.train.step import Placement, make_train_step, model_logits


def check_design(num_items: int, num_subsets: int, fraction: float) -> int:
    """The kept count ``k = round(α·Z)`` of a valid design.

    Raises:
      ValueError: ``fraction`` outside (0, 1), fewer than 3 subsets (a rank correlation of 2 points is ±1), or a
        subset that would keep no item or every item.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    if num_subsets < 3:
        raise ValueError(f"the LDS needs at least 3 subsets (a rank correlation over 2 is ±1), got {num_subsets}")
    k = round(fraction * num_items)
    if not 0 < k < num_items:
        raise ValueError(f"fraction {fraction} of {num_items} items keeps {k}: a subset must keep some items and "
                         "leave some out")
    return k


def subset_masks(seed: int, num_items: int, num_subsets: int, fraction: float) -> np.ndarray:
    """``[U, Z]`` float32 0/1 masks, each keeping exactly ``round(α·Z)`` items drawn without replacement
    (``numpy.random.default_rng(seed)``, one permutation per subset)."""
    k = check_design(num_items, num_subsets, fraction)
    rng = np.random.default_rng(seed)
    masks = np.zeros((num_subsets, num_items), np.float32)
    for u in range(num_subsets):
        masks[u, rng.permutation(num_items)[:k]] = 1.0
    return masks


def predicted(scores_QZ: Float[Array, "Q Z"], masks_UZ: Float[Array, "U Z"]) -> Float[Array, "Q U"]:
    """``g_u(q) = Σ_{i∈S_u} τ(q, i)``: each method's additive prediction for every (test item, subset)."""
    with jax.default_matmul_precision("highest"):
        return jnp.asarray(scores_QZ, jnp.float32) @ jnp.asarray(masks_UZ, jnp.float32).T


def ranks(x_QU: Float[Array, "Q U"]) -> Float[Array, "Q U"]:
    """Ranks along the last axis (1 … U), ties given their average rank (as ``scipy.stats.rankdata``)."""
    below = jnp.sum(x_QU[..., None, :] < x_QU[..., :, None], axis=-1)
    equal = jnp.sum(x_QU[..., None, :] == x_QU[..., :, None], axis=-1)
    return below.astype(jnp.float32) + (equal.astype(jnp.float32) + 1.0) / 2.0


def spearman_rows(a_QU: Float[Array, "Q U"], b_QU: Float[Array, "Q U"]) -> Float[Array, " Q"]:
    """Spearman's ρ of every row pair (Pearson of the tie-averaged ranks); 0 for a row that is constant on a side
    (its ranks carry no order)."""
    ra, rb = ranks(a_QU), ranks(b_QU)
    ra, rb = ra - ra.mean(-1, keepdims=True), rb - rb.mean(-1, keepdims=True)
    den = jnp.sqrt(jnp.sum(ra * ra, -1) * jnp.sum(rb * rb, -1))
    return jnp.where(den > 0, jnp.sum(ra * rb, -1) / jnp.where(den > 0, den, 1.0), 0.0)


@jax.jit
def lds(scores_QZ: Float[Array, "Q Z"], masks_UZ: Float[Array, "U Z"], loss_UQ: Float[Array, "U Q"]
        ) -> Float[Array, " Q"]:
    """``LDS(q) = ρ_s(g(q), −L(q))`` over the subsets, per test item (module docstring: similarity scores, so
    the loss is negated)."""
    return spearman_rows(predicted(scores_QZ, masks_UZ), -jnp.asarray(loss_UQ, jnp.float32).T)


# ------------------------------------------------------------------------------------------- retraining in one program

def item_losses(graphdef, params, rest, tokens_QS: Int[Array, "Q S"], target_mask_QS: Float[Array, "Q S"]
                ) -> Float[Array, " Q"]:
    """Each item's mean next-token NLL over its targets (``target_mask`` keyed by target position, column 0
    ignored, as the train step's loss)."""
    nll = next_token_nll(model_logits(graphdef, params, rest, {"tokens": tokens_QS}), tokens_QS)
    w = target_mask_QS[:, 1:].astype(nll.dtype)
    return jnp.sum(w * nll, -1) / jnp.maximum(jnp.sum(w, -1), 1.0)


def member_losses(graphdef, params_U, rest, tokens_QS, target_mask_QS) -> Float[Array, "U Q"]:
    """:func:`item_losses` of every member (``params_U``: a leading member axis), one jitted ``vmap``."""
    fn = jax.jit(jax.vmap(functools.partial(item_losses, graphdef), in_axes=(0, None, None, None)))
    return fn(params_U, rest, jnp.asarray(tokens_QS), jnp.asarray(target_mask_QS))


def make_subset_trainer(graphdef, rest, *, steps: int, lr: float, mode: str = "vmap"):
    """``train(params, tokens_ZS, target_mask_ZS, masks_UZ) -> (params_U, final_loss_U, nonfinite_U)``.

    ``steps`` full-batch AdamW steps (``synthetic.optim_config(steps, lr)``) of every member from the same
    ``params`` (copied), member u on the masked loss of ``S_u`` (module docstring), all members in the one
    compiled ensemble step (``mode``: ``vmap``, or ``map`` for the members in turn inside the same program).
    ``nonfinite_U`` counts each member's steps the finite guard rolled back (a diverged member keeps its last
    good state; the others go on).
    """
    tx = make_optimizer(optim_config(steps, lr))
    step = make_train_step(graphdef, rest, tx, placement=Placement(ensemble=mode))

    def train(params, tokens_ZS, target_mask_ZS, masks_UZ):
        masks = np.asarray(masks_UZ, np.float32)
        num = masks.shape[0]
        state = init_ensemble(stack_members([jax.tree.map(jnp.copy, params)] * num), tx)
        batch = {"tokens": jnp.broadcast_to(jnp.asarray(tokens_ZS), (num,) + np.shape(tokens_ZS)),
                 "target_mask": jnp.asarray(masks[:, :, None] * np.asarray(target_mask_ZS, np.float32)[None])}
        last, nonfinite = [None], np.zeros(num, np.int64)

        def on_metrics(done: int, metrics: dict):
            nonfinite[:] += ~np.asarray(metrics["finite"])
            last[0] = np.asarray(metrics["loss"], np.float64)

        state = run_loop(state, step, lambda t: batch, cfg=LoopConfig(steps=steps, log_every=max(steps, 1),
                                                                        progress=False),
                         stop_on_nonfinite=False, on_metrics=on_metrics).state
        return state.params, last[0], nonfinite

    train.tx = tx
    return train


__all__ = [
    "check_design",
    "hyperinf_per_test",
    "item_losses",
    "lds",
    "less_per_test",
    "make_subset_trainer",
    "member_losses",
    "predicted",
    "ranks",
    "spearman_rows",
    "subset_masks",
]
