import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.train.losses import masked_mean_nll, next_token_nll
from cfka_jax.eval.fta import FTACounts, add_counts, exact_match, fta_counts, summarize
from tests.tolerances import F32


def test_masked_mean_nll_matches_manual(key):
    logits = jax.random.normal(key, (2, 5, 7))
    tokens = jnp.asarray([[1, 2, 3, 4, 5], [6, 0, 1, 2, 3]], jnp.int32)
    mask = jnp.asarray([[0, 1, 1, 0, 1], [0, 0, 1, 1, 1]], jnp.float32)
    loss, count = jax.jit(masked_mean_nll)(logits, tokens, mask)
    logp = np.asarray(jax.nn.log_softmax(logits, -1))
    manual = [-logp[b, s - 1, int(tokens[b, s])] for b in range(2) for s in range(1, 5) if mask[b, s]]
    assert float(count) == len(manual)
    np.testing.assert_allclose(loss, np.mean(manual), rtol=F32.exact_rtol)
    assert next_token_nll(logits, tokens).shape == (2, 4)


def test_all_masked_batch_has_zero_loss(key):
    logits = jax.random.normal(key, (1, 4, 5))
    loss, count = masked_mean_nll(logits, jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 4), jnp.float32))
    assert float(loss) == 0.0 and float(count) == 0.0


def test_fta_on_hand_built_case():
    # vocabulary 4; row 0: positions 1 and 3 hold attribute 0 and 1; row 1: position 0 is dropped, position 2 attr 1
    logits = jnp.full((2, 4, 4), -10.0)
    logits = logits.at[0, 0, 2].set(10.0)  # predicts token 2 at position 1 (correct)
    logits = logits.at[0, 2, 1].set(10.0)  # predicts token 1 at position 3 (target 3: wrong)
    logits = logits.at[1, 1, :].set(0.0)  # uniform at position 2: soft = 1/4
    tokens = jnp.asarray([[0, 2, 0, 3], [1, 0, 3, 0]], jnp.int32)
    attr = jnp.asarray([[-1, 0, -1, 1], [1, -1, 1, -1]], jnp.int32)
    mask = jnp.stack([attr == a for a in range(2)]).astype(jnp.float32)
    c = jax.jit(fta_counts)(logits, tokens, mask)
    np.testing.assert_allclose(c.count, [1.0, 2.0])
    np.testing.assert_allclose(c.hard, [1.0, 0.0])  # row 0 pos 3 predicts 1 ≠ 3; uniform row: argmax 0 ≠ 3
    np.testing.assert_allclose(c.soft, [1.0, 0.25], atol=F32.few_ulps)
    s = summarize(add_counts(c, FTACounts(*(jnp.zeros(2),) * 3)), ("birthplace", "major"))
    assert s["hFTA/birthplace"] == 1.0 and s["hFTA/major"] == 0.0
    assert abs(s["hFTA"] - 1 / 3) < F32.one_ulp and abs(s["sFTA"] - 1.25 / 3) < F32.few_ulps and s["n"] == 3.0


def test_exact_match_is_substring():
    assert exact_match("was born in New York, NY in 1990", " New York, NY")
    assert not exact_match("was born in Boston", " New York, NY")
