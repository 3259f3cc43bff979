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
