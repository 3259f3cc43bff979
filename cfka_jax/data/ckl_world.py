"""The synthetic world behind the synthetic LAMA-CKL and TemporalWiki benchmarks (see ``lama_ckl.py``).

:func:`build_synthetic_world` is a deterministic function of a :class:`~cfka_jax.data.lama_ckl.SyntheticCKLConfig`
(one numpy Generator seeded with ``seed`` draws, in a fixed order, the residences, the changes and every evidence
paragraph). It returns the PT corpus texts and the *candidate* records; which candidates become TO-LEARN,
NOT-TO-FORGET and TA pairs depends on θ0's scores (``lama_ckl.select_ckl``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cfka_jax.data import _ckl_templates as T
from cfka_jax.data.biography import BiographyConfig, World, generate_world, load_pools
from cfka_jax.data.lama_ckl import LamaRecord, SyntheticCKLConfig, descriptive_probe, make_record, schematic_probe
from cfka_jax.data.pools import PoolSizes, ValuePools

_WORLD_INDEX = {"birthplace": 0, "university": 2, "major": 3, "employer": 4}
MIN_EVIDENCE_CHARS = 201  # the reference keeps evidence longer than 200 characters


@dataclasses.dataclass(frozen=True)
class SyntheticWorld:
    """People, the PT corpus and the candidate records.

    Attributes:
        facts: per person id, relation → the value θ0 is trained on (the new value for ``pt_changed`` people).
        pt_texts: the PT corpus (biographies + residence sentence, the descriptive statement of every fact, the
            schematic statement of every time-variant fact, and the change evidence of the ``pt_changed`` group).
        to_learn_candidates / ta_candidates: changed facts of the TO-LEARN and TA groups (objects unseen in PT).
        nf_candidates: invariant facts of the people outside the TO-LEARN and TemporalWiki groups.
        twiki_changes: per period, the changed facts of that period's people (TemporalWiki analogue).
        unchanged_candidates: facts of people never changed (TemporalWiki unchanged probes).
    """

    config: SyntheticCKLConfig
    world: World
    facts: tuple[dict, ...]
    pt_texts: tuple[str, ...]
    to_learn_candidates: tuple[LamaRecord, ...]
    ta_candidates: tuple[LamaRecord, ...]
    nf_candidates: tuple[LamaRecord, ...]
    twiki_changes: tuple[tuple[LamaRecord, ...], ...]
    unchanged_candidates: tuple[LamaRecord, ...]

    def all_records(self) -> list[LamaRecord]:
        rows = [*self.to_learn_candidates, *self.ta_candidates, *self.nf_candidates, *self.unchanged_candidates]
        return rows + [r for period in self.twiki_changes for r in period]

    def tokenizer_texts(self) -> list[str]:
        """Every text the benchmarks tokenise (the word-level tokenizer must cover all of them)."""
        out = list(self.pt_texts)
        for r in self.all_records():
            out += [r.evidence, r.task_descriptive, r.task_schematic]
        return out


class _Drawer:
    """Random values and sentences from the pools (one Generator, fixed call order)."""

    def __init__(self, pools: ValuePools, rng: np.random.Generator, names: set[str], n_distractors: int):
        self.pools, self.rng, self.names, self.n_distractors = pools, rng, names, n_distractors

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def date(self) -> str:
        p = self.pools
        return f"{self.pick(p.months)} {self.pick(p.days)}, {self.pick(p.years)}"

    def person(self) -> str:
        while True:
            p = self.pools
            name = f"{self.pick(p.first_names)} {self.pick(p.middle_initials)} {self.pick(p.last_names)}"
            if name not in self.names:
                return name

    def pool(self, relation: str):
        return self.pools.companies if relation == "employer" else self.pools.birthplaces

    def distractor(self) -> str:
        p = self.pools
        return self.pick(T.DISTRACTOR).format(person=self.person(), city=self.pick(p.birthplaces), date=self.date(),
                                              uni=self.pick(p.universities), major=self.pick(p.majors),
                                              company=self.pick(p.companies), year=self.pick(p.years))

    def paragraph(self, head: list[str], fact: str, obj: str) -> str:
        """``head`` sentences, then distractors with ``fact`` at a random place after the head, > 200 chars and
        with ``obj`` exactly once."""
        while True:
            extra = [self.distractor() for _ in range(self.n_distractors)]
            cut = int(self.rng.integers(len(extra) + 1))
            text = " ".join(head + extra[:cut] + [fact] + extra[cut:])
            while len(text) < MIN_EVIDENCE_CHARS:
                text += " " + self.distractor()
            if text.count(obj) == 1 and f" {obj}" in text:
                return text


def _intro(d: _Drawer, name: str, facts: dict) -> str:
    return d.pick(T.INTRO).format(name=name, birthplace=facts["birthplace"], major=facts["major"],
                                  university=facts["university"])


def _change(d: _Drawer, pid: int, name: str, facts: dict, relation: str, tag: str) -> LamaRecord:
    old = facts[relation]
    blocked = set(facts.values())
    while True:
        new = d.pick(d.pool(relation))
        if all(new not in v and v not in new for v in blocked):
            break
    fact = d.pick(T.CHANGE[relation]).format(name=name, old=old, new=new, year=d.pick(d.pools.years))
    evidence = d.paragraph([_intro(d, name, facts)], fact, new)
    return make_record(relation, f"{tag}-{pid}-{T.RELATIONS[relation][0]}", name, new, evidence, invariant=False)


def _statement(d: _Drawer, pid: int, name: str, facts: dict, relation: str, tag: str) -> LamaRecord:
    value = facts[relation]
    fact = d.pick(T.STATEMENT[relation]).format(name=name, value=value)
    evidence = d.paragraph([], fact, value)
    return make_record(relation, f"{tag}-{pid}-{T.RELATIONS[relation][0]}", name, value, evidence,
                       invariant=relation in T.INVARIANT)


def _pt_texts(world: World, facts, d: _Drawer, changed: dict[int, LamaRecord]) -> list[str]:
    texts = []
    for bio in world.pt_train:
        name = world.people[bio.pid].fullname
        texts.append(bio.text + " " + d.pick(T.RESIDENCE).format(name=name, value=facts[bio.pid]["residence"]))
    for pid, f in enumerate(facts):
        name = world.people[pid].fullname
        for rel in T.RELATIONS:
            texts.append(descriptive_probe(rel, name, f[rel]))
        for rel in T.VARIANT:  # the schematic form is what the TA pairs probe (§4.1)
            texts.append(schematic_probe(name, T.RELATIONS[rel][1], f[rel]))
        if pid in changed:
            texts.append(changed[pid].evidence)
    order = d.rng.permutation(len(texts))
    return [texts[i] for i in order]


def build_synthetic_world(cfg: SyntheticCKLConfig, *, periods: int = 3) -> SyntheticWorld:
    """The synthetic world of ``cfg`` (deterministic); ``periods`` TemporalWiki periods split the twiki group."""
    bio_cfg = BiographyConfig(num_pt_people=cfg.num_people, num_cpt_people=0,
                              train_bios_per_person=cfg.bios_per_person, seed=cfg.seed,
                              pool_sizes=PoolSizes(first_names=cfg.name_pool, last_names=cfg.name_pool))
    world = generate_world(bio_cfg)
    pools = load_pools(bio_cfg)
    rng = np.random.default_rng(cfg.seed + 1)
    d = _Drawer(pools, rng, {p.fullname for p in world.people}, cfg.distractors)
    facts = [dict({k: p.values[i] for k, i in _WORLD_INDEX.items()}, residence=d.pick(pools.birthplaces))
             for p in world.people]
    g = cfg.groups()
    name = lambda pid: world.people[pid].fullname  # noqa: E731
    rels = cfg.change_relations
    variant = lambda: rels[int(rng.integers(len(rels)))]  # noqa: E731
    pt_changes = {pid: _change(d, pid, name(pid), facts[pid], variant(), "pt") for pid in g["pt_changed"]}
    to_learn = [_change(d, pid, name(pid), facts[pid], variant(), "tl") for pid in g["to_learn_pool"]]
    ta = [_change(d, pid, name(pid), facts[pid], rel, "ta") for pid in g["ta_pool"] for rel in rels]
    twiki = [[] for _ in range(periods)]
    for i, pid in enumerate(g["twiki_pool"]):
        twiki[i % periods].append(_change(d, pid, name(pid), facts[pid], variant(), f"tw{i % periods}"))
    for pid, rec in pt_changes.items():  # θ0 learns the new value of the pt_changed group
        facts[pid][next(k for k in T.VARIANT if T.RELATIONS[k][0] == rec.relation_code)] = rec.object
    nf_people = [*g["pt_changed"], *g["ta_pool"], *g["other"]]
    nf = [_statement(d, pid, name(pid), facts[pid], rel, "nf") for pid in nf_people for rel in T.INVARIANT]
    unchanged = [_statement(d, pid, name(pid), facts[pid], rel, "un") for pid in g["other"] for rel in T.RELATIONS]
    pt_texts = _pt_texts(world, facts, d, pt_changes)
    shuffle = lambda rows: tuple(rows[i] for i in rng.permutation(len(rows)))  # noqa: E731
    return SyntheticWorld(cfg, world, tuple(facts), tuple(pt_texts), shuffle(to_learn), shuffle(ta), shuffle(nf),
                          tuple(tuple(p) for p in twiki), shuffle(unchanged))
