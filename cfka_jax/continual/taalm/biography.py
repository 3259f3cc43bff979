"""Train-Attention pairs (D, T_D) for the Biography world, so that φ can weight the tokens of a Biography CPT run
(issue #16 "beyond the reference": φ's weights as the token weights of ``cfka cpt``).

φ must never see the facts that Continual FTA measures, and it must share the PT run's token ids. Both hold for
people made up from the world's own parts:

* :func:`extra_people`: ``n`` new people whose names are new combinations of the world's first names, middle
  initials and last names (no name equals a world person's, no two are equal) and whose five attribute values
  are drawn independently from the values the world's people have. A word-level tokenizer trained on the world
  therefore covers every word of their biographies, and their facts belong to nobody in the benchmark.
* :func:`biography_pairs`: per person one D, a training-style biography (one sentence per attribute, a random
  template each, shuffled order, as the world's training biographies), and ``probes_per_person`` T_D, each one
  sentence about one of the person's attributes written with a *different* template from D's (like the test
  biographies FTA scores), the value being the object. Pairs whose text the tokenizer cannot spell (an unknown
  token) are dropped and counted.
"""

from __future__ import annotations

import numpy as np

from cfka_jax.continual.taalm.metatrain import PairSet
from cfka_jax.data.biography import Person, World
from cfka_jax.data.ckl_encode import encode
from cfka_jax.data.templates import ATTRIBUTES, Templates, fill


def _name_parts(fullname: str) -> tuple[str, str, str]:
    first, middle, last = fullname.split(" ", 2)
    return first, middle, last


def extra_people(world: World, n: int, *, seed: int) -> tuple[Person, ...]:
    """``n`` people made of the world's name parts and attribute values (module docstring); pids continue after
    the world's people, ``is_original`` False.

    Raises:
      ValueError: ``n`` < 1, or the world's name parts cannot make ``n`` new names.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    parts = [_name_parts(p.fullname) for p in world.people]
    firsts, middles, lasts = (sorted({x[i] for x in parts}) for i in range(3))
    taken = {p.fullname for p in world.people}
    if len(firsts) * len(middles) * len(lasts) - len(taken) < n:
        raise ValueError(f"the world's name parts make fewer than {n} new names")
    values = [sorted({p.values[a] for p in world.people}) for a in range(len(ATTRIBUTES))]
    rng, people, start = np.random.default_rng(seed), [], len(world.people)
    while len(people) < n:
        name = f"{rng.choice(firsts)} {rng.choice(middles)} {rng.choice(lasts)}"
        if name in taken:
            continue
        taken.add(name)
        vals = tuple(str(pool[rng.integers(len(pool))]) for pool in values)
        people.append(Person(start + len(people), name, vals, False))
    return tuple(people)


def _sentence(templates: Templates, a: int, t: int, person: Person) -> str:
    return fill(templates.by_attribute[a][t], ATTRIBUTES[a], person.fullname, person.values[a])


def _pair_texts(person: Person, templates: Templates, probes: int, rng: np.random.Generator):
    """(D, [(T_D, object)]) of one person (module docstring)."""
    n_attr = len(ATTRIBUTES)
    tmpl = [int(rng.integers(len(templates.by_attribute[a]))) for a in range(n_attr)]
    d = " ".join(_sentence(templates, a, tmpl[a], person) for a in rng.permutation(n_attr))
    out = []
    for a in rng.choice(n_attr, size=min(probes, n_attr), replace=False):
        choices = [t for t in range(len(templates.by_attribute[a])) if t != tmpl[a]] or [tmpl[a]]
        t = choices[int(rng.integers(len(choices)))]
        out.append((_sentence(templates, int(a), t, person), person.values[a]))
    return d, out


def biography_pairs(people, templates: Templates, tokenizer, *, probes_per_person: int = 2, seed: int = 0,
                    max_length: int = 512) -> tuple[PairSet, dict]:
    """(pairs, statistics) of ``people`` (module docstring). Statistics: ``pairs``, ``people``, ``dropped_unk``
    (pairs with an unknown token), ``empty_object_masks`` (T_D whose object was not located; 0 expected).

    Raises:
      ValueError: ``probes_per_person`` < 1, or no pair survives.
    """
    if probes_per_person < 1:
        raise ValueError(f"probes_per_person must be >= 1, got {probes_per_person}")
    rng = np.random.default_rng(seed)
    d_texts, t_texts, objects = [], [], []
    for person in people:
        d, probes = _pair_texts(person, templates, probes_per_person, rng)
        for t, obj in probes:
            d_texts.append(d)
            t_texts.append(t)
            objects.append(obj)
    d_enc = encode(tokenizer, d_texts, objects, max_length=max_length)
    t_enc = encode(tokenizer, t_texts, objects, max_length=1 << 30)
    unk = tokenizer.unk_token_id
    keep = [i for i in range(len(d_texts)) if unk is None
            or not (np.any(d_enc.ids[i] == unk) or np.any(t_enc.ids[i] == unk))]
    if not keep:
        raise ValueError("no (D, T_D) pair can be spelled by the tokenizer")
    t_kept = t_enc.select(keep)
    stats = {"pairs": len(keep), "people": len(people), "dropped_unk": len(d_texts) - len(keep),
             "empty_object_masks": t_kept.empty}
    return PairSet(d_enc.select(keep), t_kept), stats
