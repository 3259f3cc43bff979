"""continual/taalm/biography.py: made-up people never collide with the world's, and their (D, T_D) pairs are
spelled by the world's tokenizer with the object located."""

import dataclasses

import numpy as np
import pytest

from cfka_jax.continual.taalm.biography import biography_pairs, extra_people
from cfka_jax.data.biography import BiographyConfig, Person, generate_world, load_templates
from cfka_jax.data.templates import ATTRIBUTES
from cfka_jax.data.tokenize import train_word_tokenizer


@pytest.fixture(scope="module")
def world_tok(tmp_path_factory):
    world = generate_world(BiographyConfig(num_pt_people=7, num_cpt_people=3, train_bios_per_person=2))
    # a world this small misses templates and text-initial names; the small preset's 1,600 biographies have them
    temps = [t for ts in load_templates(world.config).by_attribute for t in ts]
    texts = [b.text for bios in world.splits.values() for b in bios] + temps + [" " + t for t in temps]
    texts += [p.fullname for p in world.people]
    return world, train_word_tokenizer(texts, tmp_path_factory.mktemp("tok"))


def test_extra_people_are_new_names_made_of_the_worlds_parts_and_values(world_tok):
    world, _ = world_tok
    people = extra_people(world, 20, seed=3)
    names = [p.fullname for p in people]
    assert len(set(names)) == 20 and not set(names) & {p.fullname for p in world.people}
    parts = [set(p.fullname.split(" ", 2)[i] for p in world.people) for i in range(3)]
    for p in people:
        assert all(x in parts[i] for i, x in enumerate(p.fullname.split(" ", 2)))
        assert all(p.values[a] in {q.values[a] for q in world.people} for a in range(len(ATTRIBUTES)))
        assert not p.is_original
    assert [p.pid for p in people] == list(range(len(world.people), len(world.people) + 20))
    assert extra_people(world, 20, seed=3) == people and extra_people(world, 20, seed=4) != people
    with pytest.raises(ValueError, match="n must be"):
        extra_people(world, 0, seed=0)
    with pytest.raises(ValueError, match="fewer than"):
        extra_people(world, 10 ** 6, seed=0)


def test_pairs_probe_one_fact_of_d_with_another_template(world_tok):
    world, tok = world_tok
    people = extra_people(world, 6, seed=0)
    templates = load_templates(world.config)
    pairs, stats = biography_pairs(people, templates, tok, probes_per_person=2, seed=0)
    assert stats == {"pairs": 12, "people": 6, "dropped_unk": 0, "empty_object_masks": 0}
    for i in range(len(pairs.d)):
        person = people[i // 2]
        d_text = tok.decode(pairs.d.ids[i][1:])
        t_ids, t_mask = pairs.t.ids[i], pairs.t.object_mask[i]
        obj = tok.decode(t_ids[t_mask > 0]).strip()
        assert obj in person.values and person.fullname in tok.decode(t_ids[1:])
        assert all(v in d_text for v in person.values)  # D states every fact of the person
        assert tok.decode(t_ids[1:]) not in d_text  # the probe sentence is not copied from D
        assert t_ids[0] == tok.eos_token_id and pairs.d.ids[i][0] == tok.eos_token_id
    # the two probes of a person ask about two different attributes
    objs = [tok.decode(pairs.t.ids[i][pairs.t.object_mask[i] > 0]).strip() for i in range(len(pairs.t))]
    assert all(objs[2 * k] != objs[2 * k + 1] for k in range(6))
    again, _ = biography_pairs(people, templates, tok, probes_per_person=2, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(again.t.ids, pairs.t.ids))


def test_pairs_the_tokenizer_cannot_spell_are_dropped_and_counted(world_tok):
    world, tok = world_tok
    people = list(extra_people(world, 3, seed=1))
    people[1] = dataclasses.replace(people[1], values=("Zzyzxville, QQ",) + people[1].values[1:])
    pairs, stats = biography_pairs(people, load_templates(world.config), tok, probes_per_person=1, seed=0)
    assert stats["dropped_unk"] == 1 and stats["pairs"] == 2 and len(pairs.d) == len(pairs.t) == 2
    assert all(tok.unk_token_id not in ids for ids in pairs.d.ids + pairs.t.ids)
    bad = [Person(0, people[1].fullname, people[1].values, False)]
    with pytest.raises(ValueError, match="no \\(D, T_D\\) pair"):
        biography_pairs(bad, load_templates(world.config), tok, probes_per_person=5, seed=0)
    with pytest.raises(ValueError, match="probes_per_person"):
        biography_pairs(people, load_templates(world.config), tok, probes_per_person=0)
