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


def _scanned(model):
    """The same weights in the scanned form (blocks stacked on a leading L axis)."""
    fam = family.of(model)
    return fam.load(dataclasses.replace(model.cfg, scan_layers=True), fam.export(model))


def _stack_adapters(looped, scanned):
    """Copy each looped block's adapters into the scanned model's stacked adapters (same targets)."""
    for path, stacked in nnx.iter_modules(scanned):
        if isinstance(stacked, peft.LoRALinear):  # path: ("layers", "self_attn", "q_proj")
            blocks = [_at(looped.layers[i], path[1:]) for i in range(looped.cfg.num_hidden_layers)]
            for name in ("lora_a", "lora_b"):
                getattr(stacked, name)[...] = jnp.stack([getattr(b, name)[...] for b in blocks])


def _at(module, path):
    for key in path:
        module = getattr(module, key)
    return module


def test_scanned_lora_equals_the_looped_lora_with_the_same_adapters():
    looped = _randomize_b(_lora(QWEN))
    scanned = peft.apply_lora(_scanned(_model(QWEN)), peft.LoRAConfig(rank=3, alpha=6.0, dropout=0.0),
                              rngs=nnx.Rngs(2))
    layers = peft._lora_layers(scanned)
    assert len(layers) == len(family.of(scanned).lora_targets)  # one stacked adapter per target
    assert layers[0].lora_a[...].shape[0] == QWEN.num_hidden_layers
    _stack_adapters(looped, scanned)
    np.testing.assert_allclose(np.asarray(forward(scanned, TOKENS).logits), np.asarray(forward(looped, TOKENS).logits),
                               rtol=0, atol=F32.model_atol)
    plain = peft.merge_and_unload(scanned)  # stacked adapters fold into stacked kernels
    with jax.default_matmul_precision("float32"):
        np.testing.assert_allclose(np.asarray(forward(plain, TOKENS).logits),
                                   np.asarray(forward(scanned, TOKENS).logits), rtol=0, atol=F32.model_atol)


def test_scanned_freeze_is_a_row_mask_and_its_frozen_rows_never_move():
    from cfka_jax.train.optim import OptimConfig, make_optimizer
    from cfka_jax.train.step import Placement, Update, init_state, make_train_step

    scanned = _scanned(_model(QWEN))
    wrt = peft.trainable_filter(scanned, num_frozen_blocks=2, freeze_embeddings=True)
    graphdef, params, rest = nnx.split(scanned, nnx.Param, ...)
    mask = peft.trainable_mask(params, wrt)
    flat = dict(nnx.to_flat_state(mask))
    assert flat[("embed_tokens", "embedding")] is False
    np.testing.assert_array_equal(flat[("layers", "self_attn", "q_proj", "kernel")], [False, False, True])
    tx = make_optimizer(OptimConfig(peak_lr=1e-2, min_lr=1e-3, warmup_steps=1, total_steps=4))
    state = init_state(params, peft.masked_tx(tx, mask))
    step = make_train_step(graphdef, rest, tx, update=Update(trainable=mask), placement=Placement(donate=False))
    before = jax.tree.map(np.asarray, params)
    tokens = jnp.asarray(TOKENS)
    batch = {"tokens": tokens, "target_mask": jnp.ones_like(tokens)}
    for _ in range(3):
        state, metrics = step(state, batch)
        assert bool(metrics["finite"])
    after = dict(nnx.to_flat_state(state.params))
    for path, x in nnx.to_flat_state(before):
        y = np.asarray(after[path][...])
        if path[0] == "layers":
            np.testing.assert_array_equal(y[:2], np.asarray(x[...])[:2], err_msg=f"frozen rows of {path} moved")
            assert not np.array_equal(y[2], np.asarray(x[...])[2]), f"trained row of {path} did not move"
        elif path[0] == "embed_tokens":
            np.testing.assert_array_equal(y, np.asarray(x[...]))


def test_scanned_freeze_trains_like_the_looped_freeze():
    """The same three SGD steps on the looped and the scanned form: every exported tensor agrees to float32
    rounding. (SGD, not AdamW: Adam's m / √v turns ulp-level gradient differences on near-zero gradients into
    O(lr) parameter differences, which says nothing about the two forms; the AdamW row mask is the test above.)"""
    from cfka_jax.train.step import Placement, Update, init_state, make_train_step

    tokens = jnp.asarray(TOKENS)
    batch = {"tokens": tokens, "target_mask": jnp.ones_like(tokens)}
    tx = optax.sgd(0.5)
    out = {}
    for scan in (False, True):
        model = _scanned(_model(QWEN)) if scan else _model(QWEN)
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        mask = peft.trainable_mask(params, peft.trainable_filter(model, num_frozen_blocks=2, freeze_embeddings=True))
        state = init_state(params, peft.masked_tx(tx, mask))
        step = make_train_step(graphdef, rest, tx, update=Update(trainable=mask), placement=Placement(donate=False))
        for _ in range(3):
            state, _ = step(state, batch)
        out[scan] = family.of(model).export(nnx.merge(graphdef, state.params, rest))
    assert out[False].keys() == out[True].keys()
    for key in out[False]:
        np.testing.assert_allclose(np.asarray(out[True][key]), np.asarray(out[False][key]), rtol=0,
                                   atol=F32.model_atol, err_msg=key)


def test_frozen_block_count_is_checked():
    with pytest.raises(ValueError, match="num_frozen_blocks"):
        peft.trainable_filter(_model(QWEN), num_frozen_blocks=4)
    with pytest.raises(ValueError, match="num_frozen_blocks"):
        peft.trainable_filter(_scanned(_model(QWEN)), num_frozen_blocks=4)


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
