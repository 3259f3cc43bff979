"""Gradient Projection Memory (Saha, Garg & Roy 2021, "Gradient Projection Memory for Continual Learning").

After a task, each linear layer y = x W (kernel W: ``D_in × D_out``) stores an orthonormal basis M (``D_in × k``)
of the span of its inputs on that task; later tasks change W only orthogonally to it, W ← W − η (I − M Mᵀ) U,
so W x is unchanged for every stored input x (the layer's response on earlier tasks' representation space).

* Basis of the first task (Eq. 5 of the paper): R = [x_1 … x_n] (``D_in × n``), R = U Σ Vᵀ; keep the smallest k
  with Σ_{i≤k} σ_i² ≥ ε ‖R‖²_F (ε = ``threshold``).
* Later tasks (Eq. 8–9): the residual R̂ = R − M Mᵀ R is decomposed the same way and the fewest new directions are
  added so that ‖Mᵀ R‖²_F + Σ_{i≤k} σ̂_i² ≥ ε ‖R‖²_F; M ← [M, Û_k].

Both only need the Gram matrix G = R Rᵀ = Σ_n x_n x_nᵀ (``D_in × D_in``), accumulated over batches without
keeping R: σ² and U are the eigenpairs of G, ‖R‖² = tr G, ‖Mᵀ R‖² = tr(Mᵀ G M), R̂ R̂ᵀ = P G P with P = I − M Mᵀ.

Here (an LM under AdamW, not the paper's SGD) the projection is applied to the optimiser's *update*
(:func:`gpm_projection`, chained after AdamW by ``train/optim.make_optimizer(post=...)``), so the step itself,
weight decay included, leaves the stored span's response unchanged; projecting the gradient before Adam would not,
because Adam rescales coordinates. Covered: every ``nnx.Linear`` kernel of the blocks (attention and MLP
projections); embeddings, norms and biases are not projected (the paper's networks had no biases).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from cfka_jax import jsonio

Bases = dict[tuple, np.ndarray]
"""Module path (e.g. ``('layers', 0, 'mlp', 'up_proj')``) → orthonormal basis ``D_in × k`` (float32)."""


@dataclasses.dataclass(frozen=True)
class GPMConfig:
    """``threshold``: the energy fraction ε kept per layer and task (the paper uses 0.97 to 0.99);
    ``batches``: how many batches of a task's data estimate its representation space."""

    threshold: float = 0.97
    batches: int = 8

    def __post_init__(self):
        if not (isinstance(self.threshold, float) and 0.0 < self.threshold < 1.0):
            raise ValueError(f"GPM threshold must be a float in (0, 1), got {self.threshold!r}")
        if not isinstance(self.batches, int) or isinstance(self.batches, bool) or self.batches < 1:
            raise ValueError(f"GPM batches must be an integer >= 1, got {self.batches!r}")


class _Recorder(nnx.Module):
    """An ``nnx.Linear`` that also sows the Gram matrix Σ x xᵀ of its inputs (as ``nnx.Intermediate``)."""

    def __init__(self, base: nnx.Linear):
        self.base = base

    def __call__(self, x):
        x2 = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
        self.sow(nnx.Intermediate, "gram", x2.T @ x2)
        return self.base(x)


def _linear_paths(model: nnx.Module) -> list[tuple]:
    paths = [tuple(p) for p, m in nnx.iter_modules(model) if isinstance(m, nnx.Linear)]
    if not paths:
        raise ValueError("GPM found no nnx.Linear layer in the model")
    for p in paths:
        m = model
        for k in p:
            m = m[k] if isinstance(k, int) else getattr(m, k)
        if m.kernel[...].ndim != 2:
            raise ValueError(f"GPM needs looped layers (2-D kernels); {'.'.join(map(str, p))} has a "
                             f"{m.kernel[...].ndim}-D kernel (scanned layers)")
    return paths


def _recording_clone(model: nnx.Module) -> tuple[nnx.Module, list[tuple]]:
    clone = nnx.clone(model)
    paths = _linear_paths(clone)
    for p in paths:
        parent = clone
        for k in p[:-1]:
            parent = parent[k] if isinstance(k, int) else getattr(parent, k)
        setattr(parent, p[-1], _Recorder(getattr(parent, p[-1])))
    return clone, paths


def input_grams(model: nnx.Module, batches: Iterable[dict]) -> dict[tuple, np.ndarray]:
    """G = Σ_n x_n x_nᵀ of every ``nnx.Linear``'s inputs over all positions of ``batches`` (float64 numpy,
    ``D_in × D_in``), keyed by module path. ``model`` is not modified."""
    clone, paths = _recording_clone(model)
    graphdef, state = nnx.split(clone)

    @jax.jit
    def grams(state, batch):
        forward = nnx.capture(nnx.merge(graphdef, state), nnx.Intermediate)
        _, sown = forward(batch["tokens"], positions_BS=batch.get("positions"),
                          segment_ids_BS=batch.get("segment_ids"))
        return {p: sum(_get(sown, p + ("gram",))) for p in paths}

    total = None
    for batch in batches:
        g = jax.device_get(grams(state, batch))
        total = g if total is None else {p: total[p] + g[p] for p in paths}
    if total is None:
        raise ValueError("GPM needs at least one batch of the task's data")
    return {p: np.asarray(v, np.float64) for p, v in total.items()}


def _get(state, path):
    node = state
    for k in path:
        node = node[k]
    return node.get_value() if hasattr(node, "get_value") else node


def _new_directions(gram: np.ndarray, basis: np.ndarray | None, threshold: float) -> np.ndarray:
    """The fewest top eigenvectors of the residual Gram P G P that bring the captured energy to ε tr G."""
    total = float(np.trace(gram))
    if total <= 0.0:
        return np.zeros((gram.shape[0], 0))
    if basis is None or basis.shape[1] == 0:
        captured, resid = 0.0, gram
    else:
        captured = float(np.trace(basis.T @ gram @ basis))
        proj = np.eye(gram.shape[0]) - basis @ basis.T
        resid = proj @ gram @ proj
    if captured >= threshold * total:
        return np.zeros((gram.shape[0], 0))
    evals, evecs = np.linalg.eigh((resid + resid.T) / 2)
    evals, evecs = np.maximum(evals[::-1], 0.0), evecs[:, ::-1]
    k = int(np.searchsorted(captured + np.cumsum(evals), threshold * total) + 1)
    return evecs[:, :min(k, gram.shape[0])]


def update_bases(bases: Bases | None, grams: dict[tuple, np.ndarray], threshold: float) -> Bases:
    """Bases after one more task (module docstring); each stays orthonormal (re-orthonormalised by QR) and at
    most ``D_in`` wide."""
    out = {}
    for p, gram in grams.items():
        old = None if bases is None else bases.get(p)
        new = _new_directions(gram, None if old is None else old.astype(np.float64), threshold)
        m = new if old is None else np.concatenate([old.astype(np.float64), new], axis=1)
        if m.shape[1]:
            m = np.linalg.qr(m)[0][:, :min(m.shape[1], m.shape[0])]
        out[p] = m.astype(np.float32)
    return out


def basis_sizes(bases: Bases) -> dict[str, list[int]]:
    """``{'.'.join(path): [k, D_in]}``: how much of each layer's input space is protected."""
    return {".".join(map(str, p)): [int(m.shape[1]), int(m.shape[0])] for p, m in bases.items()}


def _module_path(key_path) -> tuple:
    out = []
    for k in key_path:
        if isinstance(k, jax.tree_util.DictKey):
            out.append(k.key)
        elif isinstance(k, jax.tree_util.SequenceKey):
            out.append(k.idx)
    return tuple(out)


def project_updates(updates, bases: Bases):
    """Each kernel update U (``D_in × D_out``) of a layer with basis M replaced by (I − M Mᵀ) U; others kept."""
    jb = {p + ("kernel",): jnp.asarray(m) for p, m in bases.items() if m.shape[1]}

    def one(key_path, u):
        m = jb.get(_module_path(key_path))
        if m is None:
            return u
        return (u - m @ (m.T @ u.astype(jnp.float32))).astype(u.dtype)

    return jax.tree_util.tree_map_with_path(one, updates)


def gpm_projection(bases: Bases) -> optax.GradientTransformation:
    """An optax transformation projecting every covered kernel's update off its stored basis (stateless)."""

    def update_fn(updates, state, params=None):
        del params
        return project_updates(updates, bases), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def save_bases(path: str | os.PathLike, bases: Bases) -> None:
    """``bases`` to an ``.npz``, atomically (``jsonio.write_npz_atomic``)."""
    jsonio.write_npz_atomic(path, {"/".join(map(str, p)): m for p, m in bases.items()})


def load_bases(path: str | os.PathLike) -> Bases:
    """Bases saved by :func:`save_bases` (integer path parts restored)."""
    arrays = jsonio.read_npz(path)  # a damaged file: one error naming it
    return {tuple(int(k) if k.isdigit() else k for k in name.split("/")): a for name, a in arrays.items()}
