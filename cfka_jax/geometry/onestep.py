"""One-step influence: token factors, exact first-order term, actual change (spec §3.1–§3.2).

Update: plain SGD on ``ℓ_u = −log p(y_u|s_u)`` for a single supervised token u, ``θ' = θ + η∇θ log p_u``, on
all parameters (no momentum, weight decay or clipping).

* ``first_order_exact(o,u) = η⟨∇θ log p_o, ∇θ log p_u⟩`` over a scope (:data:`SCOPES`):

  - ``all`` — every parameter;
  - ``modeled`` — the readout plus the block projection weights of rank ≥ 2 (no norms, biases or input
    embedding; a tied model's shared tensor counts as the readout);
  - ``readout_only`` — the tensor holding W (for a tied head this is the literal shared-tensor gradient, which
    is *not* η·CH1: see :func:`tied_decomposition`);
  - ``backbone`` — ``ch2_exact_backbone``: everything except the readout and the input embedding (a tied
    model's shared tensor is excluded entirely).

* ``delta_logp = log p_o(θ') − log p_o(θ)`` and ``delta_p`` (:func:`one_step_change`), for every (o, u) pair,
  with the noise floor of a zero-step re-score.

Per update token the release restores θ, computes the factors of every observation, steps and re-scores; here
the |U| updated parameter sets are built from the per-token gradients and scored one after another
(``lax.map``), which is the same computation. One-step checks run in float32 with matmul precision ``highest``
(:func:`highest`), and the identities also in float64 (tests and ``proofs_check``).

Tokens are addressed by ``(row, target position)`` in a :class:`TokenSet`; the target at p is scored from p − 1.
"""

from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp

from cfka_jax.geometry.channels import TokenFeatures
from cfka_jax.geometry.force import force_from_logprobs, target_logprobs, to_targets
from cfka_jax.geometry.net import Net, leaf_path, names, param_roles
from cfka_jax.geometry.readout import readout_matrix, readout_projection
from cfka_jax.geometry.streams import forward_streams
from cfka_jax.shapes import Array, Float, Int

SCOPES = ("all", "modeled", "readout_only", "backbone")
SCOPE_ROLES = {
    "all": ("readout", "embedding", "tied", "kernel", "other"),
    "modeled": ("readout", "tied", "kernel"),
    "readout_only": ("readout", "tied"),
    "backbone": ("kernel", "other"),
}


def highest(fn):
    """Run ``fn`` (and everything it traces) with matmul precision ``highest`` (spec §2 Precision)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapped


@functools.lru_cache(maxsize=64)
def jitted(fn, net: Net):
    """``jax.jit(partial(fn, net=net))``, cached per (function, net) so repeated calls do not recompile."""
    return jax.jit(functools.partial(fn, net=net))


@flax.struct.dataclass
class TokenSet:
    """n tokens of a batch: ``tokens[rows[i], pos[i]]`` is token i's target (``pos ≥ 1``).

    ``attention_mask`` (``[B, S]``, 1 keep / 0 pad) is optional.
    """

    tokens: Int[Array, "B S"]
    rows: Int[Array, " n"]
    pos: Int[Array, " n"]
    attention_mask: Int[Array, "B S"] | None = None

    @property
    def targets(self) -> Int[Array, " n"]:
        return self.tokens[self.rows, self.pos]


@highest
def token_features(params, ts: TokenSet, *, net: Net) -> TokenFeatures:
    """g, h, Wᵀg, log p and the block streams of every token of ``ts`` (one forward pass of the batch)."""
    st = forward_streams(net.model(params), ts.tokens, attention_mask_BS=ts.attention_mask)
    def at(x):
        return to_targets(x)[ts.rows, ts.pos]
    lp = at(jax.nn.log_softmax(st.logits, axis=-1))
    y = ts.targets
    g = force_from_logprobs(lp, y)
    wtg = readout_projection(readout_matrix(params, net.cfg).astype(g.dtype), g)
    logp = jnp.take_along_axis(lp, y[:, None], axis=-1)[:, 0]
    return TokenFeatures(g=g, h=at(st.final).astype(g.dtype), wtg=wtg, logp=logp, resid_attn=at(st.resid_attn),
                         resid_mlp=at(st.resid_mlp), norm_attn=at(st.norm_attn), norm_mlp=at(st.norm_mlp))


def _row_logprob(params, tokens_S, mask_S, pos, *, net: Net):
    """``log p(tokens[pos] | tokens[:pos])`` of one row (a scalar)."""
    out = net.model(params)(tokens_S[None], attention_mask_BT=None if mask_S is None else mask_S[None])
    lp = target_logprobs(out.logits)[0, pos]
    return lp[tokens_S[pos]]


@highest
def token_logprobs(params, ts: TokenSet, *, net: Net) -> Float[Array, " n"]:
    """``log p`` of every token of ``ts`` (one forward pass of the batch)."""
    out = net.model(params)(ts.tokens, attention_mask_BT=ts.attention_mask)
    lp = target_logprobs(out.logits)[ts.rows, ts.pos]
    return jnp.take_along_axis(lp, ts.targets[:, None], axis=-1)[:, 0]


@highest
def token_grads(params, ts: TokenSet, *, net: Net, chunk: int = 16):
    """``∇θ log p`` of every token of ``ts``: a params-shaped tree with a leading axis of size n."""
    mask = ts.attention_mask
    rows = (ts.tokens[ts.rows], None if mask is None else mask[ts.rows], ts.pos)
    grad = jax.grad(functools.partial(_row_logprob, net=net))
    return jax.lax.map(lambda r: grad(params, *r), rows, batch_size=chunk)


def _flat_blocks(grads) -> dict[tuple, Array]:
    flat = jax.tree_util.tree_flatten_with_path(grads)[0]
    return {leaf_path(k): x.reshape(x.shape[0], -1) for k, x in flat}


@highest
def block_grams(grads_o, grads_u) -> dict[tuple, Float[Array, "o u"]]:
    """``{path: ⟨∇ log p_o, ∇ log p_u⟩ restricted to that parameter}`` for every pair."""
    bo, bu = _flat_blocks(grads_o), _flat_blocks(grads_u)
    return {p: jnp.einsum("op,up->ou", bo[p], bu[p]) for p in bo}


def scope_sum(grams: dict[tuple, Array], roles: dict[tuple, str], scope: str) -> Float[Array, "o u"]:
    """``⟨∇ log p_o, ∇ log p_u⟩`` over the parameters of ``scope`` (:data:`SCOPES`)."""
    if scope not in SCOPE_ROLES:
        raise ValueError(f"unknown scope {scope!r}; choose from {SCOPES}")
    keep = [g for p, g in grams.items() if roles[p] in SCOPE_ROLES[scope]]
    if not keep:
        raise ValueError(f"scope {scope!r} selects no parameter")
    return functools.reduce(jnp.add, keep)


def first_order_exact(grams, roles, scope: str, eta: float) -> Float[Array, "o u"]:
    """``η⟨∇θ log p_o, ∇θ log p_u⟩`` over ``scope``."""
    return eta * scope_sum(grams, roles, scope)


def roles_for(params, net: Net) -> dict[tuple, str]:
    return param_roles(params, net.cfg)


@highest
def one_step_change(params, obs: TokenSet, grads_u, eta, *, net: Net) -> dict[str, Array]:
    """The actual change of every observed token after a single-token SGD step on each update token.

    Args:
        params: θ.
        obs: the observed tokens o.
        grads_u: ``∇θ log p_u`` of the update tokens (leading axis n_u, from :func:`token_grads`).
        eta: the SGD step η (a Python float or a traced scalar).

    Returns:
        ``delta_logp`` and ``delta_p`` (``[n_o, n_u]``), ``logp`` (``[n_o]``, at θ) and ``noise`` (``[n_o, n_u]``:
        the same re-score with a zero step minus the plain score, the rounding floor of ``delta_logp``).
    """
    base = token_logprobs(params, obs, net=net)
    steps = jnp.stack([jnp.asarray(eta, base.dtype), jnp.zeros((), base.dtype)])

    def one(g_u):
        def moved(step):
            return token_logprobs(jax.tree.map(lambda p, g: p + (step * g).astype(p.dtype), params, g_u), obs, net=net)

        return jax.vmap(moved)(steps)  # [2, n_o]: the η step and the zero step

    after, zero = jnp.moveaxis(jax.lax.map(one, grads_u), 0, -1)  # each [n_o, n_u]
    return {"delta_logp": after - base[:, None], "delta_p": jnp.exp(after) - jnp.exp(base)[:, None],
            "logp": base, "noise": zero - base[:, None]}


def tied_decomposition(grads_o, grads_u, cfg_untied) -> dict[str, Float[Array, "o u"]]:
    """Shared-tensor terms of a tied head, from the gradients of its *functionally untied* copy (spec §3.2).

    With ``out`` the gradient of the separate readout copy (as ``[V, d]``) and ``in`` that of the input embedding,
    the literal shared-tensor gradient is ``out + in``, so its inner product is
    ``ch1 (out·out) + tied_in_in + tied_out_in + tied_in_out``. The extras are reported separately and never
    added to CH1 + CH2 (pitfall 7).
    """
    n = names(cfg_untied)

    def parts(grads):
        out = jnp.swapaxes(grads[n["head"]]["kernel"][...], 1, 2)  # [n, d, V] -> [n, V, d]
        return out.reshape(out.shape[0], -1), grads[n["embed"]]["embedding"][...].reshape(out.shape[0], -1)

    (oo, io), (ou, iu) = parts(grads_o), parts(grads_u)
    def dot(a, b):
        return jnp.einsum("op,up->ou", a, b)
    with jax.default_matmul_precision("highest"):
        terms = {"ch1": dot(oo, ou), "tied_in_in": dot(io, iu), "tied_out_in": dot(oo, iu),
                 "tied_in_out": dot(io, ou)}
    terms["literal"] = terms["ch1"] + terms["tied_in_in"] + terms["tied_out_in"] + terms["tied_in_out"]
    return terms
