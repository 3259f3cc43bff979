"""LoRA and freezing: zero-B identity, merge/unload for export, frozen parameters bit-identical after AdamW."""

import dataclasses
import functools

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfka_jax.continual import peft
from cfka_jax.models import PythiaConfig, PythiaModel, QwenConfig, QwenModel, family, pythia, qwen
from tests.models.parity import forward
from tests.tolerances import F32

PYTHIA = PythiaConfig(
    vocab_size=43, hidden_size=30, num_attention_heads=3, intermediate_size=37, num_hidden_layers=3,
    rotary_pct=0.4, initializer_range=0.2,
)
QWEN = QwenConfig(
    model_type="qwen2", vocab_size=41, hidden_size=24, intermediate_size=29, num_hidden_layers=3,
    num_attention_heads=6, num_key_value_heads=2, initializer_range=0.2,
)
TOKENS = np.random.default_rng(0).integers(0, 41, (2, 9)).astype(np.int32)


@functools.lru_cache(maxsize=None)
def _initial(cfg):
    """(graphdef, state) of a fresh model, initialised in one jitted call (eager init compiles op by op)."""
    cls = PythiaModel if isinstance(cfg, PythiaConfig) else QwenModel
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: cls(cfg, rngs=nnx.Rngs(1))))
    return graphdef, jax.jit(lambda: nnx.state(cls(cfg, rngs=nnx.Rngs(1))))()


def _model(cfg):
    """A new model object (fresh variables over shared immutable arrays, so in-place edits do not leak)."""
    return nnx.merge(*_initial(cfg))


def _lora(cfg, **kw):
    lora = peft.LoRAConfig(**{"rank": 3, "alpha": 6.0, "dropout": 0.0, **kw})
    return peft.apply_lora(_model(cfg), lora, rngs=nnx.Rngs(2))


def _randomize_b(model, seed=3):
    for i, layer in enumerate(peft._lora_layers(model)):
        shape = layer.lora_b[...].shape
        layer.lora_b[...] = 0.3 * jax.random.normal(jax.random.key(seed + i), shape)
    return model


@pytest.mark.parametrize("cfg", [PYTHIA, QWEN], ids=["pythia", "qwen"])
def test_lora_with_zero_b_equals_the_base_model(cfg):
    base = forward(_model(cfg), TOKENS).logits
    adapted = _lora(cfg)  # default targets: every block linear
    names = {type(m).__name__ for _, m in nnx.iter_modules(adapted)}
    assert "LoRALinear" in names
    assert len(peft._lora_layers(adapted)) == cfg.num_hidden_layers * len(family.of(adapted).lora_targets)
    # x @ A @ 0 adds exact zeros; XLA may still fuse the adds differently, hence the op tolerance, not equality
    np.testing.assert_allclose(np.asarray(forward(adapted, TOKENS).logits), np.asarray(base), rtol=0,
                               atol=F32.op_atol)


def test_lora_targets_only_the_named_linears_and_rejects_unknown_names():
    model = _lora(QWEN, target_modules=("q_proj", "v_proj"))
    attn = model.layers[0].self_attn
    assert isinstance(attn.q_proj, peft.LoRALinear) and isinstance(attn.v_proj, peft.LoRALinear)
    assert isinstance(attn.k_proj, nnx.Linear) and isinstance(model.layers[0].mlp.up_proj, nnx.Linear)
    with pytest.raises(ValueError, match=r"\['qkv'\].*query_key_value"):
        peft.apply_lora(_model(PYTHIA), peft.LoRAConfig(rank=2, target_modules=("dense", "qkv")), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="already"):
        peft.apply_lora(model, peft.LoRAConfig(rank=2), rngs=nnx.Rngs(0))


def test_scanned_form_raises_a_clear_error():
    scanned = _model(dataclasses.replace(QWEN, scan_layers=True))
    with pytest.raises(ValueError, match="scan_layers=False"):
        peft.apply_lora(scanned, peft.LoRAConfig(rank=2), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="scan_layers=False"):
        peft.trainable_filter(scanned, num_frozen_blocks=1)
    assert peft.trainable_filter(scanned, freeze_embeddings=True) is not None  # embeddings alone are fine
    with pytest.raises(ValueError, match="num_frozen_blocks"):
        peft.trainable_filter(_model(QWEN), num_frozen_blocks=4)


def test_dropout_acts_in_training_mode_only():
    model = _randomize_b(_lora(QWEN, dropout=0.5, target_modules=("q_proj",)))
    a, b = model(jnp.asarray(TOKENS)).logits, model(jnp.asarray(TOKENS)).logits
    assert np.abs(np.asarray(a) - np.asarray(b)).max() > 1e-3
    ev = nnx.view(model, only=nnx.Dropout, deterministic=True)
    plain = _randomize_b(_lora(QWEN, target_modules=("q_proj",)))
    no_dropout = nnx.merge(nnx.graphdef(plain), nnx.state(model, nnx.Param))
    np.testing.assert_array_equal(np.asarray(ev(jnp.asarray(TOKENS)).logits),
                                  np.asarray(no_dropout(jnp.asarray(TOKENS)).logits))


@pytest.mark.parametrize("cfg, family", [(PYTHIA, pythia), (QWEN, qwen)], ids=["pythia", "qwen"])
def test_merge_and_unload_gives_the_adapted_function_in_the_original_architecture(cfg, family):
    model = _randomize_b(_lora(cfg))
    adapted = forward(model, TOKENS).logits
    base = forward(_model(cfg), TOKENS).logits
    assert np.abs(np.asarray(adapted) - np.asarray(base)).max() > 1e-2
    plain = peft.merge_and_unload(model)
    assert not peft.has_lora(plain) and peft.has_lora(model)
    tensors = family.export(plain)  # the HF key table covers every parameter again
    assert tensors.keys() == family.export(_model(cfg)).keys()
    with jax.default_matmul_precision("float32"):
        merged = forward(plain, TOKENS).logits
    np.testing.assert_allclose(np.asarray(merged), np.asarray(adapted), rtol=0, atol=F32.model_atol)
    before = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
    peft.unmerge_lora(peft.merge_lora(model))
    for x, y in zip(jax.tree.leaves(before), jax.tree.leaves(nnx.state(model, nnx.Param)), strict=True):
        np.testing.assert_allclose(np.asarray(y), x, rtol=0, atol=F32.op_atol)


def _one_adamw_step(model, wrt):
    """One jitted AdamW step on the variables selected by ``wrt`` (split/merge); returns the merged model."""
    graphdef, train, rest = nnx.split(model, wrt, ...)
    tx = optax.adamw(1e-2, weight_decay=0.1)

    @jax.jit
    def step(train, rest, tokens):
        def loss_fn(train):
            logits = nnx.merge(graphdef, train, rest)(tokens[:, :-1]).logits
            logp = jax.nn.log_softmax(logits, axis=-1)
            return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))

        grads = jax.grad(loss_fn)(train)
        with jax.numpy_dtype_promotion("standard"):  # optax's bias correction mixes a Python float and int32
            updates, _ = tx.update(grads, tx.init(train), train)
        return optax.apply_updates(train, updates)

    return nnx.merge(graphdef, step(train, rest, jnp.asarray(TOKENS)), rest)


def _flat(model):
    return {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _assert_only_selected_changed(before, after, selected):
    assert any(selected(p) for p in before) and not all(selected(p) for p in before)
    for path, x in before.items():
        if selected(path):
            assert not np.array_equal(after[path], x), f"trainable {path} did not change"
        else:
            np.testing.assert_array_equal(after[path], x, err_msg=f"frozen {path} changed")


def test_adamw_step_with_lora_changes_only_adapters():
    model = _lora(PYTHIA, target_modules=("query_key_value", "dense_4h_to_h"))
    before = _flat(model)
    after = _flat(_one_adamw_step(model, peft.trainable_filter(model)))
    # A has a zero gradient while B = 0, but AdamW's weight decay still moves it
    _assert_only_selected_changed(before, after, lambda p: p[-1] in ("lora_a", "lora_b"))


def test_adamw_step_with_frozen_embeddings_and_first_block():
    model = _model(QWEN)
    wrt = peft.trainable_filter(model, num_frozen_blocks=1, freeze_embeddings=True)
    before = _flat(model)
    after = _flat(_one_adamw_step(model, wrt))
    _assert_only_selected_changed(before, after, lambda p: p[0] != "embed_tokens" and p[:2] != ("layers", 0))


def test_masked_tx_over_all_parameters_and_nnx_optimizer_wrt():
    model = _lora(QWEN, target_modules=("o_proj",))
    wrt = peft.trainable_filter(model, num_frozen_blocks=2)
    params = nnx.state(model, nnx.Param)
    mask = peft.trainable_mask(params, wrt)
    selected = {p for p, v in nnx.to_flat_state(mask) if v}
    assert selected == {("layers", 2, "self_attn", "o_proj", "lora_a"), ("layers", 2, "self_attn", "o_proj", "lora_b")}
    tx = peft.masked_tx(optax.adamw(1e-2), mask)
    grads = jax.tree.map(jnp.ones_like, params)
    with jax.numpy_dtype_promotion("standard"):
        updates, _ = tx.update(grads, tx.init(params), params)
    for path, u in nnx.to_flat_state(updates):
        assert (np.abs(np.asarray(u[...])).max() > 0) == (path in selected), path
    opt = nnx.Optimizer(model, optax.adamw(1e-2), wrt=wrt)
    assert len(jax.tree.leaves(opt.opt_state)) == 1 + 2 * len(selected)  # count + (mu, nu) per trainable leaf


def test_generate_runs_lora_models_in_eval_mode_and_matches_the_merged_model():
    from cfka_jax.models import generate as gen

    model = _randomize_b(_lora(QWEN, dropout=0.3, target_modules=("q_proj",)))
    cfg = gen.SamplerConfig(max_new_tokens=6, temperature=0.0)
    with jax.default_matmul_precision("float32"):
        ours = gen.generate(model, TOKENS[:, :5], None, jax.random.key(0), cfg).tokens  # dropout off inside
        merged = gen.generate(peft.merge_and_unload(model), TOKENS[:, :5], None, jax.random.key(0), cfg).tokens
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(merged))
