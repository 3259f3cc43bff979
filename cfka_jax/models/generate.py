"""Jitted KV-cached sampling for the model ports (spec ``cfka_stoc.md`` §6.4 sampler semantics).

Pure core: the logit processors (:func:`apply_repetition_penalty`, :func:`apply_temperature`,
:func:`apply_top_k`, :func:`apply_top_p`) and :func:`process_logits` are functions of ``[..., V]`` arrays.
Thin shell: :func:`generate` splits the model once and runs prefill plus the whole decode loop inside one
``jax.jit`` over ``(graphdef, state)``; it compiles once per (graph, sampler config, prompt shape). The loop is a
``lax.fori_loop`` of ``max_new_tokens - 1`` steps when no token can stop a row (a ``lax.while_loop`` that ends once
every row has stopped otherwise), and the KV cache is its carry, updated in place (``layers.LayerKV``). A decode step
at the benchmark shapes is bound by memory traffic: one pass over every weight matrix and over every slot of the
cache it is given (docs/models_bench.md, Generate). So the loop reads and computes no more than it needs: the
cache grows by chunks of doubling length (:func:`feed_chunks`, :func:`grow_cache`; a model with another cache type,
a hybrid one, gets every slot at once), the prefill computes the LM head at each row's last prompt position only,
no model step is run whose logits are unused, and the prompt/generated token sets are built only for the
repetition penalty.

Batched prompts of different lengths are *right*-padded and given with their lengths: the cache keeps a write
index per row (``KVCache.end_index``), so after the prefill each row's index is reset to its own length and every
generated token lands in the slot (and gets the position) it would have had without padding. Padding slots are
recorded invalid by the prefill mask and are overwritten by the row's generated tokens.

Order of the processors (vLLM and HF agree): repetition penalty -> temperature -> top-k -> top-p -> sample.
``temperature == 0`` is greedy decoding (argmax after the repetition penalty; top-k/top-p are then irrelevant).

Randomness: one key per row (``jax.random.split(key, B)`` unless a ``[B]`` batch of keys is given) and per step
(``fold_in(row_key, t)``), so a row's samples depend only on its own key, prompt and the model, not on the other
rows of the batch.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence

import flax.nnx as nnx
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.models.outputs import KVCache
from cfka_jax.shapes import Array, Bool, Float, Int, PRNGKeyArray

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
    """Sampler settings (frozen, hashable: one compiled program per config and shape).

    Attributes:
        max_new_tokens: number of tokens to generate per row (the output width).
        temperature: softmax temperature; 0 means greedy (argmax).
        top_k: keep the k largest logits (ties with the k-th kept); 0 disables.
        top_p: nucleus sampling, keep the smallest prefix of tokens (by probability) whose mass reaches top_p;
            1.0 disables.
        repetition_penalty: vLLM/HF semantics; for every token id present in prompt ∪ generated-so-far, a
            positive logit is divided by it and a negative one multiplied by it, before temperature. 1.0 disables.
        eos_token_id: one id or a tuple of ids that end a row (the EOS itself is kept); None never stops.
        pad_token_id: written after a row has stopped.
        ignore_eos: sample through EOS (it stays in the sequence) up to ``max_new_tokens``.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int = 0
    ignore_eos: bool = False

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def eos_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        return self.eos_token_id if isinstance(self.eos_token_id, tuple) else (self.eos_token_id,)


@flax.struct.dataclass
class GenerateOutput:
    """Generated continuations.

    Attributes:
        tokens: ``[B, max_new_tokens]`` int32 new tokens; after a row's EOS (kept) the rest is ``pad_token_id``.
        num_tokens: ``[B]`` int32 tokens generated per row, EOS included (``max_new_tokens`` if it never stopped).
    """

    tokens: Int[Array, "B new"]
    num_tokens: Int[Array, " B"]


# -------------------------------------------------------------------------------------------- logit processors


def token_presence(tokens_BS: Int[Array, "B S"], mask_BS: Bool[Array, "B S"], vocab_size: int) -> Bool[Array, "B V"]:
    """``seen[b, v]`` iff token v occurs at an unmasked position of row b."""
    idx_BS = jnp.where(mask_BS, tokens_BS, vocab_size)  # masked positions index out of range and are dropped

    def one(idx_S):
        return jnp.zeros((vocab_size,), bool).at[idx_S].set(True, mode="drop")

    return jax.vmap(one)(idx_BS)


def apply_repetition_penalty(
    logits_BV: Float[Array, "... V"], seen_BV: Bool[Array, "... V"], penalty: float
) -> Float[Array, "... V"]:
    """vLLM/HF repetition penalty: on seen tokens, ``logit / p`` if ``logit > 0`` else ``logit * p``."""
    if penalty == 1.0:
        return logits_BV
    penalised = jnp.where(logits_BV > 0, logits_BV / penalty, logits_BV * penalty)
    return jnp.where(seen_BV, penalised, logits_BV)


def apply_temperature(logits_BV: Float[Array, "... V"], temperature: float) -> Float[Array, "... V"]:
    """``logits / T`` (T > 0; greedy decoding never calls this)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 here, got {temperature}")
    return logits_BV if temperature == 1.0 else logits_BV / temperature


def apply_top_k(logits_BV: Float[Array, "... V"], k: int) -> Float[Array, "... V"]:
    """Set every logit below the k-th largest to -inf (ties with the k-th are kept, as HF); k = 0 disables."""
    if k == 0 or k >= logits_BV.shape[-1]:
        return logits_BV
    kth = jax.lax.top_k(logits_BV, k)[0][..., -1:]
    return jnp.where(logits_BV < kth, -jnp.inf, logits_BV)


def apply_top_p(logits_BV: Float[Array, "... V"], p: float) -> Float[Array, "... V"]:
    """Nucleus filter: keep token i iff the probability mass of tokens ranked strictly above it is < p.

    This is HF's ``TopPLogitsWarper`` (remove where the ascending cumulative mass ``<= 1 - p``) written in the
    descending order; the most likely token is always kept. Ties at the cut are all kept. p = 1 disables.
    """
    if p >= 1.0:
        return logits_BV
    sorted_desc = jnp.flip(jnp.sort(logits_BV, axis=-1), axis=-1)
    probs = jax.nn.softmax(sorted_desc.astype(F32), axis=-1)
    mass_above = jnp.cumsum(probs, axis=-1) - probs
    num_keep = jnp.sum(mass_above < p, axis=-1, keepdims=True)
    cutoff = jnp.take_along_axis(sorted_desc, num_keep - 1, axis=-1)
    return jnp.where(logits_BV < cutoff, -jnp.inf, logits_BV)


def process_logits(logits_BV: Float[Array, "... V"], seen_BV: Bool[Array, "... V"], cfg: SamplerConfig):
    """Repetition penalty, then (unless greedy) temperature, top-k and top-p, in float32."""
    x = apply_repetition_penalty(logits_BV.astype(F32), seen_BV, cfg.repetition_penalty)
    if cfg.greedy:
        return x
    return apply_top_p(apply_top_k(apply_temperature(x, cfg.temperature), cfg.top_k), cfg.top_p)


def first_argmax(x_BV: Float[Array, "B V"]) -> Int[Array, " B"]:
    """``jnp.argmax(x, axis=-1)`` (the first index of the row maximum; the first NaN if the row holds one) as two
    plain reductions: ``m = max_v x[v]``, then ``min {v : x[v] == m or x[v] is NaN}``.

    The same indices as ``jnp.argmax``: ``max`` propagates NaN, so with a NaN in the row ``m`` is NaN, no ``x[v]``
    equals it and the first NaN is found; without one, the first ``v`` reaching ``m``. XLA:CPU runs argmax as one
    variadic (value, index) reduction that it does not vectorise; at the benchmark's ``[8, 8192]`` logits it cost
    ~0.32 ms of a ~9 ms decode step, the two plain reductions ~0.05 ms.
    """
    v = x_BV.shape[-1]
    m_B1 = jnp.max(x_BV, axis=-1, keepdims=True)
    hit_BV = (x_BV == m_B1) | jnp.isnan(x_BV)
    return jnp.min(jnp.where(hit_BV, jnp.arange(v, dtype=jnp.int32), jnp.int32(v)), axis=-1)


def sample_tokens(
    logits_BV: Float[Array, "B V"], seen_BV: Bool[Array, "B V"], keys_B: PRNGKeyArray, step, cfg: SamplerConfig
) -> Int[Array, " B"]:
    """One token per row: argmax when greedy (:func:`first_argmax`), else a categorical draw with key
    ``fold_in(keys_B[b], step)``.

    The draw is ``jax.random.categorical``'s Gumbel-max, ``argmax(gumbel(key, [V]) + row)``, written out so that
    its argmax is :func:`first_argmax`: the same Gumbel noise, the same sum, the same index (bit for bit the
    tokens ``jax.random.categorical(fold_in(keys_B[b], step), row)`` draws).
    """
    x = process_logits(logits_BV, seen_BV, cfg)
    if cfg.greedy:
        return first_argmax(x)

    def noise(key):
        return jax.random.gumbel(jax.random.fold_in(key, step), x.shape[-1:], x.dtype)

    return first_argmax(jax.vmap(noise)(keys_B) + x)


# ------------------------------------------------------------------------------------------------ decode loop

FIRST_WINDOW = 32  # new-token slots of the first decode chunk; each later chunk doubles its end (see feed_chunks)


def feed_chunks(num_feeds: int, first: int = FIRST_WINDOW) -> tuple[tuple[int, int], ...]:
    """The decode feeds ``0 .. num_feeds - 1`` split at ``first, 2·first, 4·first, ...``: chunk ``[lo, hi)`` runs
    with a cache of ``S + hi`` slots, the most its feeds write.

    A decode step reads every slot of the cache it is given (the attention's keys and values, masked or not), and
    at the benchmark shapes that read is a large part of a step's memory traffic: growing the cache by chunks
    reads only the slots a chunk can have filled. Doubling keeps the number of compiled decode bodies
    logarithmic in ``max_new_tokens`` (one chunk below ``first`` feeds: short generations compile as before).
    """
    bounds, hi = [], first
    while hi < num_feeds:
        bounds.append(hi)
        hi *= 2
    edges = (0, *bounds, num_feeds)
    return tuple((lo, hi) for lo, hi in itertools.pairwise(edges) if hi > lo)


def grow_cache(cache: KVCache, max_len: int) -> KVCache:
    """``cache`` with ``max_len`` slots: its keys, values and validity padded at the end (new slots invalid and
    unwritten; the write indices unchanged)."""
    extra = max_len - cache.valid.shape[1]
    if extra < 0:
        raise ValueError(f"cannot shrink a cache of {cache.valid.shape[1]} slots to {max_len}")

    def pad(x):  # the slot axis is -2 of a B K T H buffer and of a stacked L B K T H one
        return jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, extra), (0, 0)])

    k = tuple(pad(x) for x in cache.k) if isinstance(cache.k, tuple) else pad(cache.k)
    v = tuple(pad(x) for x in cache.v) if isinstance(cache.v, tuple) else pad(cache.v)
    return cache.replace(k=k, v=v, valid=jnp.pad(cache.valid, [(0, 0), (0, extra)]))



def generate_pure(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_BS: Int[Array, "B S"],
    lengths_B: Int[Array, " B"],
    keys_B: PRNGKeyArray,
    *,
    cfg: SamplerConfig,
) -> GenerateOutput:
    """Prefill and decode as one pure function of the model state (jit it, or call it inside a larger jit).

    Args:
        tokens_BS: right-padded prompts; row b's prompt is ``tokens_BS[b, :lengths_B[b]]`` (length >= 1).
        lengths_B: prompt lengths.
        keys_B: one PRNG key per row.
    """
    def merged():  # fresh variables at the current trace level: nnx.scan (a stacked model) refuses a module
        # whose variables belong to an outer trace, as the decode loop's body would otherwise see
        fresh = jax.tree.map(lambda x: x, state)
        return nnx.view(nnx.merge(graphdef, fresh), only=nnx.Dropout, deterministic=True, raise_if_not_found=False)

    model = merged()
    b, s = tokens_BS.shape
    n = cfg.max_new_tokens
    prompt_BS = jnp.arange(s, dtype=jnp.int32)[None, :] < lengths_B[:, None]
    # A plain KVCache grows chunk by chunk (feed_chunks); another cache (a hybrid model's) gets every slot now.
    plain = type(jax.eval_shape(lambda: model.init_cache(b, 1, model.cfg.dtype))) is KVCache
    chunks = feed_chunks(n - 1, FIRST_WINDOW) if plain else ((0, n - 1),)
    cache = model.init_cache(b, s + (chunks[0][1] if chunks else 0), model.cfg.dtype)  # what chunk 0 writes
    out = model(tokens_BS, attention_mask_BT=prompt_BS.astype(jnp.int32), cache=cache)
    cache = out.cache.replace(end_index=lengths_B)  # per-row write index: generated tokens overwrite the padding
    # The head at each row's last prompt position only: the [B, S, V] prefill logits are never used, so XLA drops
    # them (B·S·D·V multiply-adds, a quarter of the benchmark's prefill).
    last_B1D = jnp.take_along_axis(out.final_hidden, (lengths_B - 1)[:, None, None], axis=1)
    last_BV = model.head_view()(last_B1D)[:, 0].astype(F32)
    vocab = last_BV.shape[-1]
    # Prompt ∪ generated tokens are tracked only for the repetition penalty (nothing else reads them).
    seen_BV = token_presence(tokens_BS, prompt_BS, vocab) if cfg.repetition_penalty != 1.0 else None
    eos = jnp.asarray(cfg.eos_ids, jnp.int32)
    stops = bool(cfg.eos_ids) and not cfg.ignore_eos

    def emit(t, logits_BV, seen_BV, done_B, out_BN, count_B):
        token_B = sample_tokens(logits_BV, seen_BV, keys_B, t, cfg)
        token_B = jnp.where(done_B, jnp.int32(cfg.pad_token_id), token_B)
        out_BN = out_BN.at[:, t].set(token_B)
        count_B = count_B + (~done_B).astype(jnp.int32)
        if stops:
            done_B = done_B | jnp.any(token_B[:, None] == eos[None, :], axis=-1)
        if seen_BV is not None:
            seen_BV = seen_BV | jax.nn.one_hot(token_B, vocab, dtype=bool)
        return token_B, seen_BV, done_B, out_BN, count_B

    out_BN = jnp.full((b, n), cfg.pad_token_id, jnp.int32)
    done_B, count_B = jnp.zeros((b,), bool), jnp.zeros((b,), jnp.int32)

    def body(t, c):
        # Sample token t, then feed it to get the logits of token t + 1.
        logits_BV, seen_BV, done_B, out_BN, count_B, cache = c
        token_B, seen_BV, done_B, out_BN, count_B = emit(t, logits_BV, seen_BV, done_B, out_BN, count_B)
        step = merged()(token_B[:, None], cache=cache)
        return step.logits[:, 0], seen_BV, done_B, out_BN, count_B, step.cache

    # n - 1 feeds, then the last token is sampled from the last feed's logits: no model step whose logits nobody
    # reads. Without a stopping token each chunk's trip count is fixed (a fori_loop: no per-step test of every
    # row's done flag); with one, a while_loop ends as soon as every row has stopped.
    carry, t = (last_BV, seen_BV, done_B, out_BN, count_B, cache), jnp.int32(0)
    for lo, hi in chunks:
        if carry[-1].valid.shape[1] < s + hi:  # feed t writes slot <= s + t
            carry = (*carry[:-1], grow_cache(carry[-1], s + hi))
        if stops:
            def cond(tc, hi=hi):
                return (tc[0] < hi) & ~jnp.all(tc[1][2])

            t, carry = jax.lax.while_loop(cond, lambda tc: (tc[0] + 1, body(*tc)), (t, carry))
        else:
            carry = jax.lax.fori_loop(lo, hi, body, carry)
    t_last = t if stops else n - 1  # a stop leaves t at the first step after every row stopped
    logits_BV, seen_BV, done_B, out_BN, count_B, _ = carry
    # An early stop leaves every row done: the last emit then only rewrites padding.
    _, _, _, out_BN, count_B = emit(t_last, logits_BV, seen_BV, done_B, out_BN, count_B)
    return GenerateOutput(tokens=out_BN, num_tokens=count_B)


@functools.lru_cache(maxsize=32)
def _compiled(graphdef: nnx.GraphDef, cfg: SamplerConfig):
    return jax.jit(functools.partial(generate_pure, graphdef, cfg=cfg))


def pad_prompts(prompts: Sequence[Sequence[int]], pad_token_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token lists into ``(tokens_BS int32, lengths_B int32)`` for :func:`generate`."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    s = max(len(p) for p in prompts)
    tokens = np.full((len(prompts), s), pad_token_id, np.int32)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = p
    return tokens, np.asarray([len(p) for p in prompts], np.int32)


def generate(
    model: nnx.Module,
    tokens_BS: Int[Array, "B S"],
    lengths_B: Int[Array, " B"] | None,
    key: PRNGKeyArray,
    cfg: SamplerConfig,
) -> GenerateOutput:
    """KV-cached sampling of ``cfg.max_new_tokens`` tokens for a batch of right-padded prompts.

    Args:
        model: a model port (``PythiaModel``/``QwenModel``, looped or scanned, LoRA-wrapped or not).
        tokens_BS: right-padded prompts (see :func:`pad_prompts`).
        lengths_B: prompt lengths (None: every row is ``S`` long).
        key: a PRNG key, split into one key per row, or a ``[B]`` batch of keys used as they are.
        cfg: the sampler settings.

    Returns:
        :class:`GenerateOutput` with the new tokens only.

    Raises:
        ValueError: a length outside ``[1, S]`` or a key batch of the wrong size.
    """
    tokens_BS = jnp.asarray(tokens_BS, jnp.int32)
    b, s = tokens_BS.shape
    lengths = np.full((b,), s, np.int32) if lengths_B is None else np.asarray(lengths_B, np.int32)
    if lengths.shape != (b,) or lengths.min() < 1 or lengths.max() > s:
        raise ValueError(f"lengths must be {b} values in [1, {s}], got {lengths.tolist()}")
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)  # a raw uint32 key (jax.random.PRNGKey)
    keys_B = key if key.shape == (b,) else jax.random.split(key, b)
    if keys_B.shape != (b,):
        raise ValueError(f"key must be a single key or a batch of {b} keys, got shape {key.shape}")
    graphdef, state = nnx.split(model)
    return _compiled(graphdef, cfg)(state, tokens_BS, jnp.asarray(lengths), keys_B)
