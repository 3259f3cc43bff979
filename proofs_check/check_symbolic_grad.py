"""Independent route (sympy): the (Y, Z) gradients derived symbolically on a small world, against ``jax.grad``.

The population loss ℓ(Y, Z) = −Σ_{X,o} Pr(X, o) log softmax_o(Σ_{l} Z[x_l, q] Y[o, x_l]) is written out in
sympy from the world's enumerated contexts (every probability converted to the exact rational of its float64
value), differentiated symbolically in every entry of Y and Z, and evaluated at random points in 40-digit
arithmetic. Rows:

1. ∇_Y ℓ: sympy vs ``jax.grad`` of ``theory/model.yz_loss`` (max abs. error / max |∇|, float64 rounding).
2. ∇_Z ℓ: the same for Z.
3. The identity behind the conservation law (spec §2.5), z_s ∂ℓ/∂z_s = Σ_o y_{o,s} ∂ℓ/∂y_{o,s} for every context
   token s (z_s = Z[s, q]), evaluated symbolically at 40 digits (so dc_s/dt = 0 along the flow): max |gap|.

    JAX_ENABLE_X64=1 python -m cfka_jax.proofs_check.check_symbolic_grad runs/proofs
"""

from __future__ import annotations

import jax
import numpy as np
import sympy as sp

from cfka_jax.theory.model import init_yz, yz_loss
from cfka_jax.theory.world import SlotSpec, WorldConfig, full_batch, make_world
from cfka_jax.proofs_check.common import holds, main_for, require_x64, save_figure

# 3 objects, one name slot of 3 tokens, a template and the query: 9 token types, 3 contexts, 162 symbols.
TINY = WorldConfig(num_objects=3, slots=(SlotSpec("name", 3, (0.3, 1.0)), SlotSpec("template", 1),
                                         SlotSpec("query", 1)), object_skew=0.5, smoothing=0.05, seed=0)
POINTS, DIGITS = 3, 40
TOL_FLOAT64 = 1e-13  # float64 rounding of sums of ~10 O(1) terms, relative to max |∇|
TOL_IDENTITY = 1e-30  # exact identity, evaluated with 40 significant digits


def symbolic_loss(world):
    """(ℓ as a sympy expression, Y symbols M×M, Z symbols M×M)."""
    m = len(world.token_kinds)
    Y = sp.Matrix(m, m, lambda i, j: sp.Symbol(f"y_{i}_{j}"))
    Z = sp.Matrix(m, m, lambda i, j: sp.Symbol(f"z_{i}_{j}"))
    objects = [int(o) for o in world.objects]
    loss = 0
    for ctx, weights in zip(np.asarray(world.contexts), np.asarray(world.joint)):
        q = int(ctx[-1])
        logits = [sum(Z[int(x), q] * Y[o, int(x)] for x in ctx) for o in objects]
        lse = sp.log(sum(sp.exp(v) for v in logits))
        loss += sum(sp.Rational(float(w)) * (lse - v) for w, v in zip(weights, logits))
    return loss, Y, Z


def _values(params):
    return {f"{n}_{i}_{j}": sp.Rational(float(a[i, j])) for n, a in (("y", params.Y), ("z", params.Z))
            for i in range(a.shape[0]) for j in range(a.shape[1])}


def run(out_dir):
    require_x64()
    world = make_world(TINY)
    loss, Y, Z = symbolic_loss(world)
    free = loss.free_symbols
    grads = {s: sp.diff(loss, s) for s in free}  # entries of Y and Z outside ``free`` have ∂ℓ = 0
    q = world.query_token
    gaps = [Z[s, q] * grads.get(Z[s, q], 0) - sum(Y[int(o), s] * grads.get(Y[int(o), s], 0) for o in world.objects)
            for s in map(int, world.context_tokens)]
    jgrad = jax.jit(jax.grad(lambda p: yz_loss(p, *full_batch(world), world.objects)))
    err_y, err_z, worst_gap = [], [], 0.0
    for i in range(POINTS):
        params = init_yz(jax.random.key(10 + i), len(world.token_kinds), scale=1.0)
        subs = {sp.Symbol(k): v for k, v in _values(params).items()}
        g_sym = {s: float(g.evalf(DIGITS, subs=subs)) for s, g in grads.items()}
        g_jax = jgrad(params)
        for arr, sym, errs in ((np.asarray(g_jax.Y), Y, err_y), (np.asarray(g_jax.Z), Z, err_z)):
            ref = np.array([[g_sym.get(sym[a, b], 0.0) for b in range(sym.cols)] for a in range(sym.rows)])
            errs.append(np.max(np.abs(arr - ref)) / np.max(np.abs(ref)))
        worst_gap = max([worst_gap] + [abs(float(sp.N(g.subs(subs), DIGITS))) for g in gaps])
    _plot(out_dir, err_y, err_z)
    where = f"{len(world.token_kinds)} token types, {world.contexts.shape[0]} contexts, {len(free)} free symbols"
    return [
        holds("sympy-grad", "∇_Y ℓ: sympy derivative = jax.grad (max rel. err over 3 points)", max(err_y), TOL_FLOAT64,
              where),
        holds("sympy-grad", "∇_Z ℓ: sympy derivative = jax.grad (max rel. err over 3 points)", max(err_z), TOL_FLOAT64),
        holds("sympy-grad", "z_s ∂ℓ/∂z_s = Σ_o y_os ∂ℓ/∂y_os per token, at 40 digits (so dc_s/dt = 0)", worst_gap,
              TOL_IDENTITY, "the identity behind the conservation law, evaluated symbolically"),
    ]


def _plot(out_dir, err_y, err_z):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(1, len(err_y) + 1)
    ax.semilogy(x, err_y, "o-", label="∇_Y: |jax.grad − sympy| / max|∇|")
    ax.semilogy(x, err_z, "s-", label="∇_Z: |jax.grad − sympy| / max|∇|")
    ax.axhline(TOL_FLOAT64, color="k", ls="--", label="tolerance (float64 rounding)")
    ax.set(xlabel="random point (Y, Z ~ N(0, 1))", ylabel="relative error", xticks=x,
           title="Symbolic (sympy, 40 digits) vs automatic (jax.grad) gradients")
    ax.legend(fontsize=8)
    save_figure(fig, out_dir, "symbolic_grad")


if __name__ == "__main__":
    main_for(run, "runs/proofs")
