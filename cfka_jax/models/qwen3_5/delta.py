"""The gated delta rule (Gated DeltaNet, Yang, Kautz & Hatamizadeh 2024) and the causal depthwise short
convolution of Qwen3.5's linear-attention layers: pure functions, float32 inside.

Letters (``cfka_jax.shapes`` plus this module's own): B batch, S positions, U value heads, G key heads (U a multiple
of G; value head u reads key head ``u // (U / G)``), Y key head dim, W value head dim, Q chunk length, Z conv
kernel width, C conv channels.

The recurrence, per batch row and value head u, with key ``k_t`` (Y), query ``q_t`` (Y), value ``v_t`` (W), decay
``α_t = exp(g_t) ∈ (0, 1]`` and write strength ``β_t ∈ [0, 1]``, on the state ``S_t`` (W × Y)::

    S_t = α_t S_{t-1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ,        o_t = S_t q_t.

Equivalently ``S_t = α_t S_{t-1} + β_t (v_t − α_t S_{t-1} k_t) k_tᵀ``: the state is decayed, then corrected
towards ``v_t`` along ``k_t`` (the delta rule). Both k and q are L2-normalised per head (``eps = 1e-6`` inside the
square root, as FLA and HF) and q is scaled by ``Y^-1/2`` first. The state is stored transposed, ``M = Sᵀ`` with
shape ``B U Y W`` (HF's layout).

Two forms compute the same numbers:

* :func:`recurrent` — one step per position (``lax.scan`` over S): the decoding form.
* :func:`chunked` — the training form. Within a chunk of Q positions starting from state ``M_0``, with
  ``γ_t = Σ_{j≤t} g_j`` (cumulative log decay) the corrections ``u_t = β_t (v_t − α_t k_tᵀ M_{t-1})`` solve the
  unit lower-triangular system ``(I + A) U = diag(β) V − diag(β e^γ) K M_0``, ``A_tj = β_t e^{γ_t − γ_j} k_t·k_j``
  for j < t; then ``o_t = e^{γ_t} q_tᵀ M_0 + Σ_{j≤t} e^{γ_t − γ_j} (q_t·k_j) u_j`` and ``M_Q = e^{γ_Q} M_0 +
  Σ_j e^{γ_Q − γ_j} k_j u_jᵀ``. Everything but the carry of ``M`` across chunks is parallel; ``lax.scan`` runs
  over the S / Q chunks. The sequence is padded to a multiple of Q with ``β = 0, g = 0`` (no effect on the state).

A position with ``β = 0`` and ``g = 0`` leaves the state unchanged: that is how padding tokens are skipped
(:func:`mask_steps`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cfka_jax.shapes import Array, Float

F32 = jnp.float32
L2_EPS = 1e-6


def l2_normalize(x: Float[Array, "... Y"], eps: float = L2_EPS) -> Float[Array, "... Y"]:
    """``x / sqrt(Σ x² + eps)`` over the last axis (HF ``l2norm``)."""
    return x * jax.lax.rsqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True) + eps)


def _prepare(q_BSGY, k_BSGY, v_BSUW, g_BSU, beta_BSU):
    """float32, q/k normalised, q scaled, key heads repeated to the value heads."""
    u, g_heads = v_BSUW.shape[2], k_BSGY.shape[2]
    if u % g_heads:
        raise ValueError(f"{u} value heads are not a multiple of {g_heads} key heads")
    q = l2_normalize(q_BSGY.astype(F32))
    k = l2_normalize(k_BSGY.astype(F32))
    q = q * F32(q.shape[-1] ** -0.5)
    q, k = (jnp.repeat(x, u // g_heads, axis=2) for x in (q, k))
    return q, k, v_BSUW.astype(F32), g_BSU.astype(F32), beta_BSU.astype(F32)


def _zero_state(q_BSUY, v_BSUW):
    b, _, u, y = q_BSUY.shape
    return jnp.zeros((b, u, y, v_BSUW.shape[-1]), F32)


def recurrent(
    q_BSGY: Float[Array, "B S G Y"],
    k_BSGY: Float[Array, "B S G Y"],
    v_BSUW: Float[Array, "B S U W"],
    g_BSU: Float[Array, "B S U"],
    beta_BSU: Float[Array, "B S U"],
    state_BUYW: Float[Array, "B U Y W"] | None = None,
) -> tuple[Float[Array, "B S U W"], Float[Array, "B U Y W"]]:
    """The gated delta rule one position at a time (module docstring), from ``state`` (zeros when None).

    Returns:
        ``(o_BSUW, final state M_BUYW)``, both float32.
    """
    q, k, v, g, beta = _prepare(q_BSGY, k_BSGY, v_BSUW, g_BSU, beta_BSU)
    m0 = _zero_state(q, v) if state_BUYW is None else state_BUYW.astype(F32)

    def step(m_BUYW, xs):
        q_BUY, k_BUY, v_BUW, g_BU, beta_BU = xs
        m_BUYW = m_BUYW * jnp.exp(g_BU)[:, :, None, None]
        mem_BUW = jnp.einsum("buy,buyw->buw", k_BUY, m_BUYW)
        delta_BUW = (v_BUW - mem_BUW) * beta_BU[:, :, None]
        m_BUYW = m_BUYW + k_BUY[:, :, :, None] * delta_BUW[:, :, None, :]
        return m_BUYW, jnp.einsum("buy,buyw->buw", q_BUY, m_BUYW)

    xs = tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v, g, beta))
    m, o_SBUW = jax.lax.scan(step, m0, xs)
    return jnp.moveaxis(o_SBUW, 0, 1), m


def chunked(
    q_BSGY: Float[Array, "B S G Y"],
    k_BSGY: Float[Array, "B S G Y"],
    v_BSUW: Float[Array, "B S U W"],
    g_BSU: Float[Array, "B S U"],
    beta_BSU: Float[Array, "B S U"],
    state_BUYW: Float[Array, "B U Y W"] | None = None,
    *,
    chunk_size: int = 64,
) -> tuple[Float[Array, "B S U W"], Float[Array, "B U Y W"]]:
    """The gated delta rule chunk by chunk (module docstring): parallel within a chunk of ``chunk_size``
    positions, ``lax.scan`` over chunks; equal to :func:`recurrent` up to float32 rounding.

    Returns:
        ``(o_BSUW, final state M_BUYW)``, both float32.

    Raises:
        ValueError: ``chunk_size < 1``.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    q, k, v, g, beta = _prepare(q_BSGY, k_BSGY, v_BSUW, g_BSU, beta_BSU)
    m0 = _zero_state(q, v) if state_BUYW is None else state_BUYW.astype(F32)
    b, s, u, _ = q.shape
    w = v.shape[-1]
    pad = (-s) % chunk_size
    n = (s + pad) // chunk_size

    def chunks(x):  # B S U ... -> n B U Q ...
        x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        x = x.reshape(b, n, chunk_size, *x.shape[2:])
        return jnp.moveaxis(jnp.moveaxis(x, 1, 0), 2, 3)

    q_NBUQY, k_NBUQY, v_NBUQW, g_NBUQ, beta_NBUQ = (chunks(x) for x in (q, k, v, g, beta))
    gamma = jnp.cumsum(g_NBUQ, axis=-1)
    lead = (1,) * (gamma.ndim - 1)  # broadcast a Q × Q matrix over the leading n B U axes
    lower_QQ = jnp.tril(jnp.ones((chunk_size, chunk_size), bool)).reshape(lead + (chunk_size, chunk_size))
    diff = gamma[..., :, None] - gamma[..., None, :]
    decay_QQ = jnp.exp(jnp.where(lower_QQ, diff, -jnp.inf))  # e^{γ_t − γ_j} for j <= t, else 0
    kk = jnp.einsum("nbuty,nbujy->nbutj", k_NBUQY, k_NBUQY)
    strict_QQ = jnp.tril(jnp.ones((chunk_size, chunk_size), bool), -1).reshape(lower_QQ.shape)
    a = jnp.where(strict_QQ, beta_NBUQ[..., :, None] * kk * decay_QQ, F32(0.0))
    eye = jnp.eye(chunk_size, dtype=F32).reshape(lower_QQ.shape)
    rhs = jnp.concatenate([beta_NBUQ[..., None] * v_NBUQW,
                           (beta_NBUQ * jnp.exp(gamma))[..., None] * k_NBUQY], axis=-1)
    sol = jax.scipy.linalg.solve_triangular(eye + a, rhs, lower=True, unit_diagonal=True)
    u_v, u_k = sol[..., :w], sol[..., w:]  # U = u_v − u_k M_0
    qk = jnp.einsum("nbuty,nbujy->nbutj", q_NBUQY, k_NBUQY) * decay_QQ
    q_decayed = jnp.exp(gamma)[..., None] * q_NBUQY
    k_to_end = jnp.exp(gamma[..., -1:] - gamma)[..., None] * k_NBUQY
    end_decay = jnp.exp(gamma[..., -1])[..., None, None]

    def step(m_BUYW, xs):
        u_v, u_k, qk, q_dec, k_end, end = xs
        corr_BUQW = u_v - jnp.einsum("buqy,buyw->buqw", u_k, m_BUYW)
        o_BUQW = jnp.einsum("buqy,buyw->buqw", q_dec, m_BUYW) + jnp.einsum("butj,bujw->butw", qk, corr_BUQW)
        m_BUYW = end * m_BUYW + jnp.einsum("buqy,buqw->buyw", k_end, corr_BUQW)
        return m_BUYW, o_BUQW

    m, o_NBUQW = jax.lax.scan(step, m0, (u_v, u_k, qk, q_decayed, k_to_end, end_decay))
    o_BSUW = jnp.moveaxis(o_NBUQW, 0, 1).swapaxes(2, 3).reshape(b, n * chunk_size, u, w)[:, :s]
    return o_BSUW, m


def mixing_matrix(
    q_BSGY: Float[Array, "B S G Y"],
    k_BSGY: Float[Array, "B S G Y"],
    g_BSU: Float[Array, "B S U"],
    beta_BSU: Float[Array, "B S U"],
    *,
    num_value_heads: int,
) -> Float[Array, "B U S S"]:
    """The token-mixing matrix of the gated delta rule from a zero state: ``o_t = Σ_{j≤t} A[t, j] v_j``.

    With the whole sequence as one chunk (module docstring, ``M_0 = 0``): ``U = (I + Â)⁻¹ diag(β) V`` and
    ``O = (Q Kᵀ ⊙ Γ) U``, so ``A = (Q Kᵀ ⊙ Γ) (I + Â)⁻¹ diag(β)`` with ``Γ_tj = e^{γ_t − γ_j}`` for j ≤ t (0 above)
    and ``Â_tj = β_t Γ_tj k_t·k_j`` for j < t. A is lower triangular and does not depend on v: the linear layer's
    counterpart of an attention map (the values it mixes, not softmax weights; entries may be negative).

    Returns:
        ``A_BUSS`` float32 (query position t, key position j).
    """
    u = num_value_heads
    fake_v = jnp.zeros(q_BSGY.shape[:2] + (u, 1), F32)
    q, k, _, g, beta = _prepare(q_BSGY, k_BSGY, fake_v, g_BSU, beta_BSU)
    q, k, g, beta = (jnp.moveaxis(x, 1, 2) for x in (q, k, g, beta))  # B U S ...
    s = q.shape[2]
    gamma = jnp.cumsum(g, axis=-1)
    lower = jnp.tril(jnp.ones((s, s), bool)).reshape((1, 1, s, s))
    decay = jnp.exp(jnp.where(lower, gamma[..., :, None] - gamma[..., None, :], -jnp.inf))
    strict = jnp.tril(jnp.ones((s, s), bool), -1).reshape((1, 1, s, s))
    a_hat = jnp.where(strict, beta[..., :, None] * jnp.einsum("buty,bujy->butj", k, k) * decay, F32(0.0))
    eye = jnp.eye(s, dtype=F32).reshape((1, 1, s, s))
    t_inv = jax.scipy.linalg.solve_triangular(eye + a_hat, jnp.broadcast_to(eye, a_hat.shape), lower=True,
                                              unit_diagonal=True)
    return jnp.einsum("butj,bujk->butk", jnp.einsum("buty,bujy->butj", q, k) * decay, t_inv) * beta[..., None, :]


def mask_steps(g_BSU: Float[Array, "B S U"], beta_BSU: Float[Array, "B S U"], keep_BS) -> tuple[Array, Array]:
    """``(g, β)`` set to 0 where ``keep_BS`` is false: those positions leave the state unchanged."""
    keep = keep_BS[:, :, None]
    return jnp.where(keep, g_BSU, 0.0).astype(g_BSU.dtype), jnp.where(keep, beta_BSU, 0.0).astype(beta_BSU.dtype)


def causal_conv(
    x_BSC: Float[Array, "B S C"],
    weight_ZC: Float[Array, "Z C"],
    state_BZC: Float[Array, "B Z1 C"] | None = None,
    last_B: Array | None = None,
) -> tuple[Float[Array, "B S C"], Float[Array, "B Z1 C"]]:
    """Causal depthwise convolution with SiLU, HF ``causal_conv1d_fn`` / ``_update``:
    ``out[t, c] = silu(Σ_z w[z, c] · x̃[t + z, c])`` over ``x̃ = [state; x]`` (the Z − 1 previous inputs, zeros
    when ``state`` is None), computed in the weight's dtype.

    Args:
        last_B: per row, the index in ``x`` of the last input to keep in the new state (padding after it is
            skipped); None keeps the last Z − 1 inputs of ``x̃``. −1 keeps the old state.

    Returns:
        ``(out_BSC, new state B (Z − 1) C)``: the new state is ``x̃[last + 1 : last + Z]``.
    """
    z = weight_ZC.shape[0]
    b, s, c = x_BSC.shape
    dt = weight_ZC.dtype
    prev = jnp.zeros((b, z - 1, c), dt) if state_BZC is None else state_BZC.astype(dt)
    ext_BXC = jnp.concatenate([prev, x_BSC.astype(dt)], axis=1)
    out = sum(weight_ZC[i][None, None, :] * ext_BXC[:, i:i + s] for i in range(z))
    if last_B is None:
        new_state = ext_BXC[:, s:]
    else:
        new_state = jax.vmap(lambda e, i: jax.lax.dynamic_slice_in_dim(e, i + 1, z - 1, axis=0))(ext_BXC, last_B)
    return jax.nn.silu(out).astype(x_BSC.dtype), new_state
