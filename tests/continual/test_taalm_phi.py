"""φ (Train-Attention) on the model ports, the meta-gradient through NNX θ/φ, and φ checkpoints."""

import dataclasses

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.continual.peft import LoRAConfig, apply_lora
from cfka_jax.continual.taalm import meta, phi as phimod
from cfka_jax.continual.taalm.adamw import AdamWConfig
from cfka_jax.continual.taalm.weights import load_phi, phi_token_weights, save_phi
from cfka_jax.models.pythia import PythiaConfig, PythiaModel
from cfka_jax.models.qwen import QwenConfig, QwenModel
from tests.tolerances import F32

V = 31


def qwen(seed=0, tie=True, layers=2):
    cfg = QwenConfig(model_type="qwen2", vocab_size=V, hidden_size=12, intermediate_size=20, num_hidden_layers=layers,
                     num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tie)
    return QwenModel(cfg, rngs=nnx.Rngs(seed))


def pythia(seed=0):
    cfg = PythiaConfig(vocab_size=V, hidden_size=12, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=20, rotary_pct=1.0)
    return PythiaModel(cfg, rngs=nnx.Rngs(seed))


LORA = LoRAConfig(rank=3, alpha=6.0, dropout=0.1)


@pytest.mark.parametrize("make", [lambda: qwen(tie=False), pythia], ids=["qwen-untied", "pythia"])
def test_phi_is_a_scalar_sigmoid_head_on_the_body(make, key):
    phi = phimod.build_phi(make(), phimod.PhiConfig(lora=LORA))
    assert not hasattr(phi.body, "lm_head") and not hasattr(phi.body, "embed_out")
    np.testing.assert_array_equal(np.asarray(phi.score.bias[...]), [4.0])
    assert float(jnp.max(jnp.abs(phi.score.kernel[...]))) <= 1 / np.sqrt(12)
    tokens = jax.random.randint(key, (2, 7), 0, V)
    call = nnx.jit(lambda m, t: m(t))
    w = call(phi, tokens)
    assert w.shape == (2, 7) and bool(jnp.all((w > 0) & (w < 1)))
    # causal: the weight of token s does not depend on later tokens
    w2 = call(phi, tokens.at[:, 5:].set((tokens[:, 5:] + 1) % V))
    np.testing.assert_allclose(np.asarray(w[:, :5]), np.asarray(w2[:, :5]), rtol=F32.exact_rtol)
    normal = phimod.build_phi(make(), phimod.PhiConfig(head_init="normal_0.001", lora=None))
    assert float(jnp.std(normal.score.kernel[...])) < 0.01


def test_phi_trainables_are_adapters_and_head():
    phi = phimod.build_phi(qwen(), phimod.PhiConfig(lora=LORA))
    _, train, frozen, _ = phimod.split_trainable(phi, phimod.phi_trainable(phi, lora=True))
    paths = {"/".join(map(str, p)) for p, _ in nnx.to_flat_state(train)}
    assert "score/bias" in paths and "score/kernel" in paths
    assert all(p.startswith("score") or "lora_" in p for p in paths)
    assert not any("lora_" in "/".join(map(str, p)) for p, _ in nnx.to_flat_state(frozen))


def test_keyed_lora_dropout(key):
    model = apply_lora(qwen(), LORA, rngs=nnx.Rngs(1))
    graphdef, train, frozen, rest = phimod.split_trainable(model, nnx.LoRAParam)
    train = jax.tree.map(lambda x: x + 0.3, train)
    fn = jax.jit(phimod.make_logits_fn(graphdef, rest))
    batch = {"tokens": jax.random.randint(key, (2, 5), 0, V)}
    a, b, c = (fn(train, frozen, batch, k) for k in (jax.random.key(1), jax.random.key(2), jax.random.key(1)))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    assert not np.allclose(np.asarray(a), np.asarray(b))
    d0, d1 = fn(train, frozen, batch, None), fn(train, frozen, batch, None)
    np.testing.assert_array_equal(np.asarray(d0), np.asarray(d1))


def _nnx_setup(key, *, b_zero=True):
    theta_model = apply_lora(qwen(0, layers=1), LORA, rngs=nnx.Rngs(1))
    tg, theta0, theta_frozen, trest = phimod.split_trainable(theta_model, nnx.LoRAParam)
    if not b_zero:
        theta0 = jax.tree.map(lambda x: x + 0.05, theta0)
    phi = phimod.build_phi(qwen(2, layers=1), phimod.PhiConfig(lora=LORA))
    pg, phi_train, phi_frozen, prest = phimod.split_trainable(phi, phimod.phi_trainable(phi, lora=True))
    fns = meta.ModelFns(phimod.make_logits_fn(tg, trest), phimod.make_weights_fn(pg, prest))
    k1, k2 = jax.random.split(key)
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    d = {"tokens": jax.random.randint(k1, (1, 8), 0, V), "attention_mask": jnp.ones((1, 8), jnp.int32),
         "target_mask": f([[0, 1, 1, 1, 1, 1, 1, 1]])}
    t = {"tokens": jax.random.randint(k2, (1, 6), 0, V), "attention_mask": jnp.ones((1, 6), jnp.int32),
         "target_mask": f([[0, 1, 1, 1, 1, 1]]), "object_mask": f([[0, 0, 0, 0, 1, 1]])}
    return fns, phi_train, meta.Operands(phi_frozen, theta0, theta_frozen), {"d": d, "t": t}


def _grad(fns, phi_train, ops, pair, cfg, key):
    return jax.jit(jax.grad(lambda p: meta.outer_loss(p, ops, pair, fns, cfg, key)[0]))(phi_train)


def test_bias_gradient_is_nonzero_with_the_reference_settings(key):
    """adamw2_ref at lr 2e-4 (1 detached + 1 differentiated step), dropout on: ∂L/∂bias ≠ 0 and finite."""
    fns, phi_train, ops, pair = _nnx_setup(key)
    g = _grad(fns, phi_train, ops, pair, meta.MetaConfig(), jax.random.key(3))
    bias = float(g["score"]["bias"][...][0])
    assert np.isfinite(bias) and bias != 0.0
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))
    assert any(float(jnp.max(jnp.abs(x))) > 0 for p, x in nnx.to_flat_state(g) if "lora_b" in str(p))


@pytest.mark.slow  # the float64 tiny-model version (test_taalm_meta.test_no_nan_where_v_is_zero) runs by default
def test_no_nan_on_the_port_where_v_is_zero(key):
    """θ's LoRA B = 0, no warm-up: v = 0 for every lora_a in the differentiated step."""
    fns, phi_train, ops, pair = _nnx_setup(key)
    cfg = meta.MetaConfig(n_warmup=0, n_diff=1, dropout=False)
    g = _grad(fns, phi_train, ops, pair, cfg, None)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))
    bad = dataclasses.replace(cfg, inner=AdamWConfig(eps_root=0.0))
    g_bad = _grad(fns, phi_train, ops, pair, bad, None)
    assert not all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g_bad))


@pytest.mark.slow
def test_remat_matches_on_the_port(key):
    fns, phi_train, ops, pair = _nnx_setup(key, b_zero=False)
    cfg = meta.MetaConfig(dropout=False, inner=AdamWConfig(lr=1e-2))
    g0 = _grad(fns, phi_train, ops, pair, cfg, None)
    g1 = _grad(fns, phi_train, ops, pair, dataclasses.replace(cfg, remat=True), None)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=F32.exact_rtol, atol=F32.model_atol)


def test_phi_checkpoint_round_trip_and_token_weights(tmp_path, key):
    cfg = phimod.PhiConfig(lora=LORA, seed=3)
    phi = phimod.build_phi(qwen(4), cfg)
    phi.score.bias[...] = jnp.array([1.5])
    save_phi(tmp_path / "phi", phi, cfg, step=7, extra={"note": "x"})
    loaded, cfg2, meta_rec = load_phi(tmp_path / "phi")
    assert cfg2 == cfg and meta_rec["step"] == 7 and meta_rec["note"] == "x"
    tokens = jax.random.randint(key, (2, 6), 0, V)
    att = jnp.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], jnp.int32)
    mask = jnp.concatenate([jnp.zeros((2, 1)), (att[:, :-1] * att[:, 1:]).astype(jnp.float32)], axis=1)
    weights = phi_token_weights(tmp_path / "phi", vocab_size=V)
    w = weights({"tokens": tokens, "attention_mask": att, "target_mask": mask})
    direct = nnx.jit(lambda m, t, a: m(t, attention_mask_BT=a))(phi, tokens, att) * mask
    np.testing.assert_allclose(np.asarray(w), np.asarray(direct), rtol=F32.exact_rtol)
    assert float(w[1, 5]) == 0.0 and float(w[0, 0]) == 0.0
    with pytest.raises(ValueError, match="token ids"):
        phi_token_weights(tmp_path / "phi", vocab_size=V + 1)
    with pytest.raises(ValueError, match="phi.json"):
        load_phi(tmp_path)
