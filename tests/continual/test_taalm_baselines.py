"""RHO-1 (faithful and the released argsort rule), RecAdam (annealing, reference groups), K-Adapter, the CKL
hooks of the registry's methods (``runs/method.resolve(name, "ckl")``) and the CKL protocols on a tiny model."""


import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.continual import ckl, ckl_methods as cm, kadapter, recadam, rho1
from cfka_jax.continual.peft import LoRAConfig
from cfka_jax.data.ckl_encode import Encoded
from cfka_jax.models.qwen import QwenConfig, QwenModel
from cfka_jax.runs.method import MethodOptions, resolve, resolve_each
from tests.tolerances import F32, F64

V = 17


def tiny(seed=0, layers=1):
    cfg = QwenConfig(model_type="qwen2", vocab_size=V, hidden_size=12, intermediate_size=20, num_hidden_layers=layers,
                     num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    return QwenModel(cfg, rngs=nnx.Rngs(seed))


def test_argsort_rule_reproduces_the_spec_example():
    s = jnp.array([[0.0, 0.5, 0.1, 0.9, 0.3]])  # column 0 stands for the unused first position
    sel = rho1.argsort_selection(s[:, 1:], 0.6)
    # argsort [1, 3, 0, 2] / 4 = [0.25, 0.75, 0, 0.5] > 0.6 keeps position 1, the lowest score
    np.testing.assert_array_equal(np.asarray(sel), [[0, 1, 0, 0]])


def test_faithful_rho1_keeps_the_top_fraction_of_the_batch_by_excess_loss(x64):
    score = jnp.array([[0.1, 0.9, 0.5], [0.7, -1.0, 0.3]])
    mask = jnp.array([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    sel = rho1.top_fraction(score, mask, 0.6)  # ceil(0.6 * 5) = 3 kept: 0.9, 0.7, 0.5
    np.testing.assert_array_equal(np.asarray(sel), [[0, 1, 1], [1, 0, 0]])
    logits = jax.random.normal(jax.random.key(0), (2, 4, 5), jnp.float64)
    tokens = jnp.array([[0, 1, 2, 3], [0, 4, 4, 1]], jnp.int32)
    batch = {"tokens": tokens, "target_mask": jnp.concatenate([jnp.zeros((2, 1)), mask], 1),
             "ref_nll": jnp.zeros((2, 4))}
    loss, count = rho1.make_rho1_loss(0.6)(logits, batch)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1], -1), tokens[:, 1:, None], -1)[..., 0]
    keep = rho1.top_fraction(nll, mask, 0.6)
    np.testing.assert_allclose(float(loss), float(jnp.sum(keep * nll) / (0.6 * 5)), rtol=F64.exact_rtol)
    assert float(count) == 5
    with pytest.raises(ValueError, match="rho mode"):
        rho1.make_rho1_loss(0.6, "rank")


def test_recadam_anneals_from_pulling_back_to_plain_adam(x64):
    cfg = recadam.RecAdamConfig.rescaled(100, lr=1e-2)
    assert cfg.anneal_t0 == 50 and abs(cfg.lr * cfg.pretrain_cof - 0.5) < 1e-12
    assert float(recadam.anneal_lambda(1, cfg)) < 1e-10 and float(recadam.anneal_lambda(100, cfg)) > 1 - 1e-10
    tx = recadam.recadam(cfg)
    p0 = {"w": jnp.array([1.0, -2.0])}
    state = tx.init(p0)
    moved = {"w": jnp.array([1.5, -1.0])}  # away from p_pre: early updates pull back, whatever the gradient
    upd, _ = tx.update({"w": jnp.array([-1.0, -1.0])}, state, moved)
    assert bool(jnp.all(jnp.sign(upd["w"]) == -jnp.sign(moved["w"] - p0["w"])))
    # late in the run (λ = 1) it is Adam with eps 1e-6 followed by decoupled decay
    late = state._replace(count=jnp.asarray(99, jnp.int32))
    g = {"w": jnp.array([0.3, -0.2])}
    upd, _ = tx.update(g, late, moved)
    t = 100
    m, v = 0.1 * g["w"], 0.001 * g["w"] ** 2
    step = cfg.lr * np.sqrt(1 - cfg.b2 ** t) / (1 - cfg.b1 ** t)
    new = moved["w"] - step * m / (jnp.sqrt(v) + cfg.eps)
    new = new - cfg.lr * cfg.weight_decay * new
    np.testing.assert_allclose(np.asarray(upd["w"]), np.asarray(new - moved["w"]), rtol=F64.exact_rtol)


def test_recadam_reference_groups_leave_lora_matrices_on_plain_adam(x64):
    cfg = recadam.RecAdamConfig(lr=1e-2, reference_groups=True)
    tx = recadam.recadam(cfg)
    p0 = {"lora_a": jnp.array([1.0]), "norm": {"scale": jnp.array([1.0])}}
    moved = {"lora_a": jnp.array([2.0]), "norm": {"scale": jnp.array([2.0])}}
    upd, _ = tx.update(jax.tree.map(jnp.zeros_like, p0), tx.init(p0), moved)
    assert float(upd["lora_a"][0]) == 0.0  # zero gradient, no pull, no decay: a no-op, as released
    assert float(upd["norm"]["scale"][0]) < 0.0


@pytest.mark.slow  # ≈ 2 min on the loaded 2-core machine
def test_kadapter_runs_trains_only_adapters_and_is_causal(key):
    base = tiny(layers=3)
    model = kadapter.KAdapter(base, kadapter.KAdapterConfig(dropout=0.9))
    assert model.taps == (1, 1, 3)
    graphdef, train, frozen, rest = nnx.split(model, kadapter.adapter_filter(), nnx.Param, ...)
    paths = {"/".join(map(str, p)) for p, _ in nnx.to_flat_state(train)}
    assert paths and all(p.startswith(("blocks", "out_norm")) for p in paths)
    fn = jax.jit(kadapter.make_kadapter_logits_fn(graphdef, rest))
    tokens = jax.random.randint(key, (2, 6), 0, V)
    logits = fn(train, frozen, {"tokens": tokens}, None)
    changed = fn(train, frozen, {"tokens": tokens.at[:, 4:].set(0)}, None)
    np.testing.assert_allclose(np.asarray(logits[:, :4]), np.asarray(changed[:, :4]), rtol=F32.exact_rtol)
    dropped = fn(train, frozen, {"tokens": tokens}, jax.random.key(1))
    assert bool(jnp.all(jnp.isfinite(dropped))) and not np.allclose(np.asarray(dropped), np.asarray(logits))
    with pytest.raises(ValueError, match="taps"):
        kadapter.KAdapterConfig(taps=(0, 9)).tap_layers(3)


def test_method_names_resolve_to_the_ckl_hooks():
    m = resolve("TAALM + K-Adapter + Mix-review + RecAdam", "ckl")
    assert (m.token_loss, m.update, m.replay, m.optimizer) == ("taalm", "kadapter", "mix-review", "recadam")
    assert m.hooks.documents is not None and cm.needs_phi(m) and resolve("TAALM", "ckl").hooks.documents is None
    assert resolve("RHO-1", "ckl", MethodOptions(rho_mode="taalm_code")).options.rho_mode == "taalm_code"
    k = resolve("TAALM + K-Adapter (dropout 0.1)", "ckl")
    assert (k.token_loss, k.update, k.options.kadapter_dropout) == ("taalm", "kadapter", 0.1)
    assert resolve("K-Adapter", "ckl").options.kadapter_dropout is None
    r = resolve("RHO-1 (taalm_code)", "ckl")
    assert (r.token_loss, r.options.rho_mode) == ("rho1", "taalm_code")
    assert resolve("RHO-1", "ckl").options.rho_mode == "faithful"
    assert resolve("Uniform + Mix-review", "ckl").token_loss == "uniform"
    f = resolve("Finetune", "ckl")
    assert (f.replay, f.token_loss, f.update, f.optimizer) == (None, "nll", None, "adamw")
    batch = {"target_mask": jnp.array([[0.0, 1.0, 1.0]]), "object_mask": jnp.array([[0.0, 0.0, 1.0]]),
             "phi_weights": jnp.array([[0.5, 0.5, 0.25]])}
    weights = lambda name: cm.method_objective(resolve(name, "ckl"), None)[1](batch)["token_weights"]  # noqa: E731
    np.testing.assert_array_equal(np.asarray(weights("Uniform")), [[0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(np.asarray(weights("TAALM")), [[0.0, 0.5, 0.25]])
    np.testing.assert_array_equal(np.asarray(weights("Oracle")), [[0.0, 0.0, 1.0]])
    assert f.hooks.token_objective is None
    with pytest.raises(ValueError, match="not available in the ckl recipe"):
        resolve("TAALM + EWC", "ckl")
    with pytest.raises(ValueError, match="both set the token_objective hook"):
        resolve("TAALM + Oracle", "ckl")
    with pytest.raises(ValueError, match="--methods: unknown method component 'Finetun'"):
        resolve_each(("Finetune", "Finetun"), "ckl", flag="--methods")


def _encoded(key, n, length, obj_at):
    ids = [np.asarray(jax.random.randint(jax.random.fold_in(key, i), (length,), 1, V), np.int32) for i in range(n)]
    masks = []
    for _ in range(n):
        m = np.zeros(length, np.float32)
        m[obj_at] = 1.0
        masks.append(m)
    return Encoded(tuple(ids), tuple(masks), 0)


@pytest.mark.parametrize("name", ["Finetune", "TAALM + Mix-review",  # plain, and weighted + review: default
                                  *(pytest.param(n, marks=pytest.mark.slow)  # ≈ 30 s each on the loaded CPU
                                    for n in ("Oracle", "RHO-1", "RecAdam", "K-Adapter"))])
def test_lama_ckl_protocol_runs_every_method(key, name):
    docs = _encoded(key, 6, 9, [6, 7])
    probes = {"to_learn": _encoded(jax.random.fold_in(key, 1), 4, 5, [3, 4]),
              "not_to_forget": _encoded(jax.random.fold_in(key, 2), 4, 5, [4])}
    weights = tuple(np.full(9, 0.5, np.float32) for _ in range(6))
    cfg = ckl.CKLConfig(epochs=2, batch_size=4, lr=1e-2, eval_batch=4)
    method = resolve(name, "ckl")
    theta = cm.build_theta(tiny(), method, LoRAConfig(rank=2, alpha=2.0, dropout=0.1), kadapter.KAdapterConfig())
    res = ckl.run_lama_ckl(theta, method, ckl.Stream(docs, weights), probes, cfg, review=ckl.Stream(docs, weights))
    assert [h["epoch"] for h in res["history"]] == [0, 1, 2]
    assert np.isfinite(res["history"][-1]["train_loss"])
    assert 0 <= res["summary"]["top_acc"] <= 1 and res["summary"]["epoch"] in (0, 1, 2)


def test_epoch_batches_reshuffle_and_wrap():
    a = ckl.epoch_batches(10, 4, 1, 42, False)
    b = ckl.epoch_batches(10, 4, 2, 42, False)
    assert [len(x) for x in a] == [4, 4, 4] and sorted(sum(a, [])[:10]) == list(range(10)) and a != b
    assert ckl.epoch_batches(10, 4, 1, 42, True) == ckl.epoch_batches(10, 4, 2, 42, True)


def test_temporalwiki_protocol_carries_theta_and_scores_before_after(key):
    docs = _encoded(key, 4, 9, [6, 7])
    probe = _encoded(jax.random.fold_in(key, 1), 4, 5, [3, 4])
    periods = [ckl.Period(f"p{i}", ckl.Stream(docs), probe, probe) for i in range(2)]
    method = resolve("Finetune", "ckl")
    theta = cm.build_theta(tiny(), method, LoRAConfig(rank=2, alpha=2.0, dropout=0.0), kadapter.KAdapterConfig())
    out = ckl.run_temporalwiki(theta, method, periods, ckl.CKLConfig(epochs=1, batch_size=4, lr=1e-2, eval_batch=4))
    assert [r["period"] for r in out] == ["p0", "p1"]
    np.testing.assert_allclose(out[1]["before"]["changed/nll"], out[0]["after"]["changed/nll"], rtol=F32.exact_rtol)
    assert out[0]["after"]["changed/nll"] != out[0]["before"]["changed/nll"]
