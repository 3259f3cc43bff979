"""Null-space projected updates (AlphaEdit, Fang et al. 2025, "AlphaEdit: Null-Space Constrained Knowledge Editing
for Language Models", Eq. 7–10; the GPM family, ``continual/gpm.py``).

A linear layer y = x W (kernel ``D_in × D_out``) answers the old facts through their key activations
K0 = [k_1 … k_n] (its inputs on old data). An update U with K0ᵀ U = 0 leaves every old key's output unchanged:
(W + U)ᵀ k = Wᵀ k. AlphaEdit takes the eigen-decomposition of K0 K0ᵀ = G (``D_in × D_in``), keeps the
eigenvectors whose eigenvalues are not negligible as the protected basis M, and projects each update onto their
orthogonal complement, U ← (I − M Mᵀ) U (AlphaEdit's P = Û Ûᵀ over the negligible eigenvectors is the same map).
"Negligible" here is relative: λ_i ≤ ``tol`` · λ_max(G), so the rule does not depend on how many tokens G sums.

Per stage the state is the bases of all earlier tasks: a later task's directions come from the residual Gram
P G P, P = I − M Mᵀ (as in GPM), with the same relative cutoff against that task's λ_max. GPM is this with another
cut (the fewest directions holding a fraction ε of the energy, ``gpm.update_bases``): both share the Gram
accumulation (``gpm.input_grams``), the basis format, the saved state and the projection of the optimiser's update
(``gpm.gpm_projection``: applied after AdamW, weight decay included). Options in the name: ``nullspace(tol=1e-2)``.
"""

from __future__ import annotations

import math

import numpy as np

from cfka_jax.continual import gpm
from cfka_jax.continual.method import Component, Hooks, MethodOptions


def new_directions(gram: np.ndarray, basis: np.ndarray | None, tol: float) -> np.ndarray:
    """The eigenvectors of the residual Gram (P G P, P = I − M Mᵀ; G when ``basis`` is None) with eigenvalue
    > ``tol`` · λ_max(G) (``D_in × k``, float64)."""
    top = float(np.linalg.eigvalsh((gram + gram.T) / 2)[-1])
    if top <= 0.0:
        return np.zeros((gram.shape[0], 0))
    resid = gram
    if basis is not None and basis.shape[1]:
        proj = np.eye(gram.shape[0]) - basis @ basis.T
        resid = proj @ gram @ proj
    evals, evecs = np.linalg.eigh((resid + resid.T) / 2)
    return evecs[:, evals > tol * top]


def update_bases(bases: gpm.Bases | None, grams: dict[tuple, np.ndarray], tol: float) -> gpm.Bases:
    """The protected bases after one more task (module docstring): orthonormal (QR), at most ``D_in`` wide,
    float32, in ``gpm``'s format."""
    out = {}
    for p, gram in grams.items():
        old = None if bases is None else bases.get(p)
        old = None if old is None else old.astype(np.float64)
        new = new_directions(gram, old, tol)
        m = new if old is None else np.concatenate([old, new], axis=1)
        if m.shape[1]:
            m = np.linalg.qr(m)[0][:, :min(m.shape[1], m.shape[0])]
        out[p] = m.astype(np.float32)
    return out


def component(options: MethodOptions, tol: float = 1e-2, **given) -> Component:
    """Null-space updates with the relative eigenvalue cutoff ``tol`` ∈ (0, 1) (module docstring).

    Raises:
      ValueError: an unknown option or ``tol`` outside (0, 1).
    """
    if given:
        raise ValueError(f"nullspace options are tol, got {sorted(given)}")
    cut = float(tol)
    if not (math.isfinite(cut) and 0.0 < cut < 1.0):
        raise ValueError(f"nullspace: tol (the relative eigenvalue cutoff) must be in (0, 1), got {tol!r}")

    def transform(ctx):
        return gpm.gpm_projection(ctx.protected_bases("nullspace", lambda bases, grams: update_bases(
            bases, grams, cut)))

    return Component("nullspace", Hooks(transform=transform), needs={"old_keys"}, state="nullspace")
