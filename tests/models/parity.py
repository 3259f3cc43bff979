"""The model parity suite and its helpers: jitted calls via split/merge, a greedy KV-cache loop, HF references,
the shared ``ParitySuite`` run by each family's ``test_parity.py`` and the reference-free properties.

torch is imported lazily so that importing this module never requires it. Tolerances come from
``tests/tolerances.py`` (``F32.model_atol`` for whole models, ``F32.op_atol`` for a form against another form).
"""

from __future__ import annotations

import functools
import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.models.outputs import ModelOutput
from cfka_jax.train.losses import next_token_nll
from tests.tolerances import F32

PERTURB_STD = 0.2  # spread for norm scales and biases, which HF initialises to exactly 1 and 0


def randomize_hf(model, seed: int) -> None:
    """Give every HF parameter a non-trivial value (norm scales ~1 +- 0.2, biases ~ N(0, 0.2^2)).

    HF initialises norms to (1, 0) and biases to 0, which would hide a swapped or mis-transposed norm or bias.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * PERTURB_STD
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + noise)
            elif name.endswith("bias"):
                p.copy_(noise)


@functools.lru_cache(maxsize=None)
def _runner(graphdef, static: tuple):
    @jax.jit
    def run(state, tokens, arrays):
        return nnx.merge(graphdef, state)(tokens, **arrays, **dict(static))

    return run


def forward(model: nnx.Module, tokens_BS, **kwargs) -> ModelOutput:
    """``model(tokens, **kwargs)`` under ``jax.jit`` (split once, merge inside), float32 matmuls.

    The jitted function is cached per (graph, flags), so repeated calls with the same shapes do not recompile.
    """
    graphdef, state = nnx.split(model)
    static = tuple(sorted((k, v) for k, v in kwargs.items() if isinstance(v, bool)))
    arrays = {k: v for k, v in kwargs.items() if not isinstance(v, bool)}
    arrays = {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in arrays.items()}
    with jax.default_matmul_precision("float32"):
        return _runner(graphdef, static)(state, jnp.asarray(tokens_BS, jnp.int32), arrays)


def hf_positions(mask_BS: np.ndarray) -> np.ndarray:
    """HF ``generate`` position ids for a left-padded prompt: ``cumsum(mask) - 1``, 0 on padding."""
    return np.where(mask_BS > 0, np.cumsum(mask_BS, axis=1) - 1, 0).astype(np.int32)


def greedy(model: nnx.Module, prompt_BS: np.ndarray, mask_BS: np.ndarray, steps: int) -> np.ndarray:
    """Greedy decoding with the model's KV cache: one prefill call, then one jitted call per new token."""
    graphdef, state = nnx.split(model)
    b, s = prompt_BS.shape

    @jax.jit
    def prefill(state, tokens, mask, positions):
        m = nnx.merge(graphdef, state)
        cache = m.init_cache(b, s + steps)
        out = m(tokens, positions_BS=positions, attention_mask_BT=mask, cache=cache)
        return jnp.argmax(out.logits[:, -1], axis=-1).astype(jnp.int32), out.cache

    @jax.jit
    def step(state, token_B, position_B, cache):
        out = nnx.merge(graphdef, state)(token_B[:, None], positions_BS=position_B[:, None], cache=cache)
        return jnp.argmax(out.logits[:, -1], axis=-1).astype(jnp.int32), out.cache

    positions = hf_positions(mask_BS)
    with jax.default_matmul_precision("float32"):
        token, cache = prefill(state, jnp.asarray(prompt_BS, jnp.int32), jnp.asarray(mask_BS), positions)
        tokens, position = [token], jnp.asarray(positions[:, -1])
        for _ in range(steps - 1):
            position = position + 1
            token, cache = step(state, token, position, cache)
            tokens.append(token)
    return np.stack([np.asarray(t) for t in tokens], axis=1)


def hf_generate(hf_model, prompt_BS: np.ndarray, mask_BS: np.ndarray, steps: int) -> np.ndarray:
    """HF greedy ``generate`` continuation tokens (no EOS stopping)."""
    import torch

    with torch.no_grad():
        out = hf_model.generate(
            torch.tensor(prompt_BS),
            attention_mask=torch.tensor(mask_BS),
            max_new_tokens=steps,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[:, prompt_BS.shape[1] :].numpy()


def hf_forward(hf_model, tokens_BS: np.ndarray, mask_BS: np.ndarray | None = None):
    """HF logits, hidden states and attentions (eager attention) as numpy."""
    import torch

    mask = None if mask_BS is None else torch.tensor(mask_BS)
    with torch.no_grad():
        out = hf_model(torch.tensor(tokens_BS), attention_mask=mask, output_hidden_states=True, output_attentions=True)
    return (
        out.logits.numpy(),
        [h.numpy() for h in out.hidden_states],
        [a.numpy() for a in out.attentions],
    )


def assert_close(actual, desired, atol: float, err_msg: str = "") -> None:
    """``np.testing.assert_allclose`` with an absolute tolerance only (rtol 0)."""
    np.testing.assert_allclose(np.asarray(actual, np.float32), np.asarray(desired), rtol=0, atol=atol, err_msg=err_msg)


def assert_parity(out: ModelOutput, ref, rows: np.ndarray | None = None) -> None:
    """Logits, every hidden state and every attention map within ``F32.model_atol``; ``rows`` [B, S] selects
    the query positions to compare (padding queries are excluded: their fully masked rows are arbitrary)."""
    logits, hidden, attn = ref
    sel = (lambda a: a[rows]) if rows is not None else (lambda a: a)
    sel_attn = (lambda a: np.transpose(a, (0, 2, 1, 3))[rows]) if rows is not None else (lambda a: a)
    assert len(out.hidden_states) == len(hidden) and len(out.attentions) == len(attn)
    assert_close(sel(out.logits), sel(logits), F32.model_atol, "logits")
    for i, (a, b) in enumerate(zip(out.hidden_states, hidden)):
        assert_close(sel(a), sel(b), F32.model_atol, f"hidden_states[{i}]")
    for i, (a, b) in enumerate(zip(out.attentions, attn)):
        assert_close(sel_attn(np.asarray(a)), sel_attn(b), F32.model_atol, f"attentions[{i}]")


# --------------------------------------------------------------------------------------- the shared parity suite

SEQ_LEN = 13
NEW_TOKENS = 32


class Case:
    """One tiny random-init HF model saved to disk, its NNX port and a batch of tokens (B = 2, S = 13)."""

    def __init__(self, name: str, config_cls, model_cls, kwargs: dict, path, seed: int):
        import torch

        from cfka_jax import models

        self.name = name
        torch.manual_seed(seed)
        # initializer_range 0.2 (HF default 0.02) gives O(5) logits and O(10) hidden states, so a 1e-4 absolute
        # tolerance is a tight relative one; eos None keeps generate from stopping early.
        kwargs = dict(kwargs, initializer_range=0.2, eos_token_id=None)
        self.hf_config = config_cls(**kwargs, attn_implementation="eager")
        self.hf = model_cls(self.hf_config).eval()
        randomize_hf(self.hf, seed)
        self.hf.save_pretrained(path)
        self.path = path
        self.model = models.from_pretrained(path)
        rng = np.random.default_rng(seed)
        self.tokens = rng.integers(0, kwargs["vocab_size"], (2, SEQ_LEN)).astype(np.int64)
        self.mask = np.ones((2, SEQ_LEN), np.int64)
        self.mask[1, :4] = 0  # row 1 is left-padded by 4
        self._greedy = None

    def greedy_loop(self) -> np.ndarray:
        """NEW_TOKENS greedy tokens from the looped model's KV cache (computed once per case)."""
        if self._greedy is None:
            self._greedy = greedy(self.model, self.tokens, self.mask, NEW_TOKENS)
        return self._greedy


class ParitySuite:
    """Tests shared by every family; a subclass in each family's test file supplies the ``case`` fixture.

    The two slowest checks (scanned form, chunked cache) run on the cases named in ``SCAN_CASES`` and
    ``CHUNK_CASES`` only, to keep the suite near two minutes on two cores; every case is still decoded greedily
    with the cache against HF ``generate``.
    """

    SCAN_CASES: frozenset[str] = frozenset()
    CHUNK_CASES: frozenset[str] = frozenset()

    def test_forward_parity(self, case):
        out = forward(case.model, case.tokens, return_hidden=True, return_attn=True)
        assert_parity(out, hf_forward(case.hf, case.tokens))
        np.testing.assert_array_equal(np.asarray(out.final_hidden), np.asarray(out.hidden_states[-1]))

    def test_padded_batch_parity(self, case):
        out = forward(case.model, case.tokens, attention_mask_BT=case.mask, return_hidden=True, return_attn=True)
        assert_parity(out, hf_forward(case.hf, case.tokens, case.mask), rows=case.mask.astype(bool))

    def test_packed_position_ids_match_hf(self, case):
        import torch

        positions = np.concatenate([np.arange(6), np.arange(SEQ_LEN - 6)])[None].repeat(2, axis=0)
        out = forward(case.model, case.tokens, positions_BS=positions.astype(np.int32))
        with torch.no_grad():
            ref = case.hf(torch.tensor(case.tokens), position_ids=torch.tensor(positions)).logits.numpy()
        assert_close(out.logits, ref, F32.model_atol, "logits with restarting position ids")
        assert np.abs(np.asarray(out.logits)[:, 6:] - hf_forward(case.hf, case.tokens)[0][:, 6:]).max() > 1e-3

    def test_greedy_cache_decoding_matches_hf_generate(self, case):
        np.testing.assert_array_equal(case.greedy_loop(), hf_generate(case.hf, case.tokens, case.mask, NEW_TOKENS))

    def test_chunked_cache_equals_full_forward(self, case):
        if case.name not in self.CHUNK_CASES:
            pytest.skip(f"chunked cache checked on {sorted(self.CHUNK_CASES)}")
        full = forward(case.model, case.tokens, attention_mask_BT=case.mask)
        graphdef, state = nnx.split(case.model)

        @jax.jit
        def chunked(state, tokens, mask):
            m = nnx.merge(graphdef, state)
            cache = m.init_cache(2, SEQ_LEN + 3)  # spare slots stay invalid
            first = m(tokens[:, :5], attention_mask_BT=mask[:, :5], cache=cache)
            second = m(tokens[:, 5:], attention_mask_BT=mask[:, 5:], cache=first.cache)
            return jnp.concatenate([first.logits, second.logits], axis=1), second.cache

        with jax.default_matmul_precision("float32"):
            logits, cache = chunked(state, jnp.asarray(case.tokens, jnp.int32), jnp.asarray(case.mask))
        rows = case.mask.astype(bool)
        assert_close(logits[rows], np.asarray(full.logits)[rows], F32.op_atol)
        np.testing.assert_array_equal(np.asarray(cache.end_index), [SEQ_LEN, SEQ_LEN])
        np.testing.assert_array_equal(np.asarray(cache.valid)[:, :SEQ_LEN], rows)
        assert not np.asarray(cache.valid)[:, SEQ_LEN:].any()

    def test_roundtrip_reloads_in_transformers(self, case, tmp_path):
        import torch
        from safetensors.numpy import load_file
        from transformers import AutoModelForCausalLM

        from cfka_jax import models

        models.save_pretrained(case.model, tmp_path)
        original = load_file(case.path / "model.safetensors")
        written = load_file(tmp_path / "model.safetensors")
        assert written.keys() == original.keys()
        for k in original:
            np.testing.assert_array_equal(written[k], original[k], err_msg=k)
        reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
        with torch.no_grad():
            a = reloaded(torch.tensor(case.tokens)).logits.numpy()
            b = case.hf(torch.tensor(case.tokens)).logits.numpy()
        np.testing.assert_array_equal(a, b)
        assert models.config_from_hf(models.hub.read_config(tmp_path)) == case.model.cfg

    def test_scan_equals_loop(self, case, tmp_path):
        if case.name not in self.SCAN_CASES:
            pytest.skip(f"scanned form checked on {sorted(self.SCAN_CASES)}")
        from cfka_jax import models

        scanned = models.from_pretrained(case.path, scan_layers=True)
        kw = dict(attention_mask_BT=case.mask, return_hidden=True, return_attn=True)
        a, b = forward(case.model, case.tokens, **kw), forward(scanned, case.tokens, **kw)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            assert_close(y, x, F32.op_atol)
        np.testing.assert_array_equal(greedy(scanned, case.tokens, case.mask, 8), case.greedy_loop()[:, :8])
        models.save_pretrained(scanned, tmp_path)  # the table also runs backwards from stacked parameters
        reloaded = models.from_pretrained(tmp_path)
        for x, y in zip(jax.tree.leaves(nnx.state(case.model)), jax.tree.leaves(nnx.state(reloaded)), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

    def test_malformed_checkpoint_lists_every_problem(self, case):
        from cfka_jax.models import family, hub

        load = family.of(case.model).load
        tensors = hub.read_tensors(case.path)
        missing = sorted(k for k in tensors if ".1." in k)[0]
        wrong = sorted(k for k in tensors if ".0." in k and k.endswith("weight"))[-1]
        extra = missing.replace(".1.", ".0.").rsplit(".", 1)[0] + ".unexpected_buffer"
        bad = dict(tensors)
        del bad[missing]
        bad[wrong] = np.zeros(bad[wrong].shape[:-1] + (bad[wrong].shape[-1] + 1,), np.float32)
        bad[extra] = np.zeros((3,), np.float32)
        with pytest.raises(hub.ConversionError) as err:
            load(case.model.cfg, bad)
        for key in (missing, wrong, extra):
            assert key in str(err.value)
        assert "unused HF keys (1)" in str(err.value) and "unfilled parameters (1)" in str(err.value)
        assert "shape and dtype mismatches (1)" in str(err.value)


# ------------------------------------------------------------------------------ properties without a reference


def loss_and_grads(model: nnx.Module, tokens_BS: np.ndarray):
    """Mean next-token NLL over every position (the library's ``train/losses.next_token_nll``) and its gradient
    w.r.t. every parameter (split/merge, whole-step jit)."""
    graphdef, params = nnx.split(model, nnx.Param)

    @jax.jit
    def run(params, tokens):
        def loss_fn(params):
            return jnp.mean(next_token_nll(nnx.merge(graphdef, params)(tokens).logits, tokens))

        return jax.value_and_grad(loss_fn)(params)

    with jax.default_matmul_precision("float32"):
        return run(params, jnp.asarray(tokens_BS, jnp.int32))


def assert_causal(model: nnx.Module, tokens_BS: np.ndarray, cut: int) -> None:
    """Changing tokens at positions >= cut leaves every logit before cut unchanged, and changes the ones after."""
    other = tokens_BS.copy()
    other[:, cut:] = (other[:, cut:] + 1) % model.cfg.vocab_size
    a, b = forward(model, tokens_BS).logits, forward(model, other).logits
    np.testing.assert_array_equal(np.asarray(a)[:, :cut], np.asarray(b)[:, :cut])
    assert np.abs(np.asarray(a)[:, cut:] - np.asarray(b)[:, cut:]).max() > 1e-3


def assert_remat_and_scan_preserve_gradients(model: nnx.Module, family, tokens_BS: np.ndarray, forms) -> None:
    """Each (scan_layers, remat) form in ``forms`` gives the loss and gradients of the plain loop on the same weights.

    Gradients are compared by HF key: a gradient state merged into the model's graph is exported through the
    family's key table, which un-stacks scanned layers.
    """
    import dataclasses

    tensors = family.export(model)

    def hf_named_grads(scan: bool, remat: bool):
        m = family.load(dataclasses.replace(model.cfg, scan_layers=scan, remat=remat), tensors)
        loss, grads = loss_and_grads(m, tokens_BS)
        return loss, family.export(nnx.merge(nnx.graphdef(m), grads))

    ref_loss, ref_grads = hf_named_grads(False, False)
    assert max(np.abs(g).max() for g in ref_grads.values()) > 1e-4
    for scan, remat in forms:
        loss, grads = hf_named_grads(scan, remat)
        assert_close(loss, ref_loss, F32.op_atol, f"loss scan={scan} remat={remat}")
        assert grads.keys() == ref_grads.keys()
        for k in ref_grads:
            assert_close(grads[k], ref_grads[k], F32.op_atol, f"grad {k} scan={scan} remat={remat}")


def assert_lora_round_trip(model: nnx.Module, tokens_BS: np.ndarray) -> None:
    """LoRA on the family's default targets (``Family.lora_targets``, every block linear): zero-B adapters leave
    the logits unchanged; with random B the function moves, and ``merge_and_unload`` gives the original
    architecture, exported through the family's key table, computing the adapted function."""
    from cfka_jax.continual import peft
    from cfka_jax.models import family

    fam = family.of(model)
    base = np.asarray(forward(model, tokens_BS).logits)
    adapted = peft.apply_lora(nnx.clone(model), peft.LoRAConfig(rank=3, alpha=6.0, dropout=0.0), rngs=nnx.Rngs(2))
    adapters = [m for _, m in nnx.iter_modules(adapted) if isinstance(m, peft.LoRALinear)]
    assert len(adapters) == model.cfg.num_hidden_layers * len(fam.lora_targets)
    assert_close(forward(adapted, tokens_BS).logits, base, F32.op_atol, "zero-B LoRA")  # x @ A @ 0 adds zeros
    for i, layer in enumerate(adapters):
        layer.lora_b[...] = 0.3 * jax.random.normal(jax.random.key(3 + i), layer.lora_b[...].shape)
    moved = np.asarray(forward(adapted, tokens_BS).logits)
    assert np.abs(moved - base).max() > 1e-2
    plain = peft.merge_and_unload(adapted)
    assert not peft.has_lora(plain)
    assert fam.export(plain).keys() == fam.export(model).keys()
    assert_close(forward(plain, tokens_BS).logits, moved, F32.model_atol, "merged LoRA")


def assert_frozen_step(model: nnx.Module, tokens_BS: np.ndarray) -> None:
    """One jitted AdamW step with the input embedding and block 0 frozen (``peft.trainable_filter``) changes every
    other parameter and leaves the frozen ones bit-identical."""
    import optax

    from cfka_jax.continual import peft
    from cfka_jax.models import family

    embed = family.of(model).embed
    wrt = peft.trainable_filter(model, num_frozen_blocks=1, freeze_embeddings=True)
    graphdef, train, rest = nnx.split(model, wrt, ...)
    tx = optax.adamw(1e-2, weight_decay=0.1)

    @jax.jit
    def step(train, rest, tokens):
        def loss_fn(train):
            return jnp.mean(next_token_nll(nnx.merge(graphdef, train, rest)(tokens).logits, tokens))

        grads = jax.grad(loss_fn)(train)
        with jax.numpy_dtype_promotion("standard"):  # optax's bias correction mixes a Python float and int32
            updates, _ = tx.update(grads, tx.init(train), train)
        return optax.apply_updates(train, updates)

    def flat(m):
        return {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(m, nnx.Param))}

    before = flat(model)
    with jax.default_matmul_precision("float32"):
        after = flat(nnx.merge(graphdef, step(train, rest, jnp.asarray(tokens_BS, jnp.int32)), rest))
    frozen = {p for p in before if p[0] == embed or p[:2] == ("layers", 0)}
    assert frozen and len(frozen) < len(before)
    for path, x in before.items():
        if path in frozen:
            np.testing.assert_array_equal(after[path], x, err_msg=f"frozen {path} changed")
        else:
            assert not np.array_equal(after[path], x), f"trainable {path} did not change"
