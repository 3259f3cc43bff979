"""Data-selection baselines and top-fraction selection (spec §4.5, §9): LESS and HyperINF.

Both work on per-example gradients of the **token-mean loss** of each sequence, flattened per parameter matrix
(``{path: [N, size]}``; ``baselines.sequence_grads`` returns gradients of ``Σ_t log p_t`` and the kept counts,
:func:`loss_grads` turns them into loss gradients ``−∇Σ_t log p_t / count``).

**LESS** (Xia et al., ICML 2024). At each warm-up checkpoint θ_i with Adam moments (m, v) (after the optimiser's
last update), the training feature of example z is the Adam update direction its gradient g would produce,

    Γ(z, θ_i) = m′ / (√v′ + ε),   m′ = β₁m + (1 − β₁)g,   v′ = β₂v + (1 − β₂)g²,

randomly projected, ``Γ·Π`` with ``Π [P, k]`` Gaussian entries of variance 1/k (:func:`less_features`); the
validation feature is the plain (SGD) gradient of the target set's mean loss, projected by the same Π. The score
is ``Σ_i η̄_i cos(Γ(z, θ_i)Π, ∇ℓ(D_val, θ_i)Π)`` with η̄_i the mean learning rate of warm-up epoch i
(:func:`less_scores`; one subtask, so the release's max over subtasks is the identity). The release's LoRA
gradients are replaced here by the gradients of a parameter scope of a small port (no LoRA adapters).

**HyperINF** (Zhou, Fan, Jaggi 2024). Per weight matrix l with per-example gradient *matrices* ``G_{l,i}``
``[a, b]``, the generalised Fisher ``F_l = mean_i G_{l,i}ᵀ G_{l,i}`` (``[b, b]``; the ``a × a`` form
``G G ᵀ`` when a < b, preconditioning from the left), ``A_l = F_l + λ_l I`` with ``λ_l = damping · tr(F_l)/b``,
``A_l⁻¹`` by the Schulz (hyperpower) iteration ``X_{k+1} = X_k(2I − A X_k)`` from ``X₀ = Aᵀ/(‖A‖₁‖A‖_∞)``
(:func:`schulz_inverse`; converges quadratically for any nonsingular A from this start), and

    score(k) = Σ_l ⟨V_l A_l⁻¹, G_{l,k}⟩_F

with V_l the target set's mean loss gradient — the similarity ``+∇ℓ_testᵀ A⁻¹ ∇ℓ_k`` (the influence is its
negative, as DataInf's sign convention, pitfall 17).

:func:`top_fraction` keeps the indices of the highest scores (ties broken by index).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.shapes import Array, Float


def loss_grads(grads: dict, counts: Float[Array, " N"]) -> dict:
    """Token-mean loss gradients ``−∇Σ_t log p_t / count`` from ``baselines.sequence_grads``'s output."""
    c = jnp.maximum(counts, 1.0)[:, None]
    return {p: -g / c for p, g in grads.items()}


def flatten(grads: dict) -> Float[Array, "N P"]:
    """``[N, P]``: the blocks of a gradient dict concatenated in sorted path order."""
    return jnp.concatenate([grads[p] for p in sorted(grads)], axis=1)


def projection(key, dim: int, k: int) -> Float[Array, "P k"]:
    """A Gaussian random projection with entries of variance 1/k (Johnson–Lindenstrauss)."""
    return jax.random.normal(key, (dim, k), jnp.float32) / jnp.sqrt(float(k))


def adam_direction(g_NP: Float[Array, "N P"], m_P: Float[Array, " P"], v_P: Float[Array, " P"], *,
                   beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> Float[Array, "N P"]:
    """``m′/(√v′ + ε)`` of every example: the Adam update direction of one more step with gradient g."""
    m = beta1 * m_P[None] + (1.0 - beta1) * g_NP
    v = beta2 * v_P[None] + (1.0 - beta2) * g_NP * g_NP
    return m / (jnp.sqrt(v) + eps)


def less_features(g_NP, m_P, v_P, proj_PK, **adam) -> Float[Array, "N k"]:
    """LESS training features ``Γ(z, θ)Π`` (see the module docstring)."""
    with jax.default_matmul_precision("highest"):
        return adam_direction(g_NP, m_P, v_P, **adam) @ proj_PK


def _unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-30)


def less_per_test(train_feats: list, val_feats: list, lrs) -> Float[Array, "Q N"]:
    """``Σ_i η̄_i cos(Γ(z, θ_i)Π, ∇ℓ(q, θ_i)Π)`` for every target q (``train_feats[i] [N, k]``, ``val_feats[i]
    [Q, k]``, ``lrs[i]`` the mean learning rate of warm-up epoch i): one row per test item for the LDS."""
    with jax.default_matmul_precision("highest"):
        return sum(lr * (_unit(v) @ _unit(t).T) for t, v, lr in zip(train_feats, val_feats, lrs))


def less_scores(train_feats: list, val_feats: list, lrs) -> Float[Array, " N"]:
    """``Σ_i η̄_i cos(train_i, val_i)`` over checkpoints i; ``train_i [N, k]``, ``val_i [k]``: :func:`less_per_test`
    with one target."""
    return less_per_test(train_feats, [v[None] for v in val_feats], lrs)[0]


@functools.partial(jax.jit, static_argnames="iters")
def schulz_inverse(a_BB: Float[Array, "B B"], iters: int = 30) -> Float[Array, "B B"]:
    """``A⁻¹`` by the Schulz iteration ``X ← X(2I − AX)`` from ``X₀ = Aᵀ/(‖A‖₁‖A‖_∞)``."""
    n = a_BB.shape[0]
    x = a_BB.T / (jnp.max(jnp.sum(jnp.abs(a_BB), axis=0)) * jnp.max(jnp.sum(jnp.abs(a_BB), axis=1)))
    eye2 = 2.0 * jnp.eye(n, dtype=a_BB.dtype)
    with jax.default_matmul_precision("highest"):
        return jax.lax.fori_loop(0, iters, lambda _, x: x @ (eye2 - a_BB @ x), x)


def hyperinf_per_test(train: dict, val: dict, shapes: dict, *, damping: float = 0.1, iters: int = 30
                      ) -> Float[Array, "Q N"]:
    """``Σ_l ⟨V_{l,q} A_l⁻¹, G_{l,n}⟩_F`` for every target q (``val {path: [Q, a·b]}``, one row per test item for the
    LDS); ``A_l⁻¹`` is computed once per matrix. :func:`hyperinf_scores` is the one-target case."""
    total = 0.0
    with jax.default_matmul_precision("highest"):
        for p, g in train.items():
            a, b = shapes[p]
            gm = g.reshape(-1, a, b)
            vm = val[p].reshape(-1, a, b)
            left = a < b
            f = jnp.einsum("nab,nac->bc", gm, gm) if not left else jnp.einsum("nab,ncb->ac", gm, gm)
            f = f / gm.shape[0]
            size = f.shape[0]
            inv = schulz_inverse(f + damping * jnp.trace(f) / size * jnp.eye(size, dtype=f.dtype), iters)
            pre = jnp.einsum("ac,qcb->qab", inv, vm) if left else jnp.einsum("qab,bc->qac", vm, inv)
            total = total + jnp.einsum("nab,qab->qn", gm, pre)
    return total


def hyperinf_scores(train: dict, val: dict, shapes: dict, *, damping: float = 0.1, iters: int = 30
                    ) -> Float[Array, " N"]:
    """HyperINF similarity of every train example to the target set (see the module docstring).

    Args:
      train: ``{path: [N, a·b]}`` per-example loss gradients; val: ``{path: [a·b]}`` the target mean gradient.
      shapes: ``{path: (a, b)}`` the matrix shape of each block (vectors are treated as ``(1, b)``).
    """
    return hyperinf_per_test(train, {p: v[None] for p, v in val.items()}, shapes, damping=damping, iters=iters)[0]


def matrix_shapes(params_shapes: dict) -> dict:
    """``{path: (a, b)}``: a 2-D kernel keeps its shape, a higher-rank one folds its leading axes, a vector is
    ``(1, b)``."""
    out = {}
    for p, shape in params_shapes.items():
        shape = tuple(shape)
        out[p] = (1, shape[0]) if len(shape) == 1 else (int(np.prod(shape[:-1])), shape[-1])
    return out


def top_fraction(scores, fraction: float) -> np.ndarray:
    """Indices of the ``ceil(fraction·N)`` highest scores (stable: ties keep the lower index first)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    s = np.asarray(scores, float)
    k = int(np.ceil(fraction * len(s)))
    return np.argsort(-s, kind="stable")[:k]
