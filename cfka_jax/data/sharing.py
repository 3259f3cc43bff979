"""What the CPT ("new") people of a Biography world share with the PT ("old") ones: name parts and values.

In the reference's world (100k PT + 20k CPT people drawn from 1,000 first names × 26 middle initials × 1,000 last
names) nearly every new person's first name, and ~98 % of their "First M." prefixes, belong to some old person, so
a prompt cut from a new biography can steer a PT model into reciting real old people. ``name_sharing`` measures
this for any world (``BiographyConfig.name_pool`` sets the pools that reproduce it at small compute).

``interfered_facts`` splits the old facts (person p, attribute a) by what the new data shares with them:

* ``value``: some new person has the same value of the same attribute (the new data trains that value token
  sequence in the same slot, the shared-token route of forgetting);
* ``name``: some new person has the same first name and middle initial (the new data trains continuations of the
  old person's "First M." prefix).

A fact is *interfered* when either holds; the rest are the control.
"""

from __future__ import annotations

from cfka_jax.data.biography import World
from cfka_jax.data.templates import ATTRIBUTES

NAME_KEYS = ("first", "first_middle", "last", "first_last", "full")


def _name_parts(fullname: str) -> dict[str, str]:
    first, middle, last = fullname.split(" ", 2)
    return {"first": first, "first_middle": f"{first} {middle}", "last": last, "first_last": f"{first} {last}",
            "full": fullname}


def name_sharing(world: World) -> dict[str, float]:
    """Share of new people whose name part also belongs to some old person, per part, plus pool occupancy.

    Returns:
      ``new_<part>_shared`` for each of ``NAME_KEYS`` (fraction of CPT people), ``old_per_<part>`` (mean number of
      PT people holding one PT first name / "First M." prefix / last name), and ``new_value_shared/<attribute>``
      (fraction of CPT people whose value of that attribute some PT person holds). NaN-free: a world without CPT
      people gives 0.0 shares.
    """
    old = [p for p in world.people if p.is_original]
    new = [p for p in world.people if not p.is_original]
    old_parts = [_name_parts(p.fullname) for p in old]
    out: dict[str, float] = {}
    for key in NAME_KEYS:
        held = {parts[key] for parts in old_parts}
        out[f"new_{key}_shared"] = sum(_name_parts(p.fullname)[key] in held for p in new) / max(1, len(new))
    for key in ("first", "first_middle", "last"):
        out[f"old_per_{key}"] = len(old) / max(1, len({parts[key] for parts in old_parts}))
    for a, attr in enumerate(ATTRIBUTES):
        held = {p.values[a] for p in old}
        out[f"new_value_shared/{attr}"] = sum(p.values[a] in held for p in new) / max(1, len(new))
    return out


def format_sharing(stats: dict[str, float]) -> str:
    """One line: the name-sharing shares in percent (what the studies print for every world)."""
    names = " ".join(f"{k}={100 * stats[f'new_{k}_shared']:.0f}%" for k in NAME_KEYS)
    per = " ".join(f"{k}={stats[f'old_per_{k}']:.1f}" for k in ("first", "first_middle", "last"))
    return f"new people sharing a name part with an old one: {names}; old people per part: {per}"


def interfered_facts(world: World) -> dict[tuple[int, int], dict[str, bool]]:
    """``{(pid, attribute index): {"value": ..., "name": ..., "interfered": ...}}`` for every old fact (module
    docstring)."""
    new = [p for p in world.people if not p.is_original]
    new_values = [{p.values[a] for p in new} for a in range(len(ATTRIBUTES))]
    new_prefixes = {_name_parts(p.fullname)["first_middle"] for p in new}
    out = {}
    for p in world.people:
        if not p.is_original:
            continue
        name = _name_parts(p.fullname)["first_middle"] in new_prefixes
        for a in range(len(ATTRIBUTES)):
            value = p.values[a] in new_values[a]
            out[(p.pid, a)] = {"value": value, "name": name, "interfered": value or name}
    return out
