"""Shared name pools (``BiographyConfig.name_pool``), the sharing statistics and the interfered-fact split."""

import dataclasses
import hashlib
import json

import pytest

from cfka_jax.data import io
from cfka_jax.data.biography import BiographyConfig, Person, World, generate_world
from cfka_jax.data.sharing import format_sharing, interfered_facts, name_sharing


def test_name_pool_limits_name_parts_and_keeps_names_unique():
    world = generate_world(BiographyConfig(40, 10, name_pool=(3, 2, 10)))
    firsts = {p.fullname.split()[0] for p in world.people}
    mids = {p.fullname.split()[1] for p in world.people}
    lasts = {p.fullname.split()[2] for p in world.people}
    assert len(firsts) <= 3 and mids <= {"A.", "B."} and len(lasts) <= 10
    assert len({p.fullname for p in world.people}) == 50
    stats = name_sharing(world)
    assert stats["new_first_shared"] == 1.0 and stats["new_full_shared"] == 0.0
    assert stats["old_per_first"] == pytest.approx(40 / len({p.fullname.split()[0] for p in world.people[:40]}))
    assert "first_middle=" in format_sharing(stats)


def test_name_pool_errors_name_the_option():
    with pytest.raises(ValueError, match="name_pool"):
        BiographyConfig(4, 1, name_pool=(3, 0, 2))
    with pytest.raises(ValueError, match="name_pool asks for 30 middle_initials"):
        generate_world(BiographyConfig(4, 1, name_pool=(3, 30, 2)))
    with pytest.raises(ValueError, match="unique names"):
        generate_world(BiographyConfig(10, 5, name_pool=(2, 2, 2)))


def test_unset_name_pool_keeps_the_cache_keys():
    bio = BiographyConfig(40, 10)
    stripped = {k: v for k, v in dataclasses.asdict(bio).items() if k != "name_pool"}
    h = hashlib.sha256(f"v{io.FORMAT_VERSION}".encode())
    h.update(json.dumps(stripped, sort_keys=True).encode())
    assert io.config_hash(bio) == h.hexdigest()[:16]
    assert io.config_hash(bio) != io.config_hash(dataclasses.replace(bio, name_pool=(3, 2, 10)))


def test_world_with_name_pool_round_trips(tmp_path):
    cfg = BiographyConfig(6, 2, name_pool=(2, 2, 3))
    world = generate_world(cfg)
    io.save_world(world, tmp_path)
    assert io.load_world(tmp_path) == world


def _person(pid, name, values, old):
    return Person(pid, name, values, old)


def test_interfered_split_on_a_hand_built_world():
    vals = lambda *v: tuple(v)  # noqa: E731  birthplace, birthdate, university, major, company
    people = (
        _person(0, "Ann B. Cole", vals("Reno, NV", "May 1, 1900", "MIT", "Law", "Acme"), True),
        _person(1, "Bob C. Dunn", vals("Troy, NY", "May 2, 1900", "Yale", "Art", "Zeta"), True),
        _person(2, "Ann B. Moss", vals("Waco, TX", "May 3, 1900", "Yale", "Law", "Beta"), False),
    )
    world = World(BiographyConfig(2, 1), people, (), (), (), ())
    split = interfered_facts(world)
    assert set(split) == {(p, a) for p in (0, 1) for a in range(5)}
    # Ann B. Cole shares her "First M." prefix with the new Ann B. Moss: every fact of hers is interfered by name
    assert all(split[(0, a)]["name"] and split[(0, a)]["interfered"] for a in range(5))
    assert [split[(0, a)]["value"] for a in range(5)] == [False, False, False, True, False]  # major "Law"
    # Bob shares only the university "Yale" with the new person
    assert [split[(1, a)]["value"] for a in range(5)] == [False, False, True, False, False]
    assert [split[(1, a)]["interfered"] for a in range(5)] == [False, False, True, False, False]
    stats = name_sharing(world)
    assert stats["new_first_middle_shared"] == 1.0 and stats["new_first_last_shared"] == 0.0
    assert stats["new_value_shared/university"] == 1.0 and stats["new_value_shared/company"] == 0.0


def test_shared_name_presets_reach_the_reference_sharing():
    from cfka_jax.runs.presets import BIOGRAPHY

    cfg = BIOGRAPHY["names150"].data_config()
    assert cfg.bio.name_pool == (10, 4, 20) and BIOGRAPHY["small"].data_config().bio.name_pool is None
    stats = name_sharing(generate_world(cfg.bio))
    assert stats["new_first_shared"] == 1.0 and stats["new_first_middle_shared"] >= 0.9
    default = name_sharing(generate_world(BIOGRAPHY["small"].data_config().bio))
    assert default["new_first_middle_shared"] < 0.05  # the default world: prefixes of new people are new


def test_corpus_measures_on_the_hand_built_world():
    from cfka_jax.eval.coverage import corpus_measures

    people = (
        Person(0, "Ann B. Cole", ("Reno, NV", "May 1, 1900", "MIT", "Law", "Acme"), True),
        Person(1, "Bob C. Dunn", ("Troy, NY", "May 2, 1900", "Yale", "Art", "Zeta"), True),
        Person(2, "Ann B. Moss", ("Waco, TX", "May 3, 1900", "Yale", "Law", "Beta"), False),
    )
    world = World(BiographyConfig(2, 1), people, (), (), (), ())
    texts = ["Bob C. Dunn studied at Yale. Ann C. Cole works at Acme.", "Ann B. Moss was born in Waco, TX."]
    m = corpus_measures(texts, world)
    # three mentions: one real old person, one invented combination, one new person
    assert m["name_mentions"] == 3
    assert (m["names_real_old"], m["names_invented"], m["names_new"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    # voiced: Bob's university only (Ann C. Cole is nobody, so Acme is not Ann B. Cole's fact)
    assert m["pt_fact_coverage"] == pytest.approx(1 / 10)
    # interfered: Ann's 5 facts (shared prefix) + Bob's university (shared value); Bob's university is voiced
    assert (m["facts/interfered"], m["facts/rest"]) == (6, 4)
    assert m["voiced/interfered"] == pytest.approx(1 / 6) and m["voiced/rest"] == 0.0
    assert m["voiced/value"] == pytest.approx(1 / 2) and m["voiced/name"] == 0.0
