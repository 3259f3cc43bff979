"""The premise of the transmission study (§7.5): probe accuracy, position-only chance and the margin."""

import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry.plasticity import PREMISE_MARGIN, knows_task, position_chance, probe_accuracy


def test_position_chance_is_the_best_guess_per_column():
    tokens = np.asarray([[1, 5, 7, 9], [1, 5, 8, 9], [1, 6, 8, 9], [1, 4, 8, 0]])
    mask = np.asarray([[0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0]], np.float32)
    assert position_chance(tokens, mask) == (2 + 3) / 8  # column 1: 5 twice; column 2: 8 three times
    mask[:, 3] = 1.0  # a fixed EOS-like column is always guessed right, except row 3's 0
    assert position_chance(tokens, mask) == (2 + 3 + 3) / 12
    for bad_tokens, bad_mask in ((tokens, np.zeros_like(mask)), (tokens[:, :3], mask)):
        with pytest.raises(ValueError, match="position_chance"):
            position_chance(bad_tokens, bad_mask)


def test_probe_accuracy_reads_the_previous_positions_argmax_on_supervised_tokens():
    tokens = jnp.asarray([[1, 2, 3, 0], [1, 3, 3, 2]], jnp.int32)
    # logits[b, s] put all mass on `guess[b, s]`: the prediction of token s + 1
    guess = np.asarray([[2, 0, 0, 0], [3, 3, 1, 0]])
    logits = jnp.asarray(np.eye(4)[guess], jnp.float32)
    mask = jnp.asarray([[0, 1, 1, 0], [0, 1, 1, 1]], jnp.float32)
    batch = {"tokens": tokens, "attention_mask": jnp.ones_like(tokens), "target_mask": mask}
    acc = probe_accuracy(lambda p, t, m: logits, None, [batch])
    assert acc == pytest.approx(3 / 5)  # right: row 0 pos 1, row 1 pos 1 and 2; wrong: row 0 pos 2, row 1 pos 3
    with pytest.raises(ValueError, match="no supervised token"):
        probe_accuracy(lambda p, t, m: logits, None, [{**batch, "target_mask": jnp.zeros_like(mask)}])


def test_knows_task_needs_half_the_way_from_chance_to_one():
    assert PREMISE_MARGIN == 0.5
    assert knows_task(0.61, 0.2) and not knows_task(0.59, 0.2) and knows_task(1.0, 1.0)  # the line: 0.6
