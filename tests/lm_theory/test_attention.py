"""Attention per token type: the gathered mass against brute force, and STOC's averaging."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.continual.stoc import mean_attention
from cfka_jax.lm_theory import biography as bio
from cfka_jax.lm_theory.attention import attention_mass, layer_attention, per_type, type_mass
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.presets import BIOGRAPHY
from tests.tolerances import F32


def _brute(abar, tokens, ex_b, ex_q, ex_start, num_tokens):
    out = np.zeros((abar.shape[0], num_tokens))
    for b, q, s in zip(ex_b, ex_q, ex_start):
        for t in range(s, q + 1):
            out[:, tokens[b, t]] += abar[:, b, q, t]
    return out


def test_type_mass_is_the_sum_over_context_positions(key):
    k1, k2 = jax.random.split(key)
    abar = np.asarray(jax.random.uniform(k1, (3, 2, 11, 11)))
    tokens = np.asarray(jax.random.randint(k2, (2, 11), 0, 7))
    ex_b, ex_q, ex_start = np.array([0, 0, 1, 1]), np.array([4, 10, 6, 2]), np.array([0, 5, 3, 2])
    valid = np.array([True, True, True, False])
    got = jax.jit(lambda *a: type_mass(*a, num_tokens=7))(abar, tokens, ex_b, ex_q, ex_start, valid)
    want = _brute(abar, tokens, ex_b[:3], ex_q[:3], ex_start[:3], 7)
    np.testing.assert_allclose(got, want, rtol=F32.exact_rtol, atol=F32.one_ulp)


def test_pooled_layers_are_stocs_average(key):
    maps = tuple(jax.nn.softmax(jax.random.normal(k, (2, 4, 6, 6)), axis=-1) for k in jax.random.split(key, 3))
    pooled = jnp.mean(jax.jit(layer_attention)(maps), axis=0)
    np.testing.assert_allclose(pooled, jax.jit(mean_attention)(maps), rtol=0, atol=F32.few_ulps)
    signed = tuple(m - 0.1 for m in maps)  # a linear port's scores: the magnitude is taken per head
    np.testing.assert_allclose(jax.jit(layer_attention)(signed)[0], jnp.mean(jnp.abs(signed[0]), axis=1), rtol=0,
                               atol=F32.few_ulps)


def test_attention_mass_of_a_port_matches_brute_force(bundle):
    model = build_model(BIOGRAPHY["smoke"], "qwen", len(bundle.tokenizer), seed=2)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    ex = bio.examples(bundle, "pt_train", bio.object_vocabulary(bundle))
    packed, _ = bundle.eval["pt_train"]
    keep = ex.chunk < 3
    got = attention_mass(graphdef, params, rest, packed, ex.chunk[keep], ex.query[keep], ex.start[keep],
                         num_tokens=len(bundle.tokenizer), batch_size=2)
    fwd = jax.jit(lambda p, t, pos: nnx.merge(graphdef, p, rest)(t, positions_BS=pos, return_attn=True).attentions)
    maps = fwd(params, jnp.asarray(packed.tokens[:3]), jnp.asarray(packed.positions[:3]))
    abar = np.asarray(jnp.stack([jnp.mean(a, axis=1) for a in maps]))
    want = _brute(abar, packed.tokens[:3], ex.chunk[keep], ex.query[keep], ex.start[keep], len(bundle.tokenizer))
    np.testing.assert_allclose(got, want, rtol=F32.exact_rtol, atol=F32.few_ulps)
    z_layers, z = per_type(got, np.where(np.arange(got.shape[1]) % 2 == 0, 2.0, 0.0))
    np.testing.assert_allclose(z, z_layers.mean(0), rtol=F32.exact_rtol)
    assert np.all(z_layers[:, 1::2] == 0)
