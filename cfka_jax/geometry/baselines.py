"""Gradient baselines of the attribution benchmark: exact per-example gradient products and DataInf (spec §9).

* **Exact first-order term** (sequence level): ``⟨∇θ Σ_t log p_t(a), ∇θ Σ_t log p_t(b)⟩`` over a parameter scope
  (``onestep.SCOPES``), the same kept targets as the forward-only scores. For an untied bias-free head its
  readout block equals the RH score ``⟨RH_a, RH_b⟩`` exactly (the readout-block lemma summed over tokens).
* **DataInf** (Kwon et al., ICLR 2024; ``ykwon0407/DataInf`` ``src/influence.py``). Per weight matrix l, with
  ``g_{l,i}`` the loss gradient of train example i (the token-mean NLL of the sequence, as HF losses are) and
  ``v_l`` that of one test item:

      λ_l = mean_i mean(g_{l,i}²) / 10
      h_l = (1/(nλ_l)) Σ_i [v_l − (⟨v_l, g_{l,i}⟩ / (λ_l + ‖g_{l,i}‖²)) g_{l,i}]   ≈ (G_l + λ_l I)⁻¹ v_l
      score(k) = Σ_l ⟨h_l, g_{l,k}⟩.

  The project uses ``+score`` as the similarity (pitfall 17) and reports the AUC of ``−score`` as a sign check.
  The matrices are the parameters of a scope (default ``modeled``: the readout and the block projection
  weights).

Per-example gradients are computed one sequence at a time inside ``lax.map`` (``chunk`` sequences vectorised).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from cfka_jax.geometry.attribution import attribution_mask
from cfka_jax.geometry.force import target_logprobs
from cfka_jax.geometry.net import Net, leaf_path, param_roles
from cfka_jax.geometry.onestep import SCOPE_ROLES, highest
from cfka_jax.shapes import Array, Float


def _seq_logprob(params, tokens_S, attn_S, *, net: Net, keep_pad_target: bool):
    out = net.model(params)(tokens_S[None], attention_mask_BT=attn_S[None])
    lp = target_logprobs(out.logits)[0]
    lp_y = jnp.take_along_axis(lp, tokens_S[:, None], axis=-1)[:, 0]
    keep = attribution_mask(attn_S[None], keep_pad_target=keep_pad_target, dtype=lp_y.dtype)[0]
    return jnp.sum(keep * lp_y), jnp.sum(keep)


@highest
def sequence_grads(params, batch: dict, *, net: Net, scope: str = "all", chunk: int = 8,
                   keep_pad_target: bool = False) -> tuple[dict[tuple, Float[Array, "N p"]], Float[Array, " N"]]:
    """``{path: [N, size]}`` gradients of ``Σ_t log p_t`` per sequence over ``scope``, and each kept count."""
    tokens = batch["tokens"]
    attn = batch.get("attention_mask", jnp.ones_like(tokens))
    roles = param_roles(params, net.cfg)
    fn = functools.partial(_seq_logprob, net=net, keep_pad_target=keep_pad_target)
    grad = jax.grad(fn, has_aux=True)
    grads, counts = jax.lax.map(lambda r: grad(params, *r), (tokens, attn), batch_size=chunk)
    flat = jax.tree_util.tree_flatten_with_path(grads)[0]
    keep = {leaf_path(k): x.reshape(x.shape[0], -1) for k, x in flat}
    return {p: x for p, x in keep.items() if roles[p] in SCOPE_ROLES[scope]}, counts


@highest
def exact_scores(grads_a: dict, grads_b: dict) -> Float[Array, "a b"]:
    """``⟨∇_a, ∇_b⟩`` summed over the blocks of two gradient dicts (the same scope)."""
    return functools.reduce(jnp.add, [grads_a[p] @ grads_b[p].T for p in grads_a])


@highest
def datainf_scores(grads_test: dict, counts_test: Array, grads_train: dict, counts_train: Array
                   ) -> Float[Array, "m n"]:
    """DataInf ``score(test, train)`` (the ``+score`` similarity) from ``Σ_t log p_t`` gradients and counts.

    The loss gradients are ``g = −∇ Σ_t log p_t / count`` (token-mean NLL); ``score`` is even in the sign of the
    gradients, so only the per-sequence scaling matters.
    """
    total = None
    for p, g_train in grads_train.items():
        gtr = -g_train / jnp.maximum(counts_train, 1.0)[:, None]
        v = -grads_test[p] / jnp.maximum(counts_test, 1.0)[:, None]
        n = gtr.shape[0]
        lam = jnp.mean(gtr * gtr) / 10.0
        c = (v @ gtr.T) / (lam + jnp.sum(gtr * gtr, axis=1))[None, :]
        h = (n * v - c @ gtr) / (n * lam)
        s = h @ gtr.T
        total = s if total is None else total + s
    return total
