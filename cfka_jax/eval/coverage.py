"""What a replay corpus says about the Biography world: people named, facts voiced, true values per mention.

A diagnostic of generative replay (spec §6; docs/stoc.md), not a training signal: every occurrence of a person's
full name opens a segment that runs to the next full name, and a fact (person, attribute) is *voiced* when the
person's true value of that attribute appears in one of the person's segments.
"""

from __future__ import annotations

import re


def voiced_facts(texts: list[str], people) -> tuple[set, set, int, int]:
    """(people named, facts voiced, name mentions, true values found) of ``texts`` (see ``fact_coverage``)."""
    by_name = {p.fullname: p for p in people}
    pattern = re.compile("|".join(re.escape(n) for n in sorted(by_name, key=len, reverse=True)))
    named, voiced, mentions, hits = set(), set(), 0, 0
    for text in texts:
        found = list(pattern.finditer(text))
        for m, nxt in zip(found, found[1:] + [None]):
            person = by_name[m.group()]
            segment = text[m.end():nxt.start() if nxt else len(text)]
            named.add(person.pid)
            mentions += 1
            for a, value in enumerate(person.values):
                if value in segment:
                    voiced.add((person.pid, a))
                    hits += 1
    return named, voiced, mentions, hits


def fact_coverage(texts: list[str], people) -> dict:
    """What a replay corpus says about the Biography world (a diagnostic, not a training signal).

    Every occurrence of a person's full name opens a segment that runs to the next full name; a fact (person,
    attribute) is *voiced* when the person's true value of that attribute appears in one of the person's
    segments. Returns the number of original (PT) and new (CPT) people named, the share of all original facts
    voiced at least once (``pt_fact_coverage``), and the true values found per name mention
    (``true_values_per_mention``; a real biography sentence names its person and states one value: 1.0 for
    real replay; a generated sentence stating a wrong value counts 0).
    """
    named, voiced, mentions, hits = voiced_facts(texts, people)
    original = {p.pid for p in people if p.is_original}
    num_attr = len(people[0].values) if people else 0
    return {"pt_people_named": len(named & original), "cpt_people_named": len(named - original),
            "pt_fact_coverage": len({f for f in voiced if f[0] in original}) / max(1, len(original) * num_attr),
            "true_values_per_mention": hits / max(1, mentions)}


def name_mentions(texts: list[str], people) -> dict:
    """Every "First M. Last" a corpus writes from the world's name parts, by who it names.

    A mention is any first name of the world, a capital initial with a period and a last name of the world in a
    row; it is *real old* when it is the full name of a PT person, *new* when of a CPT person, else *invented*
    (a combination nobody holds: what a model writes when a prompt steers it to a name it does not know).

    Returns:
      ``name_mentions`` (count), ``names_real_old`` / ``names_new`` / ``names_invented`` (shares of the mentions).
    """
    firsts = {p.fullname.split(" ")[0] for p in people}
    lasts = {p.fullname.split(" ", 2)[2] for p in people}
    alt = lambda names: "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))  # noqa: E731
    pattern = re.compile(rf"\b(?:{alt(firsts)}) [A-Z]\. (?:{alt(lasts)})\b")
    kind = {p.fullname: ("names_real_old" if p.is_original else "names_new") for p in people}
    counts = {"names_real_old": 0, "names_new": 0, "names_invented": 0}
    for text in texts:
        for m in pattern.finditer(text):
            counts[kind.get(m.group(), "names_invented")] += 1
    total = sum(counts.values())
    return {"name_mentions": total, **{k: v / max(1, total) for k, v in counts.items()}}


def interfered_coverage(voiced: set, split: dict) -> dict:
    """Voiced share of the interfered old facts and of the rest (``split``: ``data/sharing.interfered_facts``),
    and of the facts interfered by value and by name alone."""
    out = {}
    for key, want in (("interfered", True), ("rest", False)):
        facts = [f for f, flags in split.items() if flags["interfered"] == want]
        out[f"voiced/{key}"] = sum(f in voiced for f in facts) / max(1, len(facts))
        out[f"facts/{key}"] = len(facts)
    for flag in ("value", "name"):
        facts = [f for f, flags in split.items() if flags[flag]]
        out[f"voiced/{flag}"] = sum(f in voiced for f in facts) / max(1, len(facts))
    return out


def corpus_measures(texts: list[str], world) -> dict:
    """All per-corpus measurements of issue #23 on the drawn replay ``texts`` of a Biography ``world``:
    ``fact_coverage``, ``name_mentions`` and the interfered / rest split of the voiced old facts."""
    from cfka_jax.data.sharing import interfered_facts

    _, voiced, _, _ = voiced_facts(texts, world.people)
    return {**fact_coverage(texts, world.people), **name_mentions(texts, world.people),
            **interfered_coverage(voiced, interfered_facts(world))}
