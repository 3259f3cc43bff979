"""Shared building blocks: RoPE, norms, masks, GQA attention and the KV-cache write, against references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.models import layers
from cfka_jax.models.outputs import KVCache
from tests.models.parity import forward
from tests.tolerances import F32

B, S, N, K, H = 2, 7, 6, 2, 10


def _rand(key, shape):
    return jax.random.normal(key, shape, jnp.float32)


def _rope_reference(x, positions, rotary_dim, theta):
    """Complex-free numpy RoPE: pairs (j, j + R/2) rotate by angle pos * theta^(-2j/R)."""
    x = np.asarray(x, np.float64)
    half = rotary_dim // 2
    freq = theta ** (-np.arange(half) * 2.0 / rotary_dim)
    ang = np.asarray(positions, np.float64)[:, :, None, None] * freq
    a, b = x[..., :half], x[..., half:rotary_dim]
    out = x.copy()
    out[..., :half] = a * np.cos(ang) - b * np.sin(ang)
    out[..., half:rotary_dim] = b * np.cos(ang) + a * np.sin(ang)
    return out


@pytest.mark.parametrize("rotary_dim", [H, 4])
def test_rope_matches_pairwise_rotation(key, rotary_dim):
    x = _rand(key, (B, S, N, H))
    positions = jnp.asarray(np.random.default_rng(0).integers(0, 50, (B, S)), jnp.int32)

    @jax.jit
    def run(x, positions):
        cos, sin = layers.rope_cos_sin(positions, layers.rope_inv_freq(rotary_dim, 100.0))
        return layers.apply_rope(x, cos, sin)

    want = _rope_reference(x, positions, rotary_dim, 100.0)
    np.testing.assert_allclose(run(x, positions), want, rtol=0, atol=F32.op_atol)
    np.testing.assert_array_equal(run(x, positions)[..., rotary_dim:], x[..., rotary_dim:])


def test_rope_scores_depend_on_relative_position_only(key):
    kq, kk = jax.random.split(key)
    q, k = _rand(kq, (1, 1, 1, H)), _rand(kk, (1, 1, 1, H))
    inv = layers.rope_inv_freq(H, 10000.0)

    @jax.jit
    def _score(m, n):
        rq = layers.apply_rope(q, *layers.rope_cos_sin(jnp.full((1, 1), m, jnp.int32), inv))
        rk = layers.apply_rope(k, *layers.rope_cos_sin(jnp.full((1, 1), n, jnp.int32), inv))
        return jnp.sum(rq * rk)

    def score(m, n):
        return float(_score(jnp.int32(m), jnp.int32(n)))

    np.testing.assert_allclose(score(5, 2), score(13, 10), atol=F32.op_atol)
    assert abs(score(5, 2) - score(5, 3)) > 10 * F32.op_atol


def test_odd_rotary_dim_rejected():
    with pytest.raises(ValueError, match="even"):
        layers.rope_inv_freq(5, 10000.0)


def test_norms_match_formulas(key):
    x = 3.0 * _rand(key, (B, S, 13)) + 1.0
    scale = jnp.linspace(0.5, 1.5, 13, dtype=jnp.float32)
    bias = jnp.linspace(-1.0, 1.0, 13, dtype=jnp.float32)
    xn, sn, bn = (np.asarray(a, np.float64) for a in (x, scale, bias))
    ln = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-5) * sn + bn
    rms = xn / np.sqrt((xn**2).mean(-1, keepdims=True) + 1e-6) * sn
    got_ln = jax.jit(layers.layer_norm, static_argnums=3)(x, scale, bias, 1e-5)
    got_rms = jax.jit(layers.rms_norm, static_argnums=2)(x, scale, 1e-6)
    np.testing.assert_allclose(got_ln, ln, atol=F32.op_atol)
    np.testing.assert_allclose(got_rms, rms, atol=F32.op_atol)


def _attention_reference(q, k, v, mask):
    """Plain MHA with KV heads repeated (HF ``repeat_kv``), float64."""
    rep = q.shape[2] // k.shape[2]
    k, v = np.repeat(np.asarray(k, np.float64), rep, axis=2), np.repeat(np.asarray(v, np.float64), rep, axis=2)
    logits = np.einsum("bsnh,btnh->bnst", np.asarray(q, np.float64), k) / np.sqrt(q.shape[-1])
    logits = np.where(np.asarray(mask)[:, None], logits, -1e30)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bnst,btnh->bsnh", probs, v), probs


def test_gqa_attention_matches_repeated_kv_reference(key):
    kq, kk, kv = jax.random.split(key, 3)
    q, k, v = _rand(kq, (B, S, N, H)), _rand(kk, (B, S, K, H)), _rand(kv, (B, S, K, H))
    mask, _, _ = layers.step_mask(B, S, jnp.asarray([[1] * S, [0, 0] + [1] * (S - 2)]), None)
    with jax.default_matmul_precision("float32"):
        out, probs = jax.jit(lambda *a: layers.attention(*a, return_probs=True))(q, k, v, mask)
    want_out, want_probs = _attention_reference(q, k, v, mask)
    rows = np.ones((B, S), bool)
    rows[1, :2] = False  # fully masked padding queries are arbitrary (uniform here), skip them
    np.testing.assert_allclose(np.asarray(out)[rows], want_out[rows], atol=F32.op_atol)
    by_query = (0, 2, 1, 3)
    np.testing.assert_allclose(
        np.transpose(probs, by_query)[rows], np.transpose(want_probs, by_query)[rows], atol=F32.op_atol
    )
    assert np.isfinite(np.asarray(out)).all()


def test_step_mask_is_slot_causal_with_padding():
    mask, write, cache = layers.step_mask(1, 3, jnp.asarray([[0, 1, 1]]), None)
    want = np.array([[[0, 0, 0], [0, 1, 0], [0, 1, 1]]], bool)
    np.testing.assert_array_equal(mask, want)
    assert write is None and cache is None


def test_step_mask_with_cache_covers_cached_keys_and_advances():
    cache = KVCache.zeros(1, 2, 6, K, H)
    _, _, cache = layers.step_mask(2, 3, jnp.asarray([[1, 1, 1], [0, 1, 1]]), cache)
    mask, write, cache = layers.step_mask(2, 2, None, cache)
    np.testing.assert_array_equal(write, [3, 3])
    np.testing.assert_array_equal(cache.end_index, [5, 5])
    np.testing.assert_array_equal(cache.valid, [[1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0]])
    np.testing.assert_array_equal(mask[1], [[0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0]])


def test_write_rows_uses_per_row_offsets():
    buf = jnp.zeros((2, 5, 1), jnp.float32)
    new = jnp.asarray([[[1.0], [2.0]], [[3.0], [4.0]]])
    out = jax.jit(layers.write_rows)(buf, new, jnp.asarray([0, 3], jnp.int32))
    np.testing.assert_array_equal(out[..., 0], [[1, 2, 0, 0, 0], [0, 0, 0, 3, 4]])


def test_norms_match_torch(key):
    torch = pytest.importorskip("torch")
    x = _rand(key, (B, S, 13))
    scale = jnp.linspace(0.5, 1.5, 13, dtype=jnp.float32)
    bias = jnp.linspace(-1.0, 1.0, 13, dtype=jnp.float32)
    t = torch.nn.functional.layer_norm(
        torch.tensor(np.asarray(x)), (13,), torch.tensor(np.asarray(scale)), torch.tensor(np.asarray(bias)), 1e-5
    )
    np.testing.assert_allclose(layers.layer_norm(x, scale, bias, 1e-5), t.numpy(), atol=F32.op_atol)


def test_step_mask_accepts_a_mask_over_all_cache_slots():
    cache = KVCache.zeros(1, 2, 6, K, H)
    _, _, cache = layers.step_mask(2, 3, jnp.asarray([[1, 1, 1], [0, 1, 1]]), cache)
    by_new, _, c1 = layers.step_mask(2, 1, jnp.ones((2, 1), jnp.int32), cache)
    by_all, _, c2 = layers.step_mask(2, 1, jnp.asarray([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0]]), cache)
    np.testing.assert_array_equal(by_new, by_all)
    np.testing.assert_array_equal(c1.valid, c2.valid)
    np.testing.assert_array_equal(c2.valid, [[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0]])


def test_cache_overflow_gives_nan_logits():
    import flax.nnx as nnx

    from cfka_jax.models import QwenConfig, QwenModel

    cfg = QwenConfig(
        model_type="qwen2", vocab_size=11, hidden_size=12, intermediate_size=7, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1,
    )
    model = QwenModel(cfg, rngs=nnx.Rngs(0))
    ok = forward(model, np.zeros((1, 3), np.int32), cache=model.init_cache(1, 4))
    assert np.isfinite(np.asarray(ok.logits)).all()
    over = forward(model, np.zeros((1, 2), np.int32), cache=ok.cache)
    assert np.isnan(np.asarray(over.logits)).all()


@pytest.mark.parametrize("stacked", [True, False])
def test_layer_kv_writes_only_its_layer_rows_at_per_row_offsets(stacked):
    cache = KVCache.zeros(3, 2, 5, K, H, stacked=stacked)
    new = _rand(jax.random.key(1), (2, 2, K, H))
    kv = layers.LayerKV(cache.k, cache.v, layer=1).write(new, -new, jnp.asarray([0, 3], jnp.int32))
    assert isinstance(kv.k, tuple) == (not stacked)
    want = np.zeros((2, 5, K, H), np.float32)
    want[0, 0:2], want[1, 3:5] = new[0], new[1]
    np.testing.assert_array_equal(kv.keys(), want)
    np.testing.assert_array_equal(kv.values(), -want)
    for other in (0, 2):
        assert not np.asarray(kv.k[other]).any() and not np.asarray(kv.v[other]).any()


def test_layer_kv_drops_rows_past_the_end():
    cache = KVCache.zeros(1, 1, 4, K, H, stacked=False)
    new = jnp.ones((1, 3, K, H))
    kv = layers.LayerKV(cache.k, cache.v).write(new, new, jnp.asarray([2], jnp.int32))
    np.testing.assert_array_equal(np.asarray(kv.keys())[0, :, 0, 0], [0, 0, 1, 1])


@pytest.mark.parametrize("scan", [False, pytest.param(True, marks=pytest.mark.slow)])  # scanned: parity tests too
def test_model_cache_layout_follows_the_layer_form_and_either_layout_decodes_alike(scan):
    import flax.nnx as nnx

    from cfka_jax.models import QwenConfig, QwenModel

    cfg = QwenConfig(
        model_type="qwen2", vocab_size=11, hidden_size=12, intermediate_size=7, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, scan_layers=scan,
    )
    model = QwenModel(cfg, rngs=nnx.Rngs(0))
    own = model.init_cache(2, 6)
    assert isinstance(own.k, tuple) == (not scan) and own.k[1].shape == (2, 1, 6, 6)
    other = KVCache.zeros(2, 2, 6, 1, 6, stacked=not scan)
    tokens = np.arange(8, dtype=np.int32).reshape(2, 4) % 11
    a = forward(model, tokens[:, 1:], cache=forward(model, tokens[:, :1], cache=own).cache)
    b = forward(model, tokens[:, 1:], cache=forward(model, tokens[:, :1], cache=other).cache)
    np.testing.assert_array_equal(a.logits, b.logits)
    np.testing.assert_array_equal(np.stack(a.cache.k), np.stack(b.cache.k))
