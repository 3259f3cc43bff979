"""The out-of-domain-probe world of the long-run transmission study (cfka_jax/geometry/ood.py) and its resets."""

import dataclasses

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


def _digest(world) -> str:
    """sha256 (16 hex) of every array of a world, its offsets, vocabulary size and width."""
    import hashlib

    h = hashlib.sha256()
    for name in TASKS:
        for k in ("pt", "sft", "probe"):
            h.update(np.ascontiguousarray(world.tasks[name][k].tokens).tobytes())
            h.update(np.ascontiguousarray(world.tasks[name][k].mask).tobytes())
    for split in (world.pt_mix, world.cpt, world.bio):
        h.update(split.tokens.tobytes())
        h.update(split.mask.tobytes())
    h.update(repr(sorted(world.offsets.items())).encode() + repr((world.vocab_size, world.seq_len)).encode())
    return h.hexdigest()[:16]


SMOKE = dict(pt=12, sft=6, probe=6, classes=3, entities=6, parallel=4)


@pytest.mark.parametrize("kwargs, digest", [
    (SMOKE, "ec6ee3bd7da30d89"), ({**SMOKE, "seed": 1}, "47fd0156ef2bf790"), ({}, "30edeec3bc119400"),
    ({"ident_rule": "permute"}, "30edeec3bc119400")])
def test_the_default_world_is_the_recorded_one_byte_for_byte(kwargs, digest):
    # digests of the world before ident_rule existed (the smoke scale's at seeds 0 and 1, the small scale's at 0)
    assert _digest(make_world(OODWorldConfig(**kwargs))) == digest


def _token_maps(split, m: int, n: int) -> dict:
    """Per template (the class): {(position i, input token x_i): response tokens seen at i}."""
    maps: dict = {}
    for row in split.tokens:
        x, y = row[1 + m:1 + m + n], row[2 + m + n:2 + m + 2 * n]
        for i in range(n):
            maps.setdefault(tuple(row[1:1 + m]), {}).setdefault(int(x[i]), set()).add(int(y[i]))
    return maps


@pytest.mark.parametrize("seed", [0, 1])
def test_map_rule_changes_only_the_identification_responses(seed):
    cfg = OODWorldConfig(pt=60, sft=30, probe=30, classes=3, entities=6, parallel=4, seed=seed)
    perm, mapped = make_world(cfg), make_world(dataclasses.replace(cfg, ident_rule="map"))
    assert (perm.offsets, perm.vocab_size, perm.seq_len) == (mapped.offsets, mapped.vocab_size, mapped.seq_len)
    for a, b in ((perm.cpt, mapped.cpt), (perm.bio, mapped.bio), *((perm.tasks["longform"][k], mapped.tasks[
            "longform"][k]) for k in ("pt", "sft", "probe"))):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.mask, b.mask)
    for name, m, n in (("ident_a", 4, 5), ("ident_b", 3, 6)):
        for k in ("pt", "sft", "probe"):
            a, b = perm.tasks[name][k], mapped.tasks[name][k]
            np.testing.assert_array_equal(a.mask, b.mask)
            # the prompt (template, x, SEP) is the same draw; the response is what the rule makes of it
            np.testing.assert_array_equal(a.tokens[:, :2 + m + n], b.tokens[:, :2 + m + n])
            assert (a.mask[:, 2 + m + n:2 + m + 2 * n] == 1).all() and not a.mask[:, :2 + m + n].any()
        rows = {k: mapped.tasks[name][k] for k in ("pt", "sft", "probe")}
        maps = [_token_maps(rows[k], m, n) for k in rows]
        templates = set(maps[0])
        assert len(templates) == 3 and all(set(mp) == templates for mp in maps)
        for t in templates:  # map: y_i = π_c(x_i), one token map per class, the same at every position and split
            merged: dict = {}
            for mp in maps:
                for x, ys in mp[t].items():
                    merged.setdefault(x, set()).update(ys)
            assert all(len(ys) == 1 for ys in merged.values()), (name, t)
            assert len({next(iter(ys)) for ys in merged.values()}) == len(merged)  # π_c is a permutation
        # permute is not position-aligned: some class sends one input token to two response tokens
        assert any(len(ys) > 1 for mp in _token_maps(perm.tasks[name]["pt"], m, n).values() for ys in mp.values())


def test_config_refuses_an_unknown_rule():
    with pytest.raises(ValueError, match="ident_rule must be one of"):
        OODWorldConfig(ident_rule="swap")
