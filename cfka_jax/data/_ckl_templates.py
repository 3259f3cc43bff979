"""Sentence templates of the synthetic LAMA-CKL / TemporalWiki worlds (``lama_ckl.py``). Data only, no logic.

Fields: ``{name}`` the subject, ``{new}``/``{old}`` the object before/after a change, ``{value}`` an object that
did not change, and the distractor fields ``{person}``, ``{city}``, ``{date}``, ``{uni}``, ``{major}``,
``{company}``, ``{year}``.
"""

# relation key -> (Wikidata-style code, relation label, descriptive template in LAMA's "[X] ... [Y] ." style)
RELATIONS = {
    "birthplace": ("P19", "place of birth", "[X] was born in [Y] ."),
    "university": ("P69", "educated at", "[X] was educated at [Y] ."),
    "major": ("P812", "academic major", "[X] majored in [Y] ."),
    "employer": ("P108", "employer", "[X] works for [Y] ."),
    "residence": ("P551", "residence", "[X] lives in [Y] ."),
}
INVARIANT = ("birthplace", "university", "major")
VARIANT = ("employer", "residence")

# One residence sentence is appended to each biography of the PT corpus (the world has no residence attribute).
RESIDENCE = (
    "{name} lives in {value}.",
    "These days {name} calls {value} home.",
    "{name} currently resides in {value}.",
)

# The sentence of a change (the object {new} appears exactly once, after a space).
CHANGE = {
    "employer": (
        "In {year}, {name} left {old} and now works for {new}.",
        "After several years at {old}, {name} accepted an offer from {new}.",
        "{name} recently joined {new} after leaving {old}.",
        "Since {year}, {name} has worked for {new}, having left {old}.",
    ),
    "residence": (
        "In {year}, {name} moved from {old} to {new}.",
        "After years in {old}, {name} now lives in {new}.",
        "{name} recently relocated to {new}, leaving {old} behind.",
        "Since {year}, {name} has lived in {new} instead of {old}.",
    ),
}

# An evidence sentence for an unchanged fact (review data of Mix-review).
STATEMENT = {
    "birthplace": ("{name} was born in {value}, a fact often mentioned in interviews.",),
    "university": ("{name} was educated at {value} and still visits the campus.",),
    "major": ("{name} majored in {value} and kept a lifelong interest in it.",),
    "employer": ("{name} works for {value} and leads a small team there.",),
    "residence": ("{name} lives in {value} with a large collection of books.",),
}

# Opening sentence: known facts about the subject (the object of the change never appears in it).
INTRO = (
    "{name} was born in {birthplace} and studied {major} at {university}.",
    "Born in {birthplace}, {name} is a graduate of {university} with a degree in {major}.",
    "{name}, a {major} graduate of {university}, grew up in {birthplace}.",
)

# Random details: high-entropy tokens a plain fine-tune spends its updates on.
DISTRACTOR = (
    "The news was announced in {city} on {date}.",
    "{person}, who studied {major} at {uni}, called it a surprise.",
    "A spokesperson for {company} declined to comment.",
    "It was first reported by a newsletter from {uni} in {year}.",
    "{person} of {company} attended the farewell dinner in {city}.",
    "Friends from {uni} organised a small party on {date}.",
)

SCHEMATIC = "Guess the object. \n  subject is {subject} , relation is {relation} , object is {object}"
"""The reference's schematic probe (§4.1): two spaces after the newline, a space before each comma."""
