"""Forward-only RH/GH scores, kept targets, vocabulary modes and the gradient baselines (spec §4.1, §9)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry import attribution, baselines
from cfka_jax.geometry.attribution import SeqFeatures
from tests.tolerances import F32, F64


def _random_features(key, n, dtype=jnp.float32, s=6, v=11, d=5, streams=2):
    k = jax.random.split(key, 5)
    keep = (jax.random.uniform(k[4], (n, s)) > 0.3).astype(dtype)
    return SeqFeatures(g=jax.random.normal(k[0], (n, s, v), dtype) * keep[..., None],
                       h=jax.random.normal(k[1], (n, s, d), dtype),
                       p=jax.random.normal(k[2], (n, s, d), dtype) * keep[..., None],
                       streams=jax.random.normal(k[3], (n, s, streams, d), dtype), keep=keep)


@pytest.mark.parametrize("preset", sorted(attribution.PRESETS))
def test_token_gram_form_equals_the_explicit_rh_gh_float32(key, preset):
    fa, fb = _random_features(key, 4), _random_features(jax.random.fold_in(key, 1), 7)
    gram = jax.jit(functools.partial(attribution.gram_scores, preset=preset, chunk=3))(fa, fb)
    explicit = attribution.explicit_scores(fa, fb, preset=preset)
    assert gram.shape == (4, 7)
    np.testing.assert_allclose(gram, explicit, rtol=F32.exact_rtol, atol=F32.op_atol * float(jnp.max(jnp.abs(explicit))))


@pytest.mark.slow  # ~40 s on the loaded CI box; the CH1 identity itself is in the float32 test above
def test_materialised_rh_on_the_vocabulary_subset_equals_the_gram_ch1(key):
    fa, fb = _random_features(key, 4), _random_features(jax.random.fold_in(key, 1), 5)
    ids = jnp.asarray([0, 3, 4, 9])
    keep = jnp.zeros(11).at[ids].set(1.0)
    fa, fb = (dataclasses.replace(f, g=f.g * keep[None, None, :]) for f in (fa, fb))  # g supported on V′ = ids
    gram = attribution.gram_scores(fa, fb, preset="ch1")
    np.testing.assert_allclose(attribution.rh_scores(fa, fb, ids), gram, rtol=F32.exact_rtol,
                               atol=F32.op_atol * float(jnp.max(jnp.abs(gram))))
    np.testing.assert_allclose(attribution.rh_scores(fa, fb), gram, rtol=F32.exact_rtol,
                               atol=F32.op_atol * float(jnp.max(jnp.abs(gram))))


@pytest.mark.slow  # the float64 re-run of the float32 identity above (x64 recompiles every op: ~75 s loaded)
def test_token_gram_form_equals_the_explicit_rh_gh_float64(x64, key):
    fa, fb = _random_features(key, 3, jnp.float64), _random_features(jax.random.fold_in(key, 1), 5, jnp.float64)
    gram = attribution.gram_scores(fa, fb, preset="ch1-ch2", chunk=2)
    np.testing.assert_allclose(gram, attribution.explicit_scores(fa, fb, preset="ch1-ch2"), rtol=F64.exact_rtol)


def test_kept_targets_drop_the_pad_target_unless_asked():
    attn = jnp.asarray([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(attribution.attribution_mask(attn), [[0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(attribution.attribution_mask(attn, keep_pad_target=True),
                                  [[0, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]])  # one extra pad/eos target


def test_vocabulary_masks():
    mask = attribution.total_unique_mask([np.asarray([[1, 4], [4, 6]]), np.asarray([9])], 12, extra_ids=[0])
    assert np.flatnonzero(mask).tolist() == [0, 1, 4, 6, 9]
    lp = jnp.log(jnp.asarray([[[0.7, 0.2, 0.1, 0.0 + 1e-9]], [[0.1, 0.1, 0.1, 0.7]], [[0.1, 0.8, 0.05, 0.05]]]))
    keep = jnp.ones((3, 1))
    grouped = attribution.topk_unique_masks(lp, keep, 1, group=2)
    assert grouped.astype(int).tolist() == [[1, 0, 0, 1], [1, 0, 0, 1], [0, 1, 0, 0]]  # depends on the grouping
    assert attribution.topk_unique_masks(lp, keep, 1, group=1).astype(int).tolist()[0] == [1, 0, 0, 0]


def test_sequence_features_on_a_port(pythia, tokens):
    model, net, params = pythia
    attn = jnp.ones_like(tokens).at[1, 6:].set(0)
    vocab = jnp.zeros(41, bool).at[jnp.arange(0, 41, 2)].set(True)
    f = jax.jit(functools.partial(attribution.sequence_features, net=net, gh="gh_raw", vocab_mask=vocab))(
        params, {"tokens": tokens, "attention_mask": attn})
    assert f.streams.shape == (3, 9, 1, 30)  # gh_raw of a 2-block model: the input of block 1
    np.testing.assert_array_equal(f.g[1, 6:], jnp.zeros((3, 41)))  # pad targets dropped
    np.testing.assert_array_equal(f.g[:, :, 1::2], jnp.zeros((3, 9, 20)))  # outside V′, not renormalised
    np.testing.assert_allclose(f.streams[:, 1:, 0], model(tokens, attention_mask_BT=attn, return_hidden=True)
                               .hidden_states[1][:, :-1], rtol=F32.exact_rtol, atol=F32.op_atol)


def test_rh_score_is_the_exact_readout_block_of_sequence_gradients(pythia, tokens):
    """Summed over tokens, the readout-block lemma makes ⟨RH_a, RH_b⟩ the readout block of ⟨∇Σlog p_a, ∇Σlog p_b⟩."""
    _, net, params = pythia
    batch = {"tokens": tokens, "attention_mask": jnp.ones_like(tokens).at[2, 7:].set(0)}
    f = jax.jit(functools.partial(attribution.sequence_features, net=net, gh=None))(params, batch)
    rh = attribution.gram_scores(f, f, preset="ch1")
    grads, counts = jax.jit(functools.partial(baselines.sequence_grads, net=net, scope="readout_only"))(params, batch)
    exact = baselines.exact_scores(grads, grads)
    assert counts.tolist() == [8.0, 8.0, 6.0]
    assert float(jnp.max(jnp.abs(rh - exact)) / jnp.max(jnp.abs(exact))) <= F32.exact_rtol


@pytest.mark.slow  # a float64 baseline check (x64 recompiles every op)
def test_datainf_matches_its_formula_written_out(x64, key):
    k = jax.random.split(key, 4)
    tr = {("a",): jax.random.normal(k[0], (6, 4), jnp.float64), ("b",): jax.random.normal(k[1], (6, 3), jnp.float64)}
    te = {("a",): jax.random.normal(k[2], (2, 4), jnp.float64), ("b",): jax.random.normal(k[3], (2, 3), jnp.float64)}
    ctr, cte = jnp.arange(1.0, 7.0, dtype=jnp.float64), jnp.asarray([2.0, 5.0], jnp.float64)
    got = baselines.datainf_scores(te, cte, tr, ctr)
    ref = np.zeros((2, 6))
    for layer, tr_layer in tr.items():
        g = -np.asarray(tr_layer) / np.asarray(ctr)[:, None]
        lam = np.mean(g**2) / 10.0
        for t in range(2):
            v = -np.asarray(te[layer][t]) / float(cte[t])
            h = sum(v - (v @ g[i]) / (lam + g[i] @ g[i]) * g[i] for i in range(6)) / (6 * lam)
            ref[t] += g @ h
    np.testing.assert_allclose(got, ref, rtol=F64.exact_rtol)
    flipped = {p: -x for p, x in tr.items()}, {p: -x for p, x in te.items()}
    np.testing.assert_allclose(baselines.datainf_scores(flipped[1], cte, flipped[0], ctr), got, rtol=F64.exact_rtol)


def test_compacted_and_chunked_features_give_the_masked_full_vocabulary_scores(pythia, tokens):
    """``vocab_ids`` stores g on V′ only and ``chunk`` runs the forward a few sequences at a time: the stored
    columns equal the masked full-V force, and every preset's score is the full-V one."""
    _, net, params = pythia
    batch = {"tokens": tokens, "attention_mask": jnp.ones_like(tokens).at[1, 6:].set(0)}
    mask = np.zeros(41, bool)
    mask[[0, 3, 4, 9, 17, 40]] = True
    ids = np.flatnonzero(mask)
    feats = functools.partial(attribution.sequence_features, net=net, gh="gh_raw")
    full = jax.jit(functools.partial(feats, vocab_mask=mask))(params, batch)
    compact = jax.jit(functools.partial(feats, vocab_ids=ids, chunk=2))(params, batch)
    chunked = jax.jit(functools.partial(feats, vocab_mask=mask, chunk=2))(params, batch)
    assert compact.g.shape == (3, 9, 6)
    np.testing.assert_array_equal(compact.g, full.g[..., ids])  # the same e_y − p at the kept columns
    for name in ("h", "streams", "keep", "g"):
        np.testing.assert_array_equal(getattr(chunked, name), getattr(full, name))  # lax.map: the same program
    np.testing.assert_allclose(compact.p, full.p, rtol=F32.exact_rtol, atol=F32.op_atol)
    for preset in ("ch1", "ch1-ch2"):
        ref = attribution.gram_scores(full, full, preset=preset)
        np.testing.assert_allclose(attribution.gram_scores(compact, compact, preset=preset), ref,
                                   rtol=F32.exact_rtol, atol=F32.op_atol * float(jnp.max(jnp.abs(ref))))
    np.testing.assert_allclose(attribution.rh_scores(compact, compact), attribution.rh_scores(full, full, ids),
                               rtol=F32.exact_rtol, atol=F32.op_atol)
    with pytest.raises(ValueError, match="not both"):
        attribution.sequence_features(params, batch, net=net, vocab_mask=mask, vocab_ids=ids)
