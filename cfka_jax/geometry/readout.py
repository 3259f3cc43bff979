"""The readout W as ``[V, d]``, the readout projection Wᵀg and readout transmission R (spec §2, §7.1).

* :func:`readout_matrix` is the single accessor for W (pitfall 8): Flax ``Linear`` kernels are ``[d, V]``, so an
  untied head returns its kernel transposed; a tied head returns the input embedding ``[V, d]`` itself.
* ``Wᵀg = W[y] − πᵀW`` (:func:`readout_projection`).
* Transmission of a token: ``R_t = ‖Wᵀg_t‖² / max(‖g_t‖², 1e−12)`` — the Rayleigh quotient of ``WWᵀ`` at g, not
  normalised by ‖W‖. ``R_D`` is the **mean of the per-token ratios** over the supervised tokens of probe set D
  (pitfall 14), logged with ``R_p95``, ``g2_mean`` and ``wtg2_mean``; float32, current (possibly tied) head.
* Property [DERIVED]: since ``Σ_v g_v = 0``, R is invariant to adding a common vector to all rows of W, hence
  ``R ≤ σ_max(W − 1μᵀ)²`` with μ the mean row (tested in ``tests/geometry/test_readout.py``).
* Size-normalised R [DERIVED, not the paper's R]: R grows with the scale of W (``R(cW) = c²R(W)``), so a rise of
  R under CPT can be the readout growing rather than the force turning towards it. :func:`readout_size` is
  ``s(W) = ‖W − 1μᵀ‖_F² / (V − 1)``, the mean of R over force directions drawn uniformly from the unit sphere of
  the sum-zero subspace (where every g lies): with ``P = I − 11ᵀ/V``, ``E[gᵀWWᵀg] = tr(PWWᵀP)/(V − 1)`` and
  ``PW = W − 1μᵀ``. ``R / s(W)`` (:func:`normalized_transmission`) is 1 for a force that meets the readout like a
  random direction, invariant to W → cW and to a common shift of W's rows, as R is to the latter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry.force import force
from cfka_jax.geometry.net import Net, names
from cfka_jax.shapes import Array, Float

R_CLAMP = 1e-12


def readout_matrix(params, cfg) -> Float[Array, "V D"]:
    """W as ``[V, d]`` for the tied or untied head of a Qwen or Pythia port (``params`` state or plain dict)."""
    n = names(cfg)
    if cfg.tie_word_embeddings:
        return params[n["embed"]]["embedding"][...]
    return params[n["head"]]["kernel"][...].T


def readout_projection(w_VD: Float[Array, "V D"], g_XV: Float[Array, "*X V"]) -> Float[Array, "*X D"]:
    """``Wᵀg`` for every force vector (any leading shape)."""
    return jnp.einsum("...v,vd->...d", g_XV, w_VD.astype(g_XV.dtype))


def ratio(wtg2_X: Float[Array, "*X"], g2_X: Float[Array, "*X"]) -> Float[Array, "*X"]:
    """``‖Wᵀg‖² / max(‖g‖², 1e−12)`` (the clamp of §7.1)."""
    return wtg2_X / jnp.maximum(g2_X, R_CLAMP)


def readout_size(w_VD: Float[Array, "V D"]) -> float:
    """``s(W) = ‖W − 1μᵀ‖_F² / (V − 1)`` (μ the mean row): the mean transmission of an isotropic sum-zero force
    direction (module docstring), in float32 like R."""
    w = jnp.asarray(w_VD, jnp.float32)
    if w.shape[0] < 2:
        raise ValueError(f"readout_size needs at least 2 rows, got W of shape {tuple(w.shape)}")
    centred = w - jnp.mean(w, axis=0, keepdims=True)
    return float(jnp.sum(centred * centred) / (w.shape[0] - 1))


def normalized_transmission(summary: dict[str, float], size: float) -> dict[str, float]:
    """``R_norm_mean = R_mean / size`` and ``R_norm_p95 = R_p95 / size`` of a :func:`summarize` result (the mean
    of the per-token ratios divided by the constant ``size`` is the mean of the normalised ratios), and
    ``readout_size``.

    Raises:
      ValueError: ``size`` is not a finite number > 0.
    """
    if not np.isfinite(size) or size <= 0:
        raise ValueError(f"readout size must be a finite number > 0, got {size}")
    return {"R_norm_mean": summary["R_mean"] / size, "R_norm_p95": summary["R_p95"] / size, "readout_size": size}


def readout_geometry(w_VD: Float[Array, "V D"], support) -> dict[str, float]:
    """Spectrum summaries of ``W_S W_Sᵀ`` for a task's token-support set S (spec §7.1, optional): trace, effective
    rank ``exp(H(λ/Σλ))``, Hoyer concentration of the eigenvalues and ``λ_max``."""
    from cfka_jax.geometry.stats import hoyer

    w_s = np.asarray(w_VD, np.float64)[np.asarray(sorted(set(int(i) for i in support)))]
    lam = np.clip(np.linalg.eigvalsh(w_s @ w_s.T), 0.0, None)
    p = lam / lam.sum()
    entropy = -float(np.sum(p[p > 0] * np.log(p[p > 0])))
    return {"trace": float(lam.sum()), "effective_rank": float(np.exp(entropy)), "hoyer": hoyer(lam),
            "lambda_max": float(lam.max())}


def transmission_tokens(params, batch: dict, *, net: Net) -> dict[str, Float[Array, "B S"]]:
    """Per-target ``R``, ``g2 = ‖g‖²`` and ``wtg2 = ‖Wᵀg‖²``, keyed by target position (float32)."""
    model = net.model(params)
    out = model(batch["tokens"], positions_BS=batch.get("positions"), attention_mask_BT=batch.get("attention_mask"))
    g = force(out.logits, batch["tokens"])
    wtg = readout_projection(readout_matrix(params, net.cfg), g)
    g2, wtg2 = jnp.sum(g * g, axis=-1), jnp.sum(wtg * wtg, axis=-1)
    return {"R": ratio(wtg2, g2), "g2": g2, "wtg2": wtg2}


def summarize(per_token: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    """``R_mean`` (mean of per-token ratios), ``R_p95``, ``g2_mean``, ``wtg2_mean``, ``tokens`` over ``mask``."""
    keep = np.asarray(mask) > 0
    r, g2, wtg2 = (np.asarray(per_token[k], np.float64)[keep] for k in ("R", "g2", "wtg2"))
    if r.size == 0:
        return {"R_mean": float("nan"), "R_p95": float("nan"), "g2_mean": float("nan"), "wtg2_mean": float("nan"),
                "tokens": 0.0}
    return {"R_mean": float(r.mean()), "R_p95": float(np.percentile(r, 95)), "g2_mean": float(g2.mean()),
            "wtg2_mean": float(wtg2.mean()), "tokens": float(r.size)}


def probe_transmission(params, batches: Iterable[dict], *, net: Net, fn: Callable | None = None) -> dict:
    """:func:`summarize` over all supervised tokens (``target_mask``) of ``batches`` (one probe set)."""
    fn = fn or jax.jit(lambda p, b: transmission_tokens(p, b, net=net))
    parts = {"R": [], "g2": [], "wtg2": []}
    masks = []
    for batch in batches:
        res = fn(params, {k: v for k, v in batch.items() if k != "target_mask"})
        for k, part in parts.items():
            part.append(np.asarray(res[k]).ravel())
        masks.append(np.asarray(batch["target_mask"]).ravel())
    joined = {k: np.concatenate(v) for k, v in parts.items()}
    return summarize(joined, np.concatenate(masks))


def transmission_evaluator(probe_sets: dict[str, list[dict]]) -> Callable:
    """An evaluator factory for the training loop: ``factory(graphdef, rest) -> evaluate(params, step) -> dict``.

    ``probe_sets`` maps a probe-set name to a list of batches (``tokens``, ``target_mask`` over the supervised
    response tokens, optional ``positions`` / ``attention_mask``). Keys: ``<set>/R_mean``, ``<set>/R_p95``,
    ``<set>/g2_mean``, ``<set>/wtg2_mean``, ``<set>/tokens``.
    """

    def factory(graphdef, rest):
        from flax import nnx

        holder: dict = {}  # the Net and the jitted per-token pass, built on the first call (needs the config)

        def evaluate(params, step):
            if "net" not in holder:
                model = nnx.merge(graphdef, params, rest)
                holder["net"] = Net(graphdef, rest, model.cfg)
                holder["fn"] = jax.jit(lambda p, b: transmission_tokens(p, b, net=holder["net"]))
            out = {}
            for name, batches in probe_sets.items():
                res = probe_transmission(params, batches, net=holder["net"], fn=holder["fn"])
                out.update({f"{name}/{k}": v for k, v in res.items()})
            return out

        return evaluate

    return factory
