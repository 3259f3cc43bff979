"""The per-token collision protocol (spec §6.2, ``interaction/src/run_one_step_forgetting.py``).

For each update token u (target position ``pos_u`` of row ``tokens_u``), from the *same* base parameters θ:

1. record the token's statistics under θ: ``p_y = π_y``, ``aop_kl = −log π_y``, the entropy ``H(π)`` and the
   update energy ``E = ‖e_y − π‖²`` (the logits that predict position ``pos_u``, i.e. at ``pos_u − 1``);
2. take one SGD step on that token's loss alone, ``θ′ = θ + η ∇θ log π_y`` (η = 1e-4 in the release);
3. the teacher-forced ``total_logp(o) = Σ_t mask_o[t]·log p(o_t | o_<t)`` of every probe o, before and after:
   ``Δ_uo = total_logp_θ′(o) − total_logp_θ(o)``; and its first-order prediction
   ``η ⟨∇θ total_logp(o), ∇θ log π_y⟩`` (one ``jvp`` along the token's gradient; no per-probe gradients);
4. per probe domain d: ``F_avg(u, d) = −mean_{o∈d} Δ_uo`` and ``F_ratio(u, d) = frac_{o∈d}(Δ_uo < −τ)``, τ = 0.1.

``sop`` (the release's decayed average of the training history's NLL) has no meaning for a step from a fixed base
model and is not recorded. The loop over update tokens is a ``lax.map`` (the step is restored by construction:
every token starts from θ).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.geometry.force import target_logprobs
from cfka_jax.geometry.net import Net
from cfka_jax.geometry.onestep import highest
from cfka_jax.shapes import Array, Float, Int


def _token_logp(params, tokens_S, pos, *, net: Net):
    logits = net.model(params)(tokens_S[None]).logits[0, pos - 1].astype(jnp.float32)
    return jax.nn.log_softmax(logits)[tokens_S[pos]]


def probe_logp(params, probes_PS: Int[Array, "P S"], mask_PS: Float[Array, "P S"], *, net: Net
               ) -> Float[Array, " P"]:
    """Teacher-forced ``total_logp`` of every probe: ``Σ_t mask[t]·log p(o_t | o_<t)`` (mask keyed by target)."""
    lp = target_logprobs(net.model(params)(probes_PS).logits)
    lp_y = jnp.take_along_axis(lp, probes_PS[..., None], axis=-1)[..., 0]
    return jnp.sum(mask_PS * lp_y, axis=-1)


def token_stats(logits_UV: Float[Array, "U V"], y_U: Int[Array, " U"]) -> dict[str, Float[Array, " U"]]:
    """``p_y``, ``aop_kl = −log π_y``, entropy and energy ``E = 1 − 2π_y + Σ_v π_v²`` of each update token."""
    lp = jax.nn.log_softmax(logits_UV.astype(jnp.float32), axis=-1)
    p = jnp.exp(lp)
    lp_y = jnp.take_along_axis(lp, y_U[:, None], axis=-1)[:, 0]
    return {"p_y": jnp.exp(lp_y), "aop_kl": -lp_y, "entropy": -jnp.sum(p * lp, axis=-1),
            "energy": 1.0 - 2.0 * jnp.exp(lp_y) + jnp.sum(p * p, axis=-1)}


@functools.partial(jax.jit, static_argnames=("net", "etas", "chunk"))
@highest
def token_collisions(params, tokens_US: Int[Array, "U S"], pos_U: Int[Array, " U"], probes_PS: Int[Array, "P S"],
                     mask_PS: Float[Array, "P S"], *, net: Net, etas: tuple[float, ...] = (1e-4,), chunk: int = 4
                     ) -> dict:
    """Steps 1–3 of the protocol for every update token (see the module docstring).

    Returns ``{"delta": [E, U, P]`` (one row per η in ``etas``), ``"first_order": [U, P]`` (per unit η),
    ``"p_y", "aop_kl", "entropy", "energy": [U]}``.
    """
    base = probe_logp(params, probes_PS, mask_PS, net=net)
    logp = functools.partial(probe_logp, probes_PS=probes_PS, mask_PS=mask_PS, net=net)

    def one(args):
        tok, pos = args
        g = jax.grad(_token_logp)(params, tok, pos, net=net)
        first = jax.jvp(logp, (params,), (g,))[1]
        deltas = [logp(jax.tree.map(lambda p, d, eta=eta: p + eta * d, params, g)) - base for eta in etas]
        return jnp.stack(deltas), first

    delta, first = jax.lax.map(one, (tokens_US, pos_U), batch_size=chunk)
    logits = net.model(params)(tokens_US).logits
    at = jnp.take_along_axis(logits, (pos_U - 1)[:, None, None], axis=1)[:, 0]
    y = jnp.take_along_axis(tokens_US, pos_U[:, None], axis=1)[:, 0]
    return {"delta": jnp.moveaxis(delta, 1, 0), "first_order": first, **token_stats(at, y)}


def per_domain(delta_UP: np.ndarray, domain_P: np.ndarray, domains: int, *, tau: float = 0.1
               ) -> dict[str, np.ndarray]:
    """Step 4: ``F_avg [U, domains] = −mean_{o∈d} Δ`` and ``F_ratio [U, domains] = frac_{o∈d}(Δ < −τ)``."""
    delta = np.asarray(delta_UP, float)
    dom = np.asarray(domain_P)
    for d in range(domains):
        if not np.any(dom == d):
            raise ValueError(f"probe domain {d} has no probes")
    f_avg = np.stack([-delta[:, dom == d].mean(axis=1) for d in range(domains)], axis=1)
    f_ratio = np.stack([(delta[:, dom == d] < -tau).mean(axis=1) for d in range(domains)], axis=1)
    return {"f_avg": f_avg, "f_ratio": f_ratio}
