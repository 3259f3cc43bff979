"""The two-task world of spec §6: P(A..D) on hand-built logits, the canonical-format rule, markers, the ifmass force."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry import formats
from cfka_jax.geometry.formats import ANS, BOS, EOS, LETTERS, P_MARK, Q, R_MARK
from tests.tolerances import F32


def _row(vocab: int, values: dict[int, float]) -> np.ndarray:
    row = np.full(vocab, -np.inf, np.float32)
    for i, v in values.items():
        row[i] = v
    return row


def test_choice_mass_on_a_hand_built_logit_row():
    # logits log(0.1), log(0.2), log(0.3), log(0.15) on A..D, log(0.25) on EOS: P(A..D) = 0.75
    row = _row(20, {LETTERS[0]: np.log(0.1), LETTERS[1]: np.log(0.2), LETTERS[2]: np.log(0.3),
                    LETTERS[3]: np.log(0.15), EOS: np.log(0.25)})
    got = jax.jit(formats.choice_mass)(jnp.asarray(row))
    np.testing.assert_allclose(float(got), 0.75, rtol=0, atol=F32.few_ulps)
    # shift invariance and a batch of rows: uniform over 20 ids gives 4/20
    rows = jnp.stack([jnp.asarray(row) + 3.0, jnp.zeros(20)])
    np.testing.assert_allclose(np.asarray(formats.choice_mass(rows)), [0.75, 0.2], rtol=0, atol=F32.few_ulps)
    assert int(formats.letter_argmax(jnp.asarray(row))) == 2


def test_canonical_needs_a_letter_then_eos():
    letter = jnp.asarray(_row(20, {LETTERS[1]: 2.0, 15: 1.0}))
    content = jnp.asarray(_row(20, {LETTERS[1]: 1.0, 15: 2.0}))
    eos = jnp.asarray(_row(20, {EOS: 1.0, 15: 0.5}))
    more = jnp.asarray(_row(20, {EOS: 0.5, 15: 1.0}))
    got = formats.canonical(jnp.stack([letter, letter, content]), jnp.stack([eos, more, eos]))
    assert np.asarray(got).tolist() == [True, False, False]


def test_ifmass_force_is_the_gradient_of_log_letter_mass(key):
    logits = jax.random.normal(key, (3, 23))
    want = jax.vmap(jax.grad(lambda z: jnp.log(formats.choice_mass(z))))(logits)
    np.testing.assert_allclose(np.asarray(formats.ifmass_force(logits)), np.asarray(want), rtol=0,
                               atol=F32.few_ulps)
    np.testing.assert_allclose(np.asarray(jnp.sum(formats.ifmass_force(logits), -1)), 0.0, atol=F32.few_ulps)


def test_world_layout_markers_and_isolation():
    cfg = formats.FormatWorldConfig(subjects=3, entities_per_subject=5, content_tokens=9, new_entities=4,
                                    new_train=30, new_test=6, answer_len=5, seed=3)
    w = formats.make_world(cfg)
    assert w.old.shape == (15, formats.OLD_LEN) and w.new_train.shape == (30, cfg.new_len)
    assert (w.old[:, 1] == Q).all() and (w.old[:, 12] == ANS).all() and (w.new_train[:, 12] == ANS).all()
    assert (w.old[:, 0] == BOS).all() and (w.old[:, -1] == EOS).all() and (w.new_train[:, -1] == EOS).all()
    assert (w.old[:, [4, 6, 8, 10]] == np.asarray(LETTERS)).all()
    # the answer letter points at the choice holding the entity's value; choices are distinct
    choice = w.old[np.arange(15), 5 + 2 * w.old_letter]
    assert (w.old[:, 13] == np.asarray(LETTERS)[w.old_letter]).all()
    assert all(len(set(r[[5, 7, 9, 11]])) == 4 for r in w.old) and (choice >= cfg.content0).all()
    # isolation changes the two markers only
    assert (w.iso_train[:, 1] == P_MARK).all() and (w.iso_train[:, 12] == R_MARK).all()
    keep = np.ones(cfg.new_len, bool)
    keep[[1, 12]] = False
    assert (w.iso_train[:, keep] == w.new_train[:, keep]).all()
    assert w.new_train.max() < cfg.vocab_size and not np.isin(w.new_train, LETTERS).any()
    # response mask: the targets after the answer marker, EOS included
    m = formats.response_mask(w.iso_train)
    assert (m[:, 13:] == 1).all() and (m[:, :13] == 0).all()
    # the last subject has weight 0 in the default linear weights
    assert cfg.weights[-1] == 0 and not (w.new_train_subject == 2).any()


def test_bad_world_configs_are_refused():
    with pytest.raises(ValueError, match="content_tokens"):
        formats.FormatWorldConfig(content_tokens=3)
    with pytest.raises(ValueError, match="subject_weights"):
        formats.FormatWorldConfig(subjects=2, subject_weights=(1.0,))
