"""The ``attention_kind`` option: the softmax path unchanged bit for bit, the theory's causal linear attention,
config validation and the config.json round trip."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cfka_jax.models import layers
from cfka_jax.models.pythia import PythiaConfig, PythiaModel
from cfka_jax.models.qwen import QwenConfig, QwenModel
from tests.tolerances import F32

F32_ = jnp.float32


def _qkv(key, b=2, s=7, n=6, k=2, h=4):
    kq, kk, kv = jax.random.split(key, 3)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((s, s), bool)), (b, s, s)).at[1, :, 0].set(False)
    return (jax.random.normal(kq, (b, s, n, h)), jax.random.normal(kk, (b, s, k, h)),
            jax.random.normal(kv, (b, s, k, h)), mask)


def _softmax_as_before(q, k, v, mask):
    """The softmax path exactly as it was before ``attention_kind`` existed (git HEAD at the change)."""
    b, s, n, h = q.shape
    kv = k.shape[2]
    logits = jnp.einsum("bskgh,btkh->bkgst", q.astype(F32_).reshape(b, s, kv, n // kv, h), k.astype(F32_))
    logits = jnp.where(mask[:, None, None, :, :], logits * F32_(h**-0.5), jnp.finfo(F32_).min)
    probs = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bkgst,btkh->bskgh", probs.astype(v.dtype), v)
    return out.reshape(b, s, n, h), probs.reshape(b, n, s, -1)


def test_softmax_path_is_bit_identical(key):
    args = _qkv(key)
    got = jax.jit(lambda *a: layers.attention(*a, return_probs=True))(*args)
    want = jax.jit(_softmax_as_before)(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_linear_attention_is_the_masked_bilinear_form(key):
    q, k, v, mask = _qkv(key)
    out, w = jax.jit(lambda *a: layers.attention(*a, return_probs=True, kind="linear"))(q, k, v, mask)
    qn, kn, vn, m = (np.asarray(x, np.float64) for x in (q, k, v, mask))
    group = q.shape[2] // k.shape[2]
    for n in range(q.shape[2]):
        scores = np.einsum("bsh,bth->bst", qn[:, :, n], kn[:, :, n // group]) / np.sqrt(q.shape[3]) * m
        np.testing.assert_allclose(w[:, n], scores, rtol=0, atol=F32.op_atol)
        np.testing.assert_allclose(out[:, :, n], np.einsum("bst,bth->bsh", scores, vn[:, :, n // group]), rtol=0,
                                   atol=F32.op_atol)


def test_unknown_kind_raises(key):
    with pytest.raises(ValueError, match="attention kind"):
        layers.attention(*_qkv(key), kind="cosine")


def _tiny(kind: str, family: str):
    if family == "qwen":
        cfg = QwenConfig(model_type="qwen2", vocab_size=17, hidden_size=12, intermediate_size=10, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, attention_kind=kind)
        return QwenModel(cfg, rngs=nnx.Rngs(0))
    cfg = PythiaConfig(vocab_size=17, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
                       intermediate_size=10, rotary_pct=0.5, attention_kind=kind)
    return PythiaModel(cfg, rngs=nnx.Rngs(0))


def _forward(model):
    """``jit(tokens -> (logits, attentions))`` of the model (split once, merged inside the jitted function)."""
    graphdef, state = nnx.split(model)

    def fn(state, tokens):
        out = nnx.merge(graphdef, state)(tokens, return_attn=True)
        return out.logits, out.attentions

    return lambda tokens: jax.jit(fn)(state, tokens)


@pytest.mark.parametrize("family", ["qwen", "pythia"])
def test_linear_port_is_causal_and_differs_from_softmax(family, key):
    fwd = _forward(_tiny("linear", family))
    tokens = jax.random.randint(key, (2, 9), 0, 17)
    later = tokens.at[:, 5:].set((tokens[:, 5:] + 3) % 17)
    (logits, weights), (logits_later, _) = fwd(tokens), fwd(later)
    np.testing.assert_array_equal(logits[:, :5], logits_later[:, :5])
    upper = np.triu_indices(9, 1)
    assert all(np.all(np.asarray(w)[:, :, upper[0], upper[1]] == 0) for w in weights)
    assert not np.allclose(logits, _forward(_tiny("softmax", family))(tokens)[0], atol=F32.model_atol)


def test_linear_port_cache_matches_full_forward(key):
    graphdef, state = nnx.split(_tiny("linear", "qwen"))
    tokens = jax.random.randint(key, (2, 8), 0, 17)

    @jax.jit
    def two_calls(state, tokens):
        model = nnx.merge(graphdef, state)
        first = model(tokens[:, :5], cache=model.init_cache(2, 8))
        second = model(tokens[:, 5:], cache=first.cache)
        return jnp.concatenate([first.logits, second.logits], axis=1), model(tokens).logits

    cached, full = two_calls(state, tokens)
    np.testing.assert_allclose(cached, full, rtol=0, atol=F32.model_atol)


@pytest.mark.parametrize("cls,base", [
    (QwenConfig, dict(model_type="qwen2", vocab_size=17, hidden_size=12, intermediate_size=10, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2)),
    (PythiaConfig, dict(vocab_size=17, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=10, rotary_pct=0.5)),
])
def test_config_field_and_round_trip(cls, base):
    with pytest.raises(ValueError, match="attention_kind"):
        cls(**base, attention_kind="cosine")
    soft, lin = cls(**base), cls(**base, attention_kind="linear")
    assert "attention_kind" not in soft.to_hf_config()  # the HF field set of a softmax port is unchanged
    assert lin.to_hf_config()["attention_kind"] == "linear"
    assert cls.from_hf_config(lin.to_hf_config()) == lin
    assert cls.from_hf_config(soft.to_hf_config()) == soft
    assert dataclasses.replace(lin, attention_kind="softmax") == soft
    with pytest.raises(ValueError, match="attention_kind"):
        cls.from_hf_config({**lin.to_hf_config(), "attention_kind": 1})
