"""AdamW with linear warm-up then cosine decay to a floor (HF ``cosine_with_min_lr``), clipping and masks.

Spec cfka_stoc.md §4.1: AdamW β = (0.9, 0.999), ε = 1e-6, weight decay 0.1 except biases and norm weights,
global-norm clipping at 1.0, linear warm-up 0 → peak then half-cosine peak → min.

The re-warm / re-decay family of continual pre-training (Ibrahim et al. 2024, "Simple and Scalable Strategies to
Continually Pre-train Large Language Models"): every stage of a task stream warms up again to a chosen peak and
decays again, by a cosine (``decay="cosine"``) or held constant and then decayed over the last ``decay_steps``
(``decay="constant"``, the "infinite"/WSD shape); :func:`stage_optim` builds a stage's config, including the
no-re-warming control (later stages continue at the previous stage's final rate). ``post`` of
:func:`make_optimizer` chains a transformation after AdamW (GPM's projection of the update,
``continual/gpm.py``).

``state_dtype="bfloat16"`` stores the AdamW moments (μ, ν) in bfloat16 (:func:`state_in_dtype`): 4 bytes per
trained parameter instead of 8; each update computes in float32 from the stored moments and rounds the new moments
to bfloat16, so the update of a step is the float32 update of the rounded moments.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """Optimiser and schedule settings."""

    peak_lr: float = 1e-3
    min_lr: float = 5e-5
    warmup_steps: int = 100
    total_steps: int = 1000
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.1
    clip_norm: float = 1.0
    decay: str = "cosine"
    decay_steps: int | None = None
    state_dtype: str = "float32"

    def __post_init__(self):
        rates = {"peak_lr": self.peak_lr, "min_lr": self.min_lr, "b1": self.b1, "b2": self.b2, "eps": self.eps,
                 "weight_decay": self.weight_decay, "clip_norm": self.clip_norm}
        bad = {k: v for k, v in rates.items() if isinstance(v, bool) or not isinstance(v, (int, float))
               or not math.isfinite(v)}
        if bad:
            raise ValueError(f"optimiser settings must be finite numbers, got {bad}")
        if not 0 <= self.min_lr <= self.peak_lr:
            raise ValueError(f"need 0 <= min_lr <= peak_lr, got {self.min_lr}, {self.peak_lr}")
        if not 0 <= self.warmup_steps <= self.total_steps or self.total_steps < 1:
            raise ValueError(f"need 0 <= warmup_steps <= total_steps >= 1, got {self.warmup_steps}, {self.total_steps}")
        if self.clip_norm <= 0 or self.weight_decay < 0:
            raise ValueError("clip_norm must be > 0 and weight_decay >= 0")
        if self.state_dtype not in STATE_DTYPES:
            raise ValueError(f"state_dtype (--opt-state-dtype) must be one of {tuple(STATE_DTYPES)}, got "
                             f"{self.state_dtype!r}")
        if self.decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {self.decay!r}")
        if self.decay_steps is not None and (self.decay != "constant" or not isinstance(self.decay_steps, int)
                                             or not 0 <= self.decay_steps <= self.total_steps - self.warmup_steps):
            raise ValueError(f"decay_steps needs decay='constant' and 0 <= decay_steps <= total_steps - "
                             f"warmup_steps = {self.total_steps - self.warmup_steps}, got {self.decay_steps!r}")

    @property
    def decay_start(self) -> int:
        """The step the decay to ``min_lr`` starts (cosine: right after warm-up; constant: ``decay_steps`` before
        the end, by default the last 20 % of the post-warm-up steps)."""
        if self.decay == "cosine":
            return self.warmup_steps
        after = self.total_steps - self.warmup_steps
        return self.total_steps - (self.decay_steps if self.decay_steps is not None else after // 5)


DECAYS = ("cosine", "constant")
STATE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
"""Storage dtypes of the optimiser's floating state (``OptimConfig.state_dtype``)."""


def lr_schedule(cfg: OptimConfig) -> optax.Schedule:
    """lr(t) = peak·t/warmup for t < warmup, then min + (peak − min)·(1 + cos(π·u))/2 with
    u = clip((t − t_d) / (total − t_d), 0, 1), t_d = ``cfg.decay_start`` (= warmup for the plain cosine; later
    for constant-then-decay, which holds the peak from warm-up to t_d)."""
    start = cfg.decay_start

    def schedule(step):
        t = jnp.asarray(step, jnp.float32)
        warm = cfg.peak_lr * t / max(cfg.warmup_steps, 1)
        u = jnp.clip((t - start) / max(cfg.total_steps - start, 1), 0.0, 1.0)
        cosine = cfg.min_lr + (cfg.peak_lr - cfg.min_lr) * 0.5 * (1.0 + jnp.cos(jnp.pi * u))
        return jnp.where(t < cfg.warmup_steps, warm, cosine)

    return schedule


REWARM = ("rewarm", "none")


def stage_optim(base: OptimConfig, *, stage: int, rewarm: str = "rewarm", peak_lr: float | None = None,
                decay: str = "cosine", decay_steps: int | None = None) -> OptimConfig:
    """The optimiser config of stage ``stage`` (1-based) of a continual task stream.

    * ``rewarm="rewarm"``: every stage warms up 0 → ``peak_lr`` (default ``base.peak_lr``) over
      ``base.warmup_steps`` and decays to ``base.min_lr`` by ``decay`` (``cosine`` or ``constant``-then-cosine
      over the last ``decay_steps``); Ibrahim et al. 2024's re-warm + re-decay.
    * ``rewarm="none"``: stage 1 runs that schedule; later stages hold ``base.min_lr`` (the rate the previous
      stage ended at), i.e. training simply continues without re-warming.

    Raises:
      ValueError: an unknown mode, stage < 1, or a peak below ``base.min_lr``.
    """
    if rewarm not in REWARM:
        raise ValueError(f"rewarm must be one of {REWARM}, got {rewarm!r}")
    if not isinstance(stage, int) or stage < 1:
        raise ValueError(f"stage must be an integer >= 1, got {stage!r}")
    if rewarm == "none" and stage > 1:
        return dataclasses.replace(base, peak_lr=base.min_lr, warmup_steps=0, decay="cosine", decay_steps=None)
    peak = base.peak_lr if peak_lr is None else peak_lr
    if not (isinstance(peak, (int, float)) and math.isfinite(peak) and peak >= base.min_lr):
        raise ValueError(f"the re-warm peak must be a finite rate >= min_lr = {base.min_lr}, got {peak!r}")
    return dataclasses.replace(base, peak_lr=float(peak), decay=decay, decay_steps=decay_steps)


def trains(m) -> bool:
    """Whether a trainable mask's leaf trains at all: a bool, or a row mask (a 1-D bool array over the leading
    axis L of a stacked leaf, the blocks of a scanned model: True where that block trains)."""
    return bool(np.any(m))


def row_mask(m, x):
    """``x`` (a stacked leaf or its gradient / update, leading axis L) with the frozen rows of the row mask ``m``
    set to exact zeros; ``x`` itself for a plain bool mask."""
    if not is_row_mask(m):
        return x
    keep = jnp.asarray(m).reshape((-1,) + (1,) * (x.ndim - 1))
    return jnp.where(keep, x, jnp.zeros((), x.dtype))


def is_row_mask(m) -> bool:
    """True for a row mask (some rows of a stacked leaf frozen), False for a plain bool."""
    return np.ndim(m) > 0


def masked_tx(tx: optax.GradientTransformation, mask) -> optax.GradientTransformation:
    """``tx`` on the trainable leaves (``mask`` True), zero updates (and no optimizer state, no weight decay) on the
    rest.

    A leaf's mask may also be a row mask (:func:`trains`): the leaf is stacked over the blocks of a scanned model and
    only some blocks train. Its frozen rows' gradients are zeroed before ``tx`` (they add nothing to the clipping
    norm, their moments stay zero) and their updates after it (no weight decay either), so they stay bit-identical;
    the leaf's optimiser state keeps the frozen rows' (zero) entries.

    Use with a step over *all* parameters; ``optax.masked`` alone would pass frozen gradients through unchanged.
    """
    labels = jax.tree.map(lambda m: "trainable" if trains(m) else "frozen", mask)
    inner = optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()}, labels)
    if not any(is_row_mask(m) for m in jax.tree.leaves(mask)):
        return inner

    def rows(tree):  # the mask's leaves sit where the tree's leaves or their wrappers (nnx.Param nodes) are
        return jax.tree.map(lambda m, sub: jax.tree.map(lambda x: row_mask(m, x), sub), mask, tree)

    def update(updates, state, params=None):
        new, state = inner.update(rows(updates), state, params)
        return rows(new), state

    return optax.GradientTransformation(inner.init, update)


def state_in_dtype(tx: optax.GradientTransformation, dtype) -> optax.GradientTransformation:
    """``tx`` whose floating state is *stored* in ``dtype``: ``init`` casts it, ``update`` upcasts the stored
    state to float32, runs ``tx.update`` and casts the new state back (integer leaves such as the step count are
    untouched). With ``dtype`` float32 the casts are no-ops and the numbers are those of ``tx``.
    """

    def cast(tree, to):
        return jax.tree.map(lambda x: x.astype(to) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)

    def init(params):
        return cast(tx.init(params), dtype)

    def update(updates, state, params=None):
        new_updates, new_state = tx.update(updates, cast(state, jnp.float32), params)
        return new_updates, cast(new_state, dtype)

    return optax.GradientTransformation(init, update)


def decay_mask(params):
    """True for weights that get weight decay: matrices (ndim ≥ 2); biases and norm scales (ndim 1) do not."""
    return jax.tree.map(lambda p: getattr(p, "ndim", 0) >= 2, params)


def reference_clip_adamw(cfg: OptimConfig, post: optax.GradientTransformation | None = None):
    """optax's ``chain(clip_by_global_norm, adamw(schedule, mask=decay_mask)[, post])``: the definition
    :func:`fused_clip_adamw` computes (same state, same numbers)."""
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm),
                       optax.adamw(lr_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
                                   mask=decay_mask),
                       *((post,) if post is not None else ()))


def fused_clip_adamw(cfg: OptimConfig, post: optax.GradientTransformation | None = None
                     ) -> optax.GradientTransformation:
    """Global-norm clipping then AdamW (then ``post``), bit for bit :func:`reference_clip_adamw` (same ``init``,
    same state tree, so checkpoints of either restore into the other), written so that a compiled step holds no
    gradient-sized temporary beside the gradient. Per trained leaf, with ‖g‖ the global norm, c = ``clip_norm``
    and k the new count:

        ĝ = g if ‖g‖ < c else (g / ‖g‖)·c
        μ ← (1 − β₁) ĝ + β₁ μ,        ν ← (1 − β₂) ĝ² + β₂ ν
        u = −lr(k − 1) · ( (μ / (1 − β₁ᵏ)) / (sqrt(ν / (1 − β₂ᵏ)) + ε) + λ·p [matrices only] )

    optax computes ĝ once and feeds it to both moment updates, so the compiler materialises ĝ for every leaf (a
    second gradient, 4 B per parameter, measured at the 0.5B shape: 1.56 GiB of the step's temporaries); here
    each moment recomputes ĝ from g (the second from ``optimization_barrier(g)``, so the two are not merged
    again) inside its own elementwise update, which writes into the donated moment in place. Same operations on
    the same values: the results are identical (``tests/train/test_fused_adamw.py``)."""
    schedule = lr_schedule(cfg)
    reference = reference_clip_adamw(cfg, post)
    b1, b2, eps, max_norm = cfg.b1, cfg.b2, cfg.eps, cfg.clip_norm

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("fused_clip_adamw needs the parameters (weight decay)")
        clip_state, (adam, decay_state, sched), *post_states = state
        g_norm = optax.tree.norm(updates)
        trigger = jnp.squeeze(g_norm < max_norm)
        count = optax.safe_increment(adam.count)
        correction1 = (1 - b1**count).astype(jnp.float32)
        correction2 = (1 - b2**count).astype(jnp.float32)
        step_size = -1 * schedule(sched.count)
        leaves, treedef = jax.tree.flatten(updates)
        flat = [treedef.flatten_up_to(t) for t in (params, adam.mu, adam.nu, decay_mask(params))]

        def clipped(g):
            return jax.lax.select(trigger, g, (g / g_norm.astype(g.dtype)) * max_norm)

        new_u, new_mu, new_nu = [], [], []
        for g, p, mu, nu, decays in zip(leaves, *flat):
            mu = ((1 - b1) * clipped(g) + b1 * mu).astype(mu.dtype)
            nu = ((1 - b2) * (clipped(jax.lax.optimization_barrier(g)) ** 2) + b2 * nu).astype(nu.dtype)
            u = (mu / correction1.astype(mu.dtype)) / (jnp.sqrt(nu / correction2.astype(nu.dtype) + 0.0) + eps)
            if decays:
                u = u + cfg.weight_decay * p
            new_u.append(jnp.array(step_size, dtype=u.dtype) * u)
            new_mu.append(mu)
            new_nu.append(nu)
        sched_count = optax.safe_increment(sched.count)
        out = treedef.unflatten(new_u)
        adam = adam._replace(count=count, mu=treedef.unflatten(new_mu), nu=treedef.unflatten(new_nu))
        new_state = [clip_state, (adam, decay_state, sched._replace(count=sched_count))]
        if post is not None:
            out, post_state = post.update(out, post_states[0], params)
            new_state.append(post_state)
        return out, tuple(new_state)

    return optax.GradientTransformation(reference.init, update)


def make_optimizer(cfg: OptimConfig, trainable=None, post: optax.GradientTransformation | None = None,
                   core: optax.GradientTransformation | None = None) -> optax.GradientTransformation:
    """Clip → AdamW (→ ``post``) on trainable leaves; frozen leaves (``trainable`` False) get exactly zero updates.

    Args:
      cfg: optimiser settings.
      trainable: optional pytree of bools matching the parameters (None: everything trains). Clipping uses the
        global norm of the trainable gradients only.
      post: an optional transformation of the final AdamW update (weight decay included), e.g. GPM's
        projection (``continual/gpm.py``).
      core: a transformation used *in place of* AdamW and its schedule (RecAdam, ``continual/recadam.py``, which
        carries its own learning rate, annealing and decay); clipping, ``post`` and the mask stay. Its state is
        kept in float32 (``cfg.state_dtype`` must be float32: RecAdam's state holds the start parameters).

    Raises:
      ValueError: ``core`` with a ``state_dtype`` other than float32.
    """
    if core is not None and cfg.state_dtype != "float32":
        raise ValueError(f"--opt-state-dtype {cfg.state_dtype} stores AdamW's moments; this run's optimiser "
                         f"replaces AdamW (RecAdam keeps the start parameters in its state) and needs float32")
    if core is None:
        adamw = fused_clip_adamw(cfg, post)
    else:
        adamw = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), core, *((post,) if post is not None else ()))
    if cfg.state_dtype != "float32":
        adamw = state_in_dtype(adamw, STATE_DTYPES[cfg.state_dtype])
    if trainable is None:
        return adamw
    return masked_tx(adamw, trainable)
