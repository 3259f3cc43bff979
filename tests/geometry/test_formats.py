"""The two-task world of spec §6: P(A..D) on hand-built logits, the canonical-format rule, markers, the ifmass force."""

import dataclasses
import itertools

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


def _digest(w) -> str:
    import hashlib

    h = hashlib.sha256()
    for a in (w.old, w.old_subject, w.old_letter, w.new_train, w.new_train_subject, w.new_test, w.new_test_subject,
              w.iso_train, w.iso_test):
        h.update(np.ascontiguousarray(a, np.int64).tobytes())
    return h.hexdigest()[:16]


_SMALL = {"subjects": 3, "entities_per_subject": 5, "content_tokens": 9, "new_entities": 4, "new_train": 30,
          "new_test": 6, "answer_len": 5, "seed": 3}


def test_default_world_is_unchanged_by_the_cue_option():
    # golden: the same digest from formats.py at commit 434ba9e, before the graded cue existed (numpy 2.4.6)
    cfg = formats.FormatWorldConfig(**_SMALL)
    assert _digest(formats.make_world(cfg)) == "5d521868e297e6b4"
    assert (cfg.old_len, cfg.old_answer_pos, cfg.new_len, cfg.stretch) == (15, 13, 6 + 8 + 5, 0)
    assert cfg.vocab_size == cfg.content0 + cfg.content_tokens and (cfg.similarity == 0).all()


def test_graded_cue_shares_the_stated_fraction_at_nested_positions():
    m = 7
    cfg = formats.FormatWorldConfig(**{**_SMALL, "subjects": 8}, cue_len=m, subject_weights=(1.0,) * 8)
    w, plain = formats.make_world(cfg), formats.make_world(dataclasses.replace(cfg, cue_len=0))
    np.testing.assert_array_equal(cfg.shared, np.arange(8))
    np.testing.assert_allclose(cfg.similarity, np.arange(8) / 7, rtol=0, atol=0)
    new_cue = w.new_train[0, 1:1 + m]
    assert (w.new_train[:, 1:1 + m] == new_cue).all() and (w.new_test[:, 1:1 + m] == new_cue).all()
    assert (new_cue == cfg.cue0 + np.arange(m)).all() and w.old.max() < cfg.vocab_size
    shared_sets = []
    for s in range(8):
        cue = w.old[w.old_subject == s, 1:1 + m]
        assert (cue == cue[0]).all()  # one cue per subject
        same = cue[0] == new_cue
        assert same.mean() == cfg.similarity[s] == s / 7  # the knob: the fraction of the new cue it holds
        assert (cue[0][~same] == cfg.cue0 + m + np.flatnonzero(~same)).all()  # elsewhere the old task's own ids
        shared_sets.append(set(np.flatnonzero(same)))
        assert shared_sets[-1] == set(w.cue_order[:s].tolist())
    assert all(a <= b for a, b in itertools.pairwise(shared_sets))  # nested: k_s ≤ k_t ⇒ S_s ⊆ S_t
    # everything but the cue is the default world's: the cue columns back to Q give its items
    back = lambda t: np.concatenate([t[:, :1], np.full((len(t), 1), Q, t.dtype), t[:, 1 + m:]], axis=1)
    for a, b in ((w.old, plain.old), (w.new_train, plain.new_train), (w.new_test, plain.new_test)):
        np.testing.assert_array_equal(back(a), b)
    # the two tasks' ANS at one position, the letter right after it; the response mask follows
    assert (cfg.old_len, cfg.old_answer_pos) == (15 + m - 1, 13 + m - 1) and w.old.shape[1] == cfg.old_len
    assert (w.old[:, cfg.old_answer_pos - 1] == ANS).all() and (w.new_train[:, cfg.old_answer_pos - 1] == ANS).all()
    assert (w.old[:, cfg.old_answer_pos] == np.asarray(LETTERS)[w.old_letter]).all()
    mask = formats.response_mask(w.new_train)
    assert (mask[:, cfg.old_answer_pos:] == 1).all() and (mask[:, :cfg.old_answer_pos] == 0).all()


def test_graded_cue_custom_shares_and_bad_configs():
    cfg = formats.FormatWorldConfig(**_SMALL, cue_len=4, cue_shared=(4, 0, 2))
    w = formats.make_world(cfg)
    new_cue = w.new_train[0, 1:5]
    assert [int((w.old[w.old_subject == s][0, 1:5] == new_cue).sum()) for s in range(3)] == [4, 0, 2]
    for bad in ({"cue_len": -1}, {"cue_shared": (0, 1, 1)}, {"cue_len": 2, "cue_shared": (0, 1)},
                {"cue_len": 2, "cue_shared": (0, 1, 3)}):
        with pytest.raises(ValueError, match="cue"):
            formats.FormatWorldConfig(**{**_SMALL, **bad})


def test_old_task_metrics_read_the_graded_answer_position():
    """An oracle that puts its mass on the true next token: P(A..D) 1, canonical, content right, NLL ≈ 0, at the
    cue world's answer position (and not at the default 13)."""
    cfg = formats.FormatWorldConfig(**_SMALL, cue_len=3)
    w = formats.make_world(cfg)
    old = jnp.asarray(w.old)

    def oracle(tokens):
        nxt = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)
        return 30.0 * jax.nn.one_hot(nxt, cfg.vocab_size)

    m = jax.jit(lambda t, l: formats.old_task_metrics(oracle, t, l, answer_pos=cfg.old_answer_pos))(
        old, jnp.asarray(w.old_letter))
    assert np.asarray(m["canonical"]).all() and np.asarray(m["content"]).all()
    np.testing.assert_allclose(np.asarray(m["choice_mass"]), 1.0, rtol=0, atol=F32.few_ulps)
    np.testing.assert_allclose(np.asarray(m["nll"]), 0.0, rtol=0, atol=F32.few_ulps)
    wrong = formats.old_task_metrics(oracle, old, jnp.asarray(w.old_letter))  # the default world's position
    assert not np.asarray(wrong["canonical"]).any()
