"""The out-of-domain-probe world of the long-run transmission study (cfka_jax/geometry/ood.py) and its resets."""

import numpy as np
import pytest

from cfka_jax.geometry.ood import BOS, PAD, TASKS, OODWorldConfig, lm_mask, make_world, remap, token_blocks


@pytest.fixture(scope="module")
def world():
    return make_world(OODWorldConfig(pt=24, sft=12, probe=12, classes=3, entities=8, parallel=6))


def test_remap_keeps_pad_and_bos_and_shifts_the_rest():
    np.testing.assert_array_equal(remap(np.array([[0, 1, 2, 5]]), 40), [[0, 1, 40, 43]])


def test_lm_mask_marks_every_non_pad_target_but_column_zero():
    np.testing.assert_array_equal(lm_mask(np.array([[1, 7, 8, 0, 0]])), [[0, 1, 1, 0, 0]])


def test_tasks_and_domain_use_disjoint_token_blocks(world):
    blocks = token_blocks(world)
    names = [*TASKS, "domain"]
    for i, a in enumerate(names):
        assert blocks[a] and max(blocks[a]) < world.vocab_size
        for b in names[i + 1:]:
            assert not blocks[a] & blocks[b], (a, b)
    # the CPT corpus holds no out-of-domain token: CPT is on the domain only
    assert not set(np.unique(world.cpt.tokens).tolist()) & set().union(*(blocks[t] for t in TASKS))
    assert set(np.unique(world.pt_mix.tokens).tolist()) - {PAD, BOS} <= set().union(*(blocks[t] for t in TASKS))


def test_splits_are_disjoint_and_masks_cover_only_responses(world):
    for name in TASKS:
        parts = world.tasks[name]
        assert [len(parts[k]) for k in ("pt", "sft", "probe")] == [24, 12, 12]
        rows = {k: {r.tobytes() for r in parts[k].tokens} for k in parts}
        assert not rows["probe"] & rows["pt"] and not rows["probe"] & rows["sft"], name
        for split in parts.values():
            m = split.mask > 0
            assert m.any(axis=1).all() and not m[:, 0].any()
            assert (split.tokens[m] != PAD).all()
            first = m.argmax(axis=1)  # the response is a suffix: nothing masked after it starts is a prompt token
            assert all(m[i, first[i]:].sum() == m[i].sum() for i in range(len(m)))
    assert world.tasks["ident_a"]["probe"].mask.sum(1).tolist() == [5.0] * 12
    assert world.bio.mask.sum(1).tolist() == [3.0] * len(world.bio)  # two value tokens and EOS


def test_world_is_deterministic_in_the_seed():
    a, b = make_world(OODWorldConfig(pt=6, sft=6, probe=6, classes=3, entities=4, parallel=2)), \
        make_world(OODWorldConfig(pt=6, sft=6, probe=6, classes=3, entities=4, parallel=2))
    c = make_world(OODWorldConfig(pt=6, sft=6, probe=6, classes=3, entities=4, parallel=2, seed=1))
    np.testing.assert_array_equal(a.pt_mix.tokens, b.pt_mix.tokens)
    assert not np.array_equal(a.pt_mix.tokens, c.pt_mix.tokens)


def test_config_refuses_splits_smaller_than_the_classes():
    with pytest.raises(ValueError, match="probe"):
        OODWorldConfig(probe=2, classes=3)


def test_last4_restores_four_blocks_and_paper_last4_three():
    from cfka_jax.experiments.geometry_transmission_ood import reset_table

    table = reset_table(6)
    assert table["last4"].blocks == 4 and table["paper_last4"].blocks == 3
    assert table["last4"].mode == table["paper_last4"].mode == "readout"
    assert "last4" not in reset_table(3) and "paper_last4" not in reset_table(2)
