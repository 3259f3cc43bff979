"""KV-cached sampling: logit processors on hand-built cases, HF greedy parity, batching, seeds, EOS handling."""

import dataclasses

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.models import QwenConfig, QwenModel
from cfka_jax.models import generate as gen
from cfka_jax.models.generate import SamplerConfig
from tests.tolerances import F32

NEG_INF = -np.inf

# ------------------------------------------------------------------------------------------------ processors


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits():
    logits = jnp.asarray([[2.0, -1.0, 0.5, -3.0, 0.0]])
    seen = jnp.asarray([[True, True, False, False, True]])
    out = gen.apply_repetition_penalty(logits, seen, 2.0)
    np.testing.assert_array_equal(np.asarray(out), [[1.0, -2.0, 0.5, -3.0, 0.0]])
    assert gen.apply_repetition_penalty(logits, seen, 1.0) is logits


def test_token_presence_ignores_masked_positions():
    tokens = jnp.asarray([[3, 1, 3, 4], [0, 2, 2, 2]], jnp.int32)
    mask = jnp.asarray([[True, True, True, False], [True, True, False, False]])
    seen = np.asarray(gen.token_presence(tokens, mask, 6))
    np.testing.assert_array_equal(seen, [[0, 1, 0, 1, 0, 0], [1, 0, 1, 0, 0, 0]])


def test_temperature_scales_and_rejects_zero():
    np.testing.assert_array_equal(np.asarray(gen.apply_temperature(jnp.asarray([2.0, -4.0]), 2.0)), [1.0, -2.0])
    with pytest.raises(ValueError):
        gen.apply_temperature(jnp.asarray([1.0]), 0.0)


def test_top_k_keeps_ties_with_the_kth_value():
    logits = jnp.asarray([[1.0, 3.0, 2.0, 3.0], [0.0, -1.0, 5.0, 4.0]])
    np.testing.assert_array_equal(
        np.asarray(gen.apply_top_k(logits, 2)), [[NEG_INF, 3.0, NEG_INF, 3.0], [NEG_INF, NEG_INF, 5.0, 4.0]]
    )
    np.testing.assert_array_equal(np.asarray(gen.apply_top_k(logits, 3))[0], [NEG_INF, 3.0, 2.0, 3.0])
    assert gen.apply_top_k(logits, 0) is logits and gen.apply_top_k(logits, 4) is logits


@pytest.mark.parametrize("p, kept", [(0.3, 1), (0.75, 2), (0.85, 3), (0.97, 4)])
def test_top_p_keeps_the_smallest_prefix_reaching_p(p, kept):
    probs = np.asarray([0.05, 0.5, 0.15, 0.3], np.float32)  # ranks: 1, 3, 2, 0 -> mass above 0, .5, .8, .95
    out = np.asarray(gen.apply_top_p(jnp.log(jnp.asarray(probs)), p))
    order = np.argsort(-probs)
    assert np.isfinite(out[order[:kept]]).all() and np.isneginf(out[order[kept:]]).all()


def _hf_reference(logits, seen_ids, cfg: SamplerConfig):
    import torch
    from transformers import generation as g

    procs = [
        g.RepetitionPenaltyLogitsProcessor(cfg.repetition_penalty),
        g.TemperatureLogitsWarper(cfg.temperature),
        g.TopKLogitsWarper(cfg.top_k),
        g.TopPLogitsWarper(cfg.top_p),
    ]
    scores, ids = torch.tensor(logits), torch.tensor(seen_ids)
    for proc in procs:
        scores = proc(ids, scores)
    return scores.numpy()


@pytest.mark.torch
def test_processor_chain_matches_hf_logits_processors():
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(4, 29)) * 3).astype(np.float32)
    seen_ids = rng.integers(0, 29, (4, 9))
    seen = np.zeros((4, 29), bool)
    np.put_along_axis(seen, seen_ids, True, axis=1)
    for cfg in (
        SamplerConfig(max_new_tokens=1, temperature=0.7, top_k=11, top_p=0.8, repetition_penalty=1.3),
        SamplerConfig(max_new_tokens=1, temperature=1.0, top_k=0, top_p=0.5, repetition_penalty=1.05),
    ):
        ours = np.asarray(gen.process_logits(jnp.asarray(logits), jnp.asarray(seen), cfg))
        ref = _hf_reference(logits, seen_ids, dataclasses.replace(cfg, top_k=cfg.top_k or 29))
        np.testing.assert_array_equal(np.isneginf(ours), np.isneginf(ref))
        finite = np.isfinite(ref)
        np.testing.assert_allclose(ours[finite], ref[finite], rtol=0, atol=F32.op_atol)


def test_first_argmax_is_jnp_argmax_on_ties_nan_and_infinities():
    nan, inf = np.nan, np.inf
    x = np.array([
        [0.5, 2.0, -1.0, 2.0, 2.0],        # ties: the first maximum
        [-inf, -inf, -inf, -inf, -inf],    # every logit masked: index 0
        [1.0, nan, 3.0, nan, 0.0],         # NaN: the first NaN
        [-inf, 1e-30, -3.0, inf, inf],     # +inf ties
        [-2.0, -1.0, -1.5, -7.0, -1.0],
    ], np.float32)
    np.testing.assert_array_equal(gen.first_argmax(jnp.asarray(x)), [1, 0, 1, 3, 1])
    r = np.random.default_rng(0).integers(-3, 3, (64, 37)).astype(np.float32)  # many ties
    np.testing.assert_array_equal(gen.first_argmax(jnp.asarray(r)), jnp.argmax(jnp.asarray(r), axis=-1))


def test_sampled_tokens_are_jax_random_categorical_draws():
    """The Gumbel-max draw written out in ``sample_tokens`` picks exactly what ``jax.random.categorical`` does with
    the same per-row, per-step key (masked -inf logits included)."""
    r = np.random.default_rng(1)
    logits = r.normal(size=(6, 50)).astype(np.float32) * 3
    logits[:, ::7] = NEG_INF  # top-k style masking
    keys = jax.random.split(jax.random.key(3), 6)
    cfg = SamplerConfig(max_new_tokens=1, temperature=1.0)
    seen = jnp.zeros(logits.shape, bool)
    for step in range(20):
        ours = gen.sample_tokens(jnp.asarray(logits), seen, keys, step, cfg)
        ref = jax.vmap(lambda k, row, step=step: jax.random.categorical(jax.random.fold_in(k, step), row))(
            keys, jnp.asarray(logits))
        np.testing.assert_array_equal(ours, ref)
        assert not np.isin(np.asarray(ours) % 7, [0]).any()  # never a masked token


@pytest.mark.parametrize(("kv_heads", "groups"), [(2, 3), (4, 1)])
@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_decode_step_attention_is_attention_over_the_cache(kv_heads, groups, kind):
    """A decode step's attention (``layers.decode_attention``, one query per row, the cache in its ``B K T H``
    layout) is ``layers.attention`` over the same keys, to float32 rounding; masked slots (unwritten, padding)
    take no weight."""
    from cfka_jax.models import layers

    r = np.random.default_rng(2)
    b, t, h = 3, 11, 8
    q = jnp.asarray(r.normal(size=(b, 1, kv_heads * groups, h)), jnp.float32)
    k_BKTH, v_BKTH = (jnp.asarray(r.normal(size=(b, kv_heads, t, h)), jnp.float32) for _ in range(2))
    mask = jnp.asarray(r.random((b, 1, t)) < 0.6).at[:, :, 0].set(True)
    ours = layers.decode_attention(q, k_BKTH, v_BKTH, mask, kind=kind)
    ref, _ = layers.attention(q, jnp.swapaxes(k_BKTH, 1, 2), jnp.swapaxes(v_BKTH, 1, 2), mask, kind=kind)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=F32.op_atol)
    poisoned = jnp.where(mask[:, :, :, None], v_BKTH, 1e6)  # masked values must not reach the output
    np.testing.assert_allclose(layers.decode_attention(q, k_BKTH, poisoned, mask, kind=kind), ours, rtol=0,
                               atol=F32.op_atol)


def test_sampler_config_validates():
    for bad in (dict(max_new_tokens=0), dict(temperature=-1.0), dict(top_k=-1), dict(top_p=0.0),
                dict(top_p=1.5), dict(repetition_penalty=0.0)):
        with pytest.raises(ValueError):
            SamplerConfig(**{"max_new_tokens": 4, **bad})
    assert SamplerConfig(max_new_tokens=1, eos_token_id=[1, 2]).eos_ids == (1, 2)


# ----------------------------------------------------------------------------------------- tiny NNX model


CFG = QwenConfig(
    model_type="qwen3", vocab_size=41, hidden_size=23, head_dim=6, intermediate_size=29, num_hidden_layers=2,
    num_attention_heads=6, num_key_value_heads=3, initializer_range=0.2,
)
PROMPTS = [[5, 9, 1, 33, 7], [12, 3], [8, 8, 20, 2, 17, 30, 4]]
SAMPLE = SamplerConfig(max_new_tokens=12, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.3)
GREEDY = SamplerConfig(max_new_tokens=12, temperature=0.0)


@pytest.fixture(scope="module")
def model():
    return nnx.jit(lambda: QwenModel(CFG, rngs=nnx.Rngs(5)))()  # one compiled init instead of one per op


def _run(model, prompts, key, cfg):
    tokens, lengths = gen.pad_prompts(prompts)
    with jax.default_matmul_precision("float32"):
        out = gen.generate(model, tokens, lengths, key, cfg)
    return np.asarray(out.tokens), np.asarray(out.num_tokens)


def test_batched_prompts_of_different_lengths_sample_as_each_alone(model, key):
    keys = jax.random.split(key, len(PROMPTS))
    batched, _ = _run(model, PROMPTS, keys, SAMPLE)
    for i, prompt in enumerate(PROMPTS[:2]):  # both are right-padded in the batch
        alone, _ = _run(model, [prompt], keys[i : i + 1], SAMPLE)
        np.testing.assert_array_equal(batched[i], alone[0], err_msg=f"prompt {i}")


def test_scanned_model_generates_what_the_looped_one_does(model, key):
    """The decode loop calls a stacked (``nnx.scan``) model inside its ``lax.fori_loop`` / ``lax.while_loop`` (the
    replay builders of a ``--scan-layers`` run): the same tokens as the looped model with the same weights, sampled
    and greedy."""
    from cfka_jax.models import family

    fam = family.of(model)
    scanned = fam.load(dataclasses.replace(model.cfg, scan_layers=True), fam.export(model))
    keys = jax.random.split(key, len(PROMPTS))
    for cfg in (SAMPLE, GREEDY):
        np.testing.assert_array_equal(_run(scanned, PROMPTS, keys, cfg)[0], _run(model, PROMPTS, keys, cfg)[0])


def test_seeded_sampling_is_reproducible_and_compiles_once(model, key):
    a, _ = _run(model, PROMPTS, key, SAMPLE)
    compiled = gen._compiled(nnx.graphdef(model), SAMPLE)._cache_size()
    b, _ = _run(model, PROMPTS, key, SAMPLE)
    c, _ = _run(model, PROMPTS, jax.random.key(1), SAMPLE)
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()
    raw, _ = _run(model, PROMPTS, jax.random.PRNGKey(0), SAMPLE)  # legacy uint32 keys are accepted
    np.testing.assert_array_equal(raw, a)
    assert gen._compiled(nnx.graphdef(model), SAMPLE)._cache_size() == compiled  # new keys: no recompile


def test_top_k_one_sampling_equals_greedy(model, key):
    greedy, count = _run(model, PROMPTS, key, GREEDY)
    top1, _ = _run(model, PROMPTS, key, dataclasses.replace(GREEDY, temperature=1.0, top_k=1))
    np.testing.assert_array_equal(top1, greedy)
    np.testing.assert_array_equal(count, [GREEDY.max_new_tokens] * len(PROMPTS))


def test_eos_stops_each_row_and_ignore_eos_continues(model, key):
    free, _ = _run(model, PROMPTS, key, GREEDY)
    eos = int(free[0, 3])
    first = [int(np.argmax(row == eos)) if (row == eos).any() else None for row in free]
    stop = dataclasses.replace(GREEDY, eos_token_id=eos, pad_token_id=40)
    stopped, count = _run(model, PROMPTS, key, stop)
    for i, f in enumerate(first):
        n = GREEDY.max_new_tokens if f is None else f + 1
        assert count[i] == n
        np.testing.assert_array_equal(stopped[i, :n], free[i, :n])
        assert (stopped[i, n:] == 40).all()
    ignored, count = _run(model, PROMPTS, key, dataclasses.replace(stop, ignore_eos=True))
    np.testing.assert_array_equal(ignored, free)
    np.testing.assert_array_equal(count, [GREEDY.max_new_tokens] * len(PROMPTS))


def test_one_new_token_is_the_prefill_argmax(model, key):
    """``max_new_tokens=1`` runs no decode step (the token comes from the prefill's last-position head), with and
    without a stopping token (the fixed-count and the early-exit loop)."""
    free, _ = _run(model, PROMPTS, key, GREEDY)
    one = dataclasses.replace(GREEDY, max_new_tokens=1)
    for cfg in (one, dataclasses.replace(one, eos_token_id=int(free[0, 0]), pad_token_id=40)):
        tokens, count = _run(model, PROMPTS, key, cfg)
        np.testing.assert_array_equal(tokens, free[:, :1])
        np.testing.assert_array_equal(count, [1] * len(PROMPTS))


def test_feed_chunks_cover_every_feed_once():
    assert gen.feed_chunks(0) == ()
    assert gen.feed_chunks(11, 32) == ((0, 11),)
    assert gen.feed_chunks(11, 2) == ((0, 2), (2, 4), (4, 8), (8, 11))
    assert gen.feed_chunks(127) == ((0, 32), (32, 64), (64, 127))


def _grown_vs_whole(models, cfgs, keys, monkeypatch):
    whole = [_run(models[0], PROMPTS, keys, cfg) for cfg in cfgs]
    monkeypatch.setattr(gen, "FIRST_WINDOW", 2)  # chunks of 2, 2, 4 and 3 feeds: the cache grown three times
    gen._compiled.cache_clear()
    try:
        for m in models:
            for cfg, (tokens, count) in zip(cfgs, whole):
                grown, grown_count = _run(m, PROMPTS, keys, cfg)
                np.testing.assert_array_equal(grown, tokens, err_msg=str(cfg))
                np.testing.assert_array_equal(grown_count, count, err_msg=str(cfg))
    finally:
        gen._compiled.cache_clear()  # no program compiled with the patched window outlives the test


def _stopping(model, keys):
    free, _ = _run(model, PROMPTS, keys, GREEDY)
    return dataclasses.replace(GREEDY, eos_token_id=int(free[0, 5]), pad_token_id=40)


def test_growing_cache_generates_what_the_full_cache_does(model, key, monkeypatch):
    """A cache grown by chunks gives the tokens and counts of one chunk over every slot: sampled (fixed-count
    loops), and with rows stopping at an EOS (early-exit loops)."""
    keys = jax.random.split(key, len(PROMPTS))
    _grown_vs_whole((model,), (SAMPLE, _stopping(model, keys)), keys, monkeypatch)


@pytest.mark.slow
def test_growing_cache_of_a_scanned_model(model, key, monkeypatch):
    """The same for a stacked ``L B K T H`` cache (a scanned model), greedy and stopping (~15 s on two loaded cores)."""
    from cfka_jax.models import family

    fam = family.of(model)
    scanned = fam.load(dataclasses.replace(model.cfg, scan_layers=True), fam.export(model))
    keys = jax.random.split(key, len(PROMPTS))
    _grown_vs_whole((model, scanned), (GREEDY, _stopping(model, keys)), keys, monkeypatch)


def test_grow_cache_pads_slots_invalid_and_keeps_the_write_index():
    from cfka_jax.models.outputs import KVCache

    for stacked in (True, False):
        cache = KVCache.zeros(2, 3, 4, 2, 5, stacked=stacked)
        cache = cache.replace(valid=cache.valid.at[:, :2].set(True), end_index=jnp.asarray([2, 1, 2], jnp.int32))
        grown = gen.grow_cache(cache, 7)
        assert grown.valid.shape == (3, 7) and not bool(grown.valid[:, 4:].any())
        np.testing.assert_array_equal(grown.valid[:, :4], cache.valid)
        np.testing.assert_array_equal(grown.end_index, cache.end_index)
        assert grown.k[1].shape == grown.v[0].shape == (3, 2, 7, 5)
    with pytest.raises(ValueError, match="shrink"):
        gen.grow_cache(cache, 3)


def test_generate_rejects_bad_lengths(model, key):
    tokens, _ = gen.pad_prompts(PROMPTS)
    with pytest.raises(ValueError, match="lengths"):
        gen.generate(model, tokens, np.asarray([0, 2, 7]), key, GREEDY)
    with pytest.raises(ValueError):
        gen.pad_prompts([[1], []])


# ------------------------------------------------------------------------------------ HF greedy parity


def _case(family: str, tmp_path_factory):
    import transformers

    from tests.models.parity import Case

    if family == "pythia":
        from tests.models.pythia.test_parity import CASES

        name, cls = "parallel_untied", ("GPTNeoXConfig", "GPTNeoXForCausalLM")
        kwargs, seed = CASES[name], 7
    else:
        from tests.models.qwen.test_parity import CASES

        name, cls = "qwen2_tied", ("Qwen2Config", "Qwen2ForCausalLM")
        kwargs, seed = CASES[name][1], 11
    config_cls, model_cls = (getattr(transformers, c) for c in cls)
    path = tmp_path_factory.mktemp(f"gen_{name}")
    return Case(name, config_cls, model_cls, dict(kwargs, max_position_embeddings=96), path, seed)


@pytest.mark.torch
@pytest.mark.parametrize("family", ["pythia", "qwen"])
def test_greedy_batched_generation_matches_hf_generate_per_prompt(family, tmp_path_factory, key):
    pytest.importorskip("torch")
    from tests.models.parity import NEW_TOKENS, hf_generate

    case = _case(family, tmp_path_factory)
    prompts = [case.tokens[0].tolist(), case.tokens[1, 4:].tolist()]  # lengths 13 and 9, right-padded here
    cfg = SamplerConfig(max_new_tokens=NEW_TOKENS, temperature=0.0)
    ours, count = _run(case.model, prompts, key, cfg)
    assert NEW_TOKENS >= 32 and (count == NEW_TOKENS).all()
    for i, prompt in enumerate(prompts):
        row = np.asarray([prompt])
        ref = hf_generate(case.hf, row, np.ones_like(row), NEW_TOKENS)
        np.testing.assert_array_equal(ours[i], ref[0], err_msg=f"{family} prompt {i}")
