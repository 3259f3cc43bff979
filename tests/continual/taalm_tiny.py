"""A tiny pure-jnp θ/φ pair for the TAALM meta-gradient tests (float64-capable; no NNX, no float32 casts).

θ: embeddings → causal prefix mean → tanh → a LoRA-style residual ``h + (h @ a) @ b`` → tanh(· @ w) → head.
φ: its own embeddings → causal prefix mean → tanh(· @ w) → scalar head → sigmoid. Prime sizes.
"""

import jax
import jax.numpy as jnp

from cfka_jax.continual.taalm.meta import ModelFns, Operands

V, D, R, S = 7, 5, 3, 6


def _prefix_mean(e_BSD, mask_BS):
    m = mask_BS.astype(e_BSD.dtype)[..., None]
    return jnp.cumsum(e_BSD * m, axis=1) / jnp.maximum(jnp.cumsum(m, axis=1), jnp.asarray(1.0, e_BSD.dtype))


def logits(theta, frozen, batch, key=None):
    e = frozen["emb"][batch["tokens"]]
    h = jnp.tanh(_prefix_mean(e, batch["attention_mask"]) + e)
    h = h + (h @ theta["a"]) @ theta["b"]
    return jnp.tanh(h @ frozen["w"]) @ frozen["head"]


def weights(phi, frozen, batch, key=None):
    e = frozen["emb"][batch["tokens"]]
    h = jnp.tanh(_prefix_mean(e, batch["attention_mask"]) @ phi["w"] + e)
    return jax.nn.sigmoid(h @ phi["head_w"] + phi["head_b"])


FNS = ModelFns(logits, weights)


def params(key, dtype, *, b_zero=False):
    ks = jax.random.split(key, 8)
    n = lambda k, shape, s=0.5: (s * jax.random.normal(k, shape)).astype(dtype)  # noqa: E731
    theta0 = {"a": n(ks[0], (D, R)), "b": jnp.zeros((R, D), dtype) if b_zero else n(ks[1], (R, D))}
    theta_frozen = {"emb": n(ks[2], (V, D), 1.0), "w": n(ks[3], (D, D), 0.7), "head": n(ks[4], (D, V), 1.5)}
    phi = {"w": n(ks[5], (D, D)), "head_w": n(ks[6], (D,)), "head_b": jnp.asarray(0.5, dtype)}
    phi_frozen = {"emb": n(ks[7], (V, D), 1.0)}
    return phi, Operands(phi_frozen, theta0, theta_frozen)


def pair(key, *, p=None):
    """One (D, T_D) pair, or a meta-batch of ``p`` pairs (leading axis), with a padded D and an object span."""
    def one(k):
        k1, k2 = jax.random.split(k)
        d_tok = jax.random.randint(k1, (S,), 0, V)
        t_tok = jax.random.randint(k2, (S,), 0, V)
        d_att = jnp.array([1, 1, 1, 1, 1, 0], jnp.int32)
        t_att = jnp.ones((S,), jnp.int32)
        f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
        d = {"tokens": d_tok, "attention_mask": d_att, "target_mask": f([0, 1, 1, 1, 1, 0]),
             "object_mask": f([0, 0, 0, 1, 1, 0])}
        t = {"tokens": t_tok, "attention_mask": t_att, "target_mask": f([0, 1, 1, 1, 1, 1]),
             "object_mask": f([0, 0, 0, 0, 1, 1])}
        return {"d": d, "t": t}

    if p is None:
        return jax.tree.map(lambda x: x[None], one(key))
    return jax.vmap(one)(jax.random.split(key, p))
