"""LwF (continual/lwf.py): the distillation term is zero, with zero gradient, at θ = θ0; its gradient in the
student logits is the closed form (λ T / N)(q − p0) and matches a central finite difference (float64); the hook
adds θ0's tempered log-probabilities and, at the start of training, the LwF loss is the plain NLL."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.continual.lwf import TEACHER, distillation, make_lwf_loss, teacher_logp
from cfka_jax.runs import methods
from cfka_jax.runs.method import resolve
from cfka_jax.train.step import make_eval_logits, token_nll_loss
from tests.helpers import batch, split, tiny_model
from tests.tolerances import F32, F64

B, S, V = 3, 7, 11


def _case(key, dtype):
    k1, k2 = jax.random.split(key)
    z0 = jax.random.normal(k1, (B, S, V), dtype) * 2
    z = jax.random.normal(k2, (B, S, V), dtype) * 2
    mask = jnp.ones((B, S), dtype).at[:, 0].set(0).at[1, 4:].set(0)  # row 1: four targets only
    return z0, z, mask


@pytest.mark.parametrize("T", [1.0, 2.5])
def test_distillation_is_zero_with_zero_gradient_at_theta0(key, T):
    z0, _, mask = _case(key, jnp.float32)
    logp0 = teacher_logp(T)(z0, None)
    kl, count = jax.jit(lambda z: distillation(z, logp0, mask, T))(z0)
    assert float(count) == float(jnp.sum(mask[:, 1:]))
    np.testing.assert_allclose(float(kl), 0.0, atol=F32.op_atol)
    grad = jax.jit(jax.grad(lambda z: distillation(z, logp0, mask, T)[0]))(z0)
    np.testing.assert_allclose(np.asarray(grad), 0.0, atol=F32.op_atol)


@pytest.mark.parametrize("T, lam", [(1.0, 1.0), (2.0, 0.3)])
def test_gradient_is_the_closed_form_and_a_finite_difference(key, x64, T, lam):
    z0, z, mask = _case(key, jnp.float64)
    logp0 = jax.nn.log_softmax(z0 / T, axis=-1)
    term = lambda z: lam * T ** 2 * distillation(z, logp0, mask, T)[0]  # noqa: E731
    grad = jax.jit(jax.grad(term))(z)
    q, p0 = jax.nn.softmax(z / T, axis=-1), jnp.exp(logp0)
    n = jnp.sum(mask[:, 1:])
    m = jnp.concatenate([mask[:, 1:], jnp.zeros((B, 1))], axis=1)[..., None]  # position s predicts token s + 1
    want = lam * T / n * (q - p0) * m
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want), rtol=F64.exact_rtol, atol=F64.zero_sum_atol)
    direction = jax.random.normal(jax.random.fold_in(key, 9), z.shape, jnp.float64)
    h = 1e-5
    fd = (term(z + h * direction) - term(z - h * direction)) / (2 * h)
    np.testing.assert_allclose(float(fd), float(jnp.sum(grad * direction)), rtol=F64.linearisation_rtol)
    kl = distillation(z, logp0, mask, T)[0]
    direct = jnp.sum(jnp.sum(p0 * (logp0 - jax.nn.log_softmax(z / T, axis=-1)), -1)[:, :-1] * mask[:, 1:]) / n
    np.testing.assert_allclose(float(kl), float(direct), rtol=F64.direct_rtol)
    assert float(kl) > 0.0


def test_hook_distils_towards_the_start_model():
    """Corpus CPT's hook: every batch gains θ0's tempered log-probabilities; at θ0 the loss is the plain NLL, and
    a moved model pays λ T² KL on top of its NLL."""
    model, b = tiny_model(4), batch(6)
    hooks = methods.train_hooks(resolve("lwf(T=2 weight=0.5)", "corpus"), model, lambda t: b)
    bt = hooks.batch_at(0)
    graphdef, params, rest = split(model)
    logits = make_eval_logits(graphdef, rest)(params, b)
    np.testing.assert_allclose(np.asarray(bt[TEACHER]), np.asarray(jax.nn.log_softmax(logits / 2.0, axis=-1)),
                               atol=F32.op_atol)
    got, count = hooks.loss_fn(logits, bt)
    want, want_count = token_nll_loss(logits, b)
    np.testing.assert_allclose(float(got), float(want), rtol=F32.exact_rtol)
    assert float(count) == float(want_count)
    moved = logits + jax.random.normal(jax.random.key(3), logits.shape)
    kl = distillation(moved, bt[TEACHER], b["target_mask"], 2.0)[0]
    np.testing.assert_allclose(float(hooks.loss_fn(moved, bt)[0]),
                               float(token_nll_loss(moved, b)[0] + 0.5 * 4.0 * kl), rtol=F32.exact_rtol)
    assert float(kl) > 0.0


def test_make_lwf_loss_adds_to_any_base_loss():
    z0, z, mask = _case(jax.random.key(1), jnp.float32)
    tokens = jnp.zeros((B, S), jnp.int32)
    bt = {"tokens": tokens, "target_mask": mask, TEACHER: teacher_logp(1.0)(z0, None)}
    base = lambda logits, batch: (jnp.float32(1.5), jnp.float32(2.0))  # noqa: E731
    loss, count = make_lwf_loss(base, 1.0, 0.0)(z, bt)
    assert (float(loss), float(count)) == (1.5, 2.0)  # weight 0: the base loss alone
