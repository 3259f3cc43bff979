"""Conserved quantities of the ports under gradient flow with per-block learning rates (spec §2.5, generalised).

Rescaling symmetries. If the loss is unchanged by θ_A → θ_A G, θ_B → θ_B-side G⁻¹ for G in a group acting on
parameter blocks A and B, then under gradient flow θ̇ = −η ∇ℓ with a learning rate η per parameter leaf,

    C = Σ_{leaves a ∈ A} θ_aᵀθ_a / η_a − Σ_{leaves b ∈ B} θ_b θ_bᵀ / η_b              is constant in time

for every generator of the group (the matrix form for GL(n), one scalar per independent scaling). This is
``theory/conservation.py``'s c_s = z_s²/η_Z − ‖y_s‖²/η_Y for the blocks of a multi-layer port. Families
(shapes over layers L, KV heads K, query heads N, head dim H, rotary width A, model width D, MLP width F):

* ``qk_rot`` (L, K, A/2): q and k of a head pair scaled by α and 1/α in one rotary plane (RoPE rotations commute
  with a common scale of both dims of the plane); query heads sharing a KV head scale together.
* ``qk_pass`` (L, K, A', A'), A' = H − A (partial RoPE): GL(A') on the dims RoPE leaves alone, q → qG, k → kG⁻ᵀ.
* ``vo`` (L, K, H, H): GL(H) per KV head, v → vG and the o_proj rows of every query head reading it → G⁻¹(·).
* ``norm_attn`` / ``norm_mlp`` (L, D), ``norm_final`` (D,) (untied heads only): a norm's scale (and bias) on
  channel d against row d of every linear layer it feeds.
* ``mlp`` (L, F): SwiGLU up_proj column (and bias) f against down_proj row f; for ``hidden_act="relu"`` the first MLP layer's
  column (and bias) f against the second's row f (positive homogeneity). GELU/SiLU gates have no such symmetry.
* Qwen3 (per-head RMSNorm on q and k): ``qk_norm`` (L, H/2) q_norm against k_norm scales per rotary plane, and
  ``q_head`` (L, N) / ``k_head`` (L, K) the squared norm of each head's projection alone (scale-invariant blocks:
  the gradient is orthogonal to the block, so ‖θ‖² is conserved by itself).
* linear attention (``attention_kind="linear"``, no q/k norms): ``qo`` (L, N), q of a head against its o_proj
  rows, and ``kv`` (L, K), k against v of a KV head — the output is bilinear in (q·k) and v.
* OLMo-2 (q/k RMSNorm over the whole projection, norms after the sublayers): ``qk_norm`` (L, K, H/2) the q_norm
  scales of rotary plane j of the query heads reading KV head k against the k_norm scales of that plane;
  ``q_proj`` / ``k_proj`` (L,) the whole projection alone, and ``o_proj`` / ``down_proj`` (L,) likewise, since each
  feeds an RMSNorm (scale-invariant blocks); no ``norm_attn`` / ``norm_mlp``, whose norms now follow the sublayers
  and feed only the residual. The scale-invariant blocks (here and Qwen3's) are exact as the norm's ε → 0: the
  ε in ``rsqrt(mean(x²) + ε)`` leaves a relative drift of order ε / mean(x²).
* Qwen3.5 (:func:`_hybrid_invariants`; its RMSNorms are zero-centred, gain γ = 1 + w, and dγ/dt = dw/dt, so each
  norm family holds with γ in place of a scale): over every layer ``norm_attn`` (γ of ``input_layernorm`` against
  the rows of q/k/v_proj in a full layer, of in_proj_qkv/z/a/b in a linear one), ``norm_mlp``, ``mlp``; over the
  full layers ``qk_norm`` (A/2) the q_norm against k_norm gains per rotary plane and ``qk_pass_norm`` (H − A) per
  pass-through dim, ``q_head`` (N: the q half of each head's q_proj columns, which feeds the per-head norm;
  the gate half does not) and ``k_head`` (K), ``vo_diag`` (K, H) v's dim h of a KV head against o_proj row h of
  every query head reading it (the output gate σ(gate) multiplies each dim on its own, leaving the diagonal of
  GL(H)); over the linear layers ``gated_norm`` (W) the gated norm's weight (a plain gain) on dim j against
  out_proj row j of every value head. The short convolution (SiLU), the decay (softplus, exp) and β (sigmoid)
  are not homogeneous: no family there.
* OLMo (parameter-free LayerNorms): no norm families; with ``clip_qkv`` set no q/k, ``vo``, ``qo`` or ``kv``
  family either (the clamp is not homogeneous), leaving ``mlp``.

Biases of the scaled output channels scale with their kernels and join the same side; biases after the scaled
map (o_proj, down_proj, dense) do not. Discrete SGD conserves C up to O(η²) per step; weight decay λ (gradient
ℓ + λ‖θ‖²/2 with the same per-leaf rates) gives dC/dt = −2λ (Σ_A θᵀθ − Σ_B θθᵀ), the unit-rate value of C.
Adam's per-coordinate normalisation breaks every family (``proofs_check/check_port_invariants.py``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax.numpy as jnp
from flax import nnx

from cfka_jax.models import family
from cfka_jax.models.family import Traits
from cfka_jax.shapes import Array, Float

Rates = Callable[[str], float] | None
"""η of a parameter leaf from its path ('layers/0/self_attn/q_proj/kernel'); None: every η = 1."""


class Invariant(NamedTuple):
    """A family's conserved value C and the size of its terms (the same sum with + between the sides)."""

    value: Array
    scale: Array


class _Terms:
    """Σ_A − Σ_B accumulated with the sizes Σ_A + Σ_B."""

    def __init__(self):
        self.a, self.b = 0.0, 0.0

    def add(self, side: str, x):
        setattr(self, side, getattr(self, side) + x)

    def done(self) -> Invariant:
        return Invariant(self.a - self.b, self.a + self.b)


def _tree(params) -> dict:
    return nnx.to_pure_dict(params) if isinstance(params, nnx.State) else params


class _Layer:
    """Leaves of one block with their rates: ``get('self_attn', 'q_proj', 'kernel') -> (array, η)``."""

    def __init__(self, tree: dict, prefix: tuple, index, rates: Rates):
        self.tree, self.prefix, self.index, self.rates = tree, prefix, index, rates

    def get(self, *path):
        node = self.tree
        for k in self.prefix + path:
            node = node[k]
        node = node if self.index is None else node[self.index]
        rate = 1.0 if self.rates is None else self.rates("/".join(str(k) for k in self.prefix + path))
        return node, rate

    def has(self, *path) -> bool:
        node = self.tree
        for k in self.prefix + path:
            if k not in node:
                return False
            node = node[k]
        return True


def _layers(tree: dict, cfg, rates: Rates) -> list[_Layer]:
    if cfg.scan_layers:
        return [_Layer(tree, ("layers",), i, rates) for i in range(cfg.num_hidden_layers)]
    return [_Layer(tree, ("layers", i), None, rates) for i in range(cfg.num_hidden_layers)]


class _Attn(NamedTuple):
    """One block's attention weights in head layout, each with its rate (bias None when absent)."""

    q: tuple            # (D, N, H)
    qb: tuple | None    # (N, H)
    k: tuple            # (D, K, H)
    kb: tuple | None
    v: tuple            # (D, K, H)
    vb: tuple | None
    o: tuple            # (N, H, D)
    rows: list          # kernels fed by the attention norm, (D, ·) each, with rates


def _separate_attn(layer: _Layer, cfg, t: Traits) -> _Attn:
    """``self_attn.{q,k,v,o}_proj`` (Qwen, Llama)."""
    n, k, h = cfg.num_attention_heads, t.kv_heads, t.head_dim
    parts = {}
    for name, heads in (("q", n), ("k", k), ("v", k)):
        w, eta = layer.get("self_attn", f"{name}_proj", "kernel")
        parts[name] = (w.reshape(w.shape[0], heads, h), eta)
        b = layer.get("self_attn", f"{name}_proj", "bias") if layer.has("self_attn", f"{name}_proj", "bias") else None
        parts[name + "b"] = None if b is None else (b[0].reshape(heads, h), b[1])
    o, eta_o = layer.get("self_attn", "o_proj", "kernel")
    rows = [layer.get("self_attn", f"{x}_proj", "kernel") for x in "qkv"]
    return _Attn(parts["q"], parts["qb"], parts["k"], parts["kb"], parts["v"], parts["vb"],
                 (o.reshape(n, h, -1), eta_o), rows)


def _fused_attn(layer: _Layer, cfg, t: Traits) -> _Attn:
    """``attention.query_key_value`` blocked ``[Q | K | V]`` and ``attention.dense`` (Pythia)."""
    n, h = cfg.num_attention_heads, t.head_dim
    w, eta = layer.get("attention", "query_key_value", "kernel")
    w3 = w.reshape(w.shape[0], 3, n, h)
    b3 = None
    if layer.has("attention", "query_key_value", "bias"):
        b, eta_b = layer.get("attention", "query_key_value", "bias")
        b3 = [(b.reshape(3, n, h)[j], eta_b) for j in range(3)]
    o, eta_o = layer.get("attention", "dense", "kernel")
    bias = (lambda j: None) if b3 is None else (lambda j: b3[j])
    return _Attn((w3[:, 0], eta), bias(0), (w3[:, 1], eta), bias(1), (w3[:, 2], eta), bias(2),
                 (o.reshape(n, h, -1), eta_o), [(w, eta)])


def _sq(x: tuple | None, spec: str):
    """Σ of the squared entries of a weight over the einsum ``spec`` divided by its rate (0 for None)."""
    return 0.0 if x is None else jnp.einsum(spec, x[0], x[0]) / x[1]


def _grouped(x: tuple | None, kv_heads: int):
    """(…, N, H) → (…, K, G, H): query heads grouped by the KV head they read."""
    if x is None:
        return None
    a = x[0]
    return a.reshape(a.shape[:-2] + (kv_heads, a.shape[-2] // kv_heads, a.shape[-1])), x[1]


def _qk(att: _Attn, kv_heads: int, rotary: int) -> dict[str, Invariant]:
    """``qk_rot`` (K, A/2) and, with partial RoPE, ``qk_pass`` (K, A', A')."""
    q, qb = _grouped(att.q, kv_heads), _grouped(att.qb, kv_heads)
    gram_q = _sq(q, "dkgh,dkgi->khi") + _sq(qb, "kgh,kgi->khi")
    gram_k = _sq(att.k, "dkh,dki->khi") + _sq(att.kb, "kh,ki->khi")
    dq, dk = jnp.diagonal(gram_q, axis1=-2, axis2=-1), jnp.diagonal(gram_k, axis1=-2, axis2=-1)
    half = rotary // 2
    pq, pk = dq[:, :half] + dq[:, half:rotary], dk[:, :half] + dk[:, half:rotary]
    out = {"qk_rot": Invariant(pq - pk, pq + pk)}
    if rotary < gram_q.shape[-1]:
        mq, mk = gram_q[:, rotary:, rotary:], gram_k[:, rotary:, rotary:]
        out["qk_pass"] = Invariant(mq - mk, jnp.abs(mq) + jnp.abs(mk))
    return out


def _vo(att: _Attn, kv_heads: int) -> Invariant:
    gram_v = _sq(att.v, "dkh,dki->khi") + _sq(att.vb, "kh,ki->khi")
    o = _grouped((jnp.moveaxis(att.o[0], -1, 0), att.o[1]), kv_heads)  # (D, K, G, H)
    gram_o = _sq(o, "dkgh,dkgi->khi")
    return Invariant(gram_v - gram_o, jnp.abs(gram_v) + jnp.abs(gram_o))


def _norm_vs_rows(norm: list[tuple], rows: list[tuple]) -> Invariant:
    t = _Terms()
    for p in norm:
        t.add("a", _sq(p, "d,d->d"))
    for w in rows:
        t.add("b", _sq(w, "df,df->d"))
    return t.done()


def _linear_extras(att: _Attn, kv_heads: int) -> dict[str, Invariant]:
    t_qo, t_kv = _Terms(), _Terms()
    t_qo.add("a", _sq(att.q, "dnh,dnh->n") + _sq(att.qb, "nh,nh->n"))
    t_qo.add("b", _sq(att.o, "nhd,nhd->n"))
    t_kv.add("a", _sq(att.k, "dkh,dkh->k") + _sq(att.kb, "kh,kh->k"))
    t_kv.add("b", _sq(att.v, "dkh,dkh->k") + _sq(att.vb, "kh,kh->k"))
    return {"qo": t_qo.done(), "kv": t_kv.done()}


def _qk_norm(layer: _Layer, att: _Attn) -> dict[str, Invariant]:
    (gq, eq), (gk, ek) = layer.get("self_attn", "q_norm", "scale"), layer.get("self_attn", "k_norm", "scale")
    half = gq.shape[0] // 2
    sq, sk = gq**2 / eq, gk**2 / ek
    pq, pk = sq[:half] + sq[half:], sk[:half] + sk[half:]
    q_head = _sq(att.q, "dnh,dnh->n") + _sq(att.qb, "nh,nh->n")
    k_head = _sq(att.k, "dkh,dkh->k") + _sq(att.kb, "kh,kh->k")
    return {"qk_norm": Invariant(pq - pk, pq + pk), "q_head": Invariant(q_head, q_head),
            "k_head": Invariant(k_head, k_head)}


def _mlp(layer: _Layer, t: Traits) -> dict[str, Invariant]:
    terms = _Terms()
    if t.mlp == "two_layer":
        if t.hidden_act != "relu":
            return {}
        terms.add("a", _sq(layer.get("mlp", "dense_h_to_4h", "kernel"), "df,df->f")
                  + _sq(layer.get("mlp", "dense_h_to_4h", "bias"), "f,f->f"))
        terms.add("b", _sq(layer.get("mlp", "dense_4h_to_h", "kernel"), "fd,fd->f"))
    else:
        terms.add("a", _sq(layer.get("mlp", "up_proj", "kernel"), "df,df->f"))
        if t.mlp_bias:  # Llama's optional MLP biases: up_proj's scales with its column, down_proj's does not
            terms.add("a", _sq(layer.get("mlp", "up_proj", "bias"), "f,f->f"))
        terms.add("b", _sq(layer.get("mlp", "down_proj", "kernel"), "fd,fd->f"))
    return {"mlp": terms.done()}


def _qk_proj_norm(layer: _Layer, att: _Attn, kv_heads: int) -> dict[str, Invariant]:
    """OLMo-2's whole-projection q/k norms: ``qk_norm`` (K, H/2), the q_norm scales of rotary plane j of every
    query head of KV head k against the k_norm scales of that plane; ``q_proj`` / ``k_proj`` (scalars), the whole
    projection (kernel and bias) as one scale-invariant block."""
    (gq, eq), (gk, ek) = layer.get("self_attn", "q_norm", "scale"), layer.get("self_attn", "k_norm", "scale")
    h = att.k[0].shape[-1]
    half = h // 2
    sq, sk = (gq**2 / eq).reshape(kv_heads, -1, h).sum(axis=1), (gk**2 / ek).reshape(kv_heads, h)
    pq, pk = sq[:, :half] + sq[:, half:], sk[:, :half] + sk[:, half:]
    q_all = _sq(att.q, "dnh,dnh->") + _sq(att.qb, "nh,nh->")
    k_all = _sq(att.k, "dkh,dkh->") + _sq(att.kb, "kh,kh->")
    return {"qk_norm": Invariant(pq - pk, pq + pk), "q_proj": Invariant(q_all, q_all),
            "k_proj": Invariant(k_all, k_all)}


def _normed_outputs(layer: _Layer, att: _Attn) -> dict[str, Invariant]:
    """Post-norm blocks (OLMo-2): o_proj and down_proj feed an RMSNorm, so each (kernel and the bias of its
    outputs) is a scale-invariant block whose squared norm is conserved by itself."""
    out = {}
    for name, kernel, bias in (("o_proj", att.o, ("self_attn", "o_proj", "bias")),
                               ("down_proj", layer.get("mlp", "down_proj", "kernel"), ("mlp", "down_proj", "bias"))):
        total = jnp.sum(kernel[0] ** 2) / kernel[1]
        if layer.has(*bias):
            total = total + _sq(layer.get(*bias), "d,d->")
        out[name] = Invariant(total, total)
    return out


def _norm(layer: _Layer, name: str, t: Traits) -> list[tuple]:
    return [layer.get(name, "scale")] + ([layer.get(name, "bias")] if t.norm == "layernorm" else [])


def _attention_families(layer: _Layer, att: _Attn, t: Traits) -> dict[str, Invariant]:
    """The q/k families (as the q/k norms are laid out) and ``vo``; none survives OLMo's clamp of q, k and v
    (``clip_qkv``: clamp(αx) ≠ α clamp(x) once an entry reaches the bound)."""
    if t.clip_qkv is not None:
        return {}
    if not t.qk_norm:
        out = _qk(att, t.kv_heads, t.rotary_dim)
    elif t.qk_norm_scope == "head":
        out = _qk_norm(layer, att)
    else:
        out = _qk_proj_norm(layer, att, t.kv_heads)
    out["vo"] = _vo(att, t.kv_heads)
    return out


def _block(layer: _Layer, cfg, t: Traits) -> dict[str, Invariant]:
    att = _fused_attn(layer, cfg, t) if t.qkv == "fused" else _separate_attn(layer, cfg, t)
    out = _attention_families(layer, att, t)
    if t.norm_position == "post":
        out.update(_normed_outputs(layer, att))
    elif t.norm != "nonparametric_layernorm":  # a pre-norm's scale (and bias) against the rows it feeds
        out["norm_attn"] = _norm_vs_rows(_norm(layer, "input_layernorm", t), att.rows)
        mlp_in = [layer.get("mlp", "dense_h_to_4h", "kernel")] if t.mlp == "two_layer" else [
            layer.get("mlp", "gate_proj", "kernel"), layer.get("mlp", "up_proj", "kernel")]
        out["norm_mlp"] = _norm_vs_rows(_norm(layer, "post_attention_layernorm", t), mlp_in)
    out.update(_mlp(layer, t))
    if cfg.attention_kind == "linear" and not t.qk_norm and t.clip_qkv is None:
        out.update(_linear_extras(att, t.kv_heads))
    return out


def port_invariants(params: Any, cfg, rates: Rates = None) -> dict[str, Invariant]:
    """Every conserved family of a port (Qwen2/Qwen3/Pythia/Llama/OLMo/OLMo-2/Qwen3.5; module docstring), stacked over
    layers.

    Args:
      params: the port's parameters (``nnx.split(model, nnx.Param, ...)[1]`` or its pure dict).
      cfg: the port's config (of any registered family; its layout is read from ``Family.traits``).
      rates: per-leaf learning rates (None: all 1, which is also the weight-decay drift rate / (−2λ)).

    Returns:
      ``{family: Invariant(value, scale)}``; jit- and vmap-compatible in ``params``.
    """
    fam = family.of(cfg)
    tree, t = _tree(params), fam.traits(cfg)
    if fam.name == "qwen3_5":
        return _hybrid_invariants(tree, cfg, t, fam, rates)
    blocks = [_block(layer, cfg, t) for layer in _layers(tree, cfg, rates)]
    out = {name: Invariant(*(jnp.stack([b[name][i] for b in blocks]) for i in range(2))) for name in blocks[0]}
    if not cfg.tie_word_embeddings and t.norm != "nonparametric_layernorm":
        top = _Layer(tree, (), None, rates)
        head = top.get(fam.head, "kernel")
        out["norm_final"] = _norm_vs_rows(_norm(top, fam.final_norm, t), [head])
    return out


def _gain(layer: _Layer, *path) -> tuple:
    """A zero-centred norm's gain ``1 + w`` with the rate of w."""
    w, eta = layer.get(*path, "scale")
    return 1.0 + w, eta


def _hybrid_full(layer: _Layer, cfg) -> dict[str, Invariant]:
    n, k, h, a = cfg.num_attention_heads, cfg.kv_heads, cfg.head_size, cfg.rotary_dim
    (wq, eq), (wk, ek), (wv, ev) = (layer.get("self_attn", f"{x}_proj", "kernel") for x in "qkv")
    bias = {x: layer.get("self_attn", f"{x}_proj", "bias") if layer.has("self_attn", f"{x}_proj", "bias") else None
            for x in "qkv"}
    q = (wq.reshape(wq.shape[0], n, 2 * h)[..., :h], eq)
    qb = None if bias["q"] is None else (bias["q"][0].reshape(n, 2 * h)[:, :h], bias["q"][1])
    kk, kb = (wk.reshape(wk.shape[0], k, h), ek), None if bias["k"] is None else (bias["k"][0].reshape(k, h), bias["k"][1])
    v, vb = (wv.reshape(wv.shape[0], k, h), ev), None if bias["v"] is None else (bias["v"][0].reshape(k, h), bias["v"][1])
    (gq, eqn), (gk, ekn) = _gain(layer, "self_attn", "q_norm"), _gain(layer, "self_attn", "k_norm")
    sq, sk = gq**2 / eqn, gk**2 / ekn
    half = a // 2
    pq, pk = sq[:half] + sq[half:a], sk[:half] + sk[half:a]
    q_head = _sq(q, "dnh,dnh->n") + _sq(qb, "nh,nh->n")
    k_head = _sq(kk, "dkh,dkh->k") + _sq(kb, "kh,kh->k")
    wo, eo = layer.get("self_attn", "o_proj", "kernel")
    o = _grouped((jnp.moveaxis(wo.reshape(n, h, -1), -1, 0), eo), k)  # (D, K, G, H)
    gv, go = _sq(v, "dkh,dkh->kh") + _sq(vb, "kh,kh->kh"), _sq(o, "dkgh,dkgh->kh")
    out = {"qk_norm": Invariant(pq - pk, pq + pk), "q_head": Invariant(q_head, q_head),
           "k_head": Invariant(k_head, k_head), "vo_diag": Invariant(gv - go, gv + go)}
    if a < h:
        out["qk_pass_norm"] = Invariant(sq[a:] - sk[a:], sq[a:] + sk[a:])
    return out


def _hybrid_invariants(tree: dict, cfg, t: Traits, fam, rates: Rates) -> dict[str, Invariant]:
    """Qwen3.5's families (module docstring), each stacked over the layers that have it."""
    per_layer, full, linear = [], [], []
    for i, kind in enumerate(cfg.layer_types):
        layer = _Layer(tree, ("layers", i), None, rates)
        if kind == "full_attention":
            rows = [layer.get("self_attn", f"{x}_proj", "kernel") for x in "qkv"]
            full.append(_hybrid_full(layer, cfg))
        else:
            rows = [layer.get("linear_attn", p, "kernel") for p in ("in_proj_qkv", "in_proj_z", "in_proj_a",
                                                                     "in_proj_b")]
            wo, eo = layer.get("linear_attn", "out_proj", "kernel")
            u, w = cfg.linear_num_value_heads, cfg.linear_value_head_dim
            terms = _Terms()
            terms.add("a", _sq(layer.get("linear_attn", "norm", "scale"), "j,j->j"))
            terms.add("b", _sq((wo.reshape(u, w, -1), eo), "ujd,ujd->j"))
            linear.append({"gated_norm": terms.done()})
        mlp_in = [layer.get("mlp", "gate_proj", "kernel"), layer.get("mlp", "up_proj", "kernel")]
        per_layer.append({"norm_attn": _norm_vs_rows([_gain(layer, "input_layernorm")], rows),
                          "norm_mlp": _norm_vs_rows([_gain(layer, "post_attention_layernorm")], mlp_in),
                          **_mlp(layer, t)})
    out = {}
    for blocks in (per_layer, full, linear):
        out.update({name: Invariant(*(jnp.stack([b[name][i] for b in blocks]) for i in range(2)))
                    for name in (blocks[0] if blocks else {})})
    if not cfg.tie_word_embeddings:
        top = _Layer(tree, (), None, rates)
        out["norm_final"] = _norm_vs_rows([_gain(top, fam.final_norm)], [top.get(fam.head, "kernel")])
    return out


def relative_drift(start: dict[str, Invariant], now: dict[str, Invariant]) -> dict[str, Float[Array, ""]]:
    """max |C(t) − C(0)| / max scale(0) per family (``theory/conservation.relative_drift`` at one time)."""
    return {k: jnp.max(jnp.abs(now[k].value - start[k].value)) / jnp.max(jnp.abs(start[k].scale)) for k in start}
