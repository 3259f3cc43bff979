"""The Biography world: determinism, populations, names, sentence order, shuffle rule, replay pools."""

import dataclasses
import json

import pandas as pd
import pytest

from cfka_jax.data.biography import BiographyConfig, generate_world, replay_pool
from cfka_jax.data.templates import ATTRIBUTES, PLACEHOLDERS, fill, project_templates

from tests.data.conftest import SMOKE


def test_same_seed_same_world_different_seed_different(world):
    again = generate_world(SMOKE)
    assert again == world
    other = generate_world(dataclasses.replace(SMOKE, seed=8))
    assert [b.text for b in other.pt_train] != [b.text for b in world.pt_train]
    assert [p.fullname for p in other.people] != [p.fullname for p in world.people]


def test_sizes_numbers_and_order(world):
    k, p, c = SMOKE.train_bios_per_person, SMOKE.num_pt_people, SMOKE.num_cpt_people
    assert (len(world.pt_train), len(world.pt_test), len(world.cpt_train), len(world.cpt_test)) == \
        (p * k, p * 3, c * k, c * 3)
    assert [b.number for b in world.pt_train[:k]] == list(range(1, k + 1))
    assert [b.number for b in world.pt_test[:3]] == [0, 1, 2]
    assert [b.pid for b in world.pt_train] == [i for i in range(p) for _ in range(k)]
    assert [b.pid for b in world.cpt_test] == [i for i in range(p, p + c) for _ in range(3)]


def test_unique_names_and_disjoint_populations(world):
    names = [q.fullname for q in world.people]
    assert len(set(names)) == len(names)
    pt = {b.pid for b in world.pt_train + world.pt_test}
    cpt = {b.pid for b in world.cpt_train + world.cpt_test}
    assert not pt & cpt and all(world.people[i].is_original for i in pt)
    assert not any(world.people[i].is_original for i in cpt)
    first, mid, last = names[0].split(" ")
    assert len(mid) == 2 and mid.endswith(".") and mid[0].isupper()


def test_too_many_people_for_names(tmp_path):
    path = tmp_path / "pools.json"
    path.write_text(json.dumps({"first_name": ["A"], "middle_name": ["B."], "last_name": ["C", "D"]}))
    with pytest.raises(ValueError, match="unique names"):
        generate_world(BiographyConfig(2, 1, pool_path=str(path)))


def test_biography_text_is_filled_templates_in_order(world):
    temps = project_templates()
    for b in world.pt_train[:10] + world.cpt_test[:6]:
        person = world.people[b.pid]
        sentences = [fill(temps.by_attribute[a][b.templates[a]], ATTRIBUTES[a], person.fullname, person.values[a])
                     for a in b.order]
        assert b.text == " ".join(sentences) and "[" not in b.text
        assert sorted(b.order) == list(range(5))
    month, day, year = world.people[0].values[1].replace(",", "").split(" ")
    assert 1 <= int(day) <= 28 and 1900 <= int(year) <= 2099 and month[0].isupper()


@pytest.mark.parametrize("shuffle_test0", [True, False])
def test_shuffle_rule(shuffle_test0):
    cfg = BiographyConfig(60, 0, train_bios_per_person=5, seed=3, shuffle_test0=shuffle_test0)
    # reference: shuffled iff i <= augment_times - 3 = K, so test Number 0 (i = K) is shuffled too (off-by-one)
    assert [cfg.is_shuffled(i) for i in range(8)] == [True] * 5 + [shuffle_test0, False, False]
    w = generate_world(cfg)
    canonical = tuple(range(5))
    tests = {n: [b.order for b in w.pt_test if b.number == n] for n in (0, 1, 2)}
    assert all(o == canonical for n in (1, 2) for o in tests[n])
    # 60 random permutations of 5 are not all canonical (probability 120**-60)
    assert any(o != canonical for o in tests[0]) == shuffle_test0
    assert any(b.order != canonical for b in w.pt_train)


def test_one_aug_setting():
    cfg = BiographyConfig(30, 0, train_bios_per_person=1, seed=1)
    assert cfg.augment_times == 4 and [cfg.is_shuffled(i) for i in range(4)] == [True, True, False, False]


def test_replay_pools(world):
    p, k = SMOKE.num_pt_people, SMOKE.train_bios_per_person
    all_pool = world.replay_pool("all")
    assert [b.pid for b in all_pool] == list(range(p)) and {b.number for b in all_pool} == {1}
    half = world.replay_pool("half")
    # positions <= len(pt_train)//2 = 100 with Number 1-2: people 0..19 twice, plus person 20's Number 1
    limit = p * k // 2
    assert len(half) == 2 * (limit // k) + 1 == 41
    assert [(b.pid, b.number) for b in half[-3:]] == [(19, 1), (19, 2), (20, 1)]
    with pytest.raises(ValueError, match="replay kind"):
        replay_pool(world.pt_train, "most")


def test_reference_sized_half_pool_count():
    # 100k people x 5 -> positions <= 250,000 -> 50,000 x 2 + 1 (checked on the index arithmetic alone)
    k, p = 5, 100_000
    limit = p * k // 2
    count = sum(1 for pos in range(p * k) if pos <= limit and pos % k in (0, 1))
    assert count == 100_001


def test_config_validation():
    for kwargs in ({"num_pt_people": 0, "num_cpt_people": 1}, {"num_pt_people": 1, "num_cpt_people": -1},
                   {"num_pt_people": 1, "num_cpt_people": 1, "train_bios_per_person": 0}):
        with pytest.raises(ValueError):
            BiographyConfig(**kwargs)


def test_world_from_template_table(tmp_path):
    rows = [{"template": f"[Name] has {PLACEHOLDERS[a]}.", "length": 3, "attribute": a} for a in ATTRIBUTES]
    path = tmp_path / "t.parquet"
    pd.DataFrame(rows).to_parquet(path)
    w = generate_world(BiographyConfig(3, 1, template_path=str(path)))
    person = w.people[0]
    assert w.pt_test[1].text == " ".join(f"{person.fullname} has {v}." for v in person.values)
