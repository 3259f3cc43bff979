"""Value pools of the synthetic Biography world (spec cfka_stoc.md §3.1).

The project ships its own pools: real first/last names extended by deterministic syllable names, the 26 middle
initials "A." … "Z.", US birthplaces "City, ST", universities, majors and companies (real-looking names built
from word lists), and birthdates from 200 years × 12 months × 28 days. Sizes are configurable through
``PoolSizes``. ``read_pool_json`` reads a pool file in the format of the reference release's
``all_possible_features.json``: one JSON object whose keys name the attributes (``first_name``, ``middle_name``,
``last_name``, ``birthplace``, ``university``, ``major``, ``company``, optionally ``birth_year``/``birth_month``/
``birth_day``) and whose values are lists of strings. Keys it lacks fall back to the project's pools.

No value contains "[" or "]", so filled templates never hold stray placeholders.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re

from cfka_jax import jsonio
from cfka_jax.data import _pool_lists as L

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
MIDDLE_INITIALS = tuple(f"{chr(c)}." for c in range(ord("A"), ord("Z") + 1))


@dataclasses.dataclass(frozen=True)
class PoolSizes:
    """How many values of each project pool to use (the first n of a fixed, deterministic list).

    Defaults follow the reference sizes where the project's lists reach them (§3.1: 1000 first names, 1000 last
    names, 335 birthplaces, 146 universities, 29 majors, 500 companies, 200 years).
    """

    first_names: int = 1000
    last_names: int = 1000
    birthplaces: int = 240
    universities: int = 146
    majors: int = 29
    companies: int = 500
    years: int = 200
    first_year: int = 1900

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if f.name != "first_year" and getattr(self, f.name) < 1:
                raise ValueError(f"PoolSizes.{f.name} must be >= 1, got {getattr(self, f.name)}")


@dataclasses.dataclass(frozen=True)
class ValuePools:
    """All value pools; every field is a tuple of distinct non-empty strings."""

    first_names: tuple[str, ...]
    middle_initials: tuple[str, ...]
    last_names: tuple[str, ...]
    birthplaces: tuple[str, ...]
    universities: tuple[str, ...]
    majors: tuple[str, ...]
    companies: tuple[str, ...]
    years: tuple[str, ...]
    months: tuple[str, ...] = MONTHS
    days: tuple[str, ...] = tuple(str(d) for d in range(1, 29))

    def __post_init__(self):
        for f in dataclasses.fields(self):
            _check_values(getattr(self, f.name), f"ValuePools.{f.name}")

    @property
    def num_names(self) -> int:
        """Number of distinct full names "{first} {M.} {last}"."""
        return len(self.first_names) * len(self.middle_initials) * len(self.last_names)


def _check_values(values, where: str) -> None:
    if not isinstance(values, (tuple, list)) or not values:
        raise ValueError(f"{where}: expected a non-empty list of strings")
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise ValueError(f"{where}[{i}]: value must be a string, got {type(v).__name__} {v!r:.60}")
        if not v.strip() or v != v.strip() or "[" in v or "]" in v:
            raise ValueError(f"{where}[{i}]: bad value {v!r} (non-empty, stripped, no brackets)")
    if len(set(values)) != len(values):
        dup = next(v for v in values if values.count(v) > 1)
        raise ValueError(f"{where}: duplicate value {dup!r}")


def _take(values, n: int, what: str) -> tuple[str, ...]:
    if n > len(values):
        raise ValueError(f"PoolSizes.{what}={n} exceeds the {len(values)} available project values")
    return tuple(values[:n])


def _syllable_names(real: tuple[str, ...], onsets, middles, ends) -> list[str]:
    """Real names first, then deterministic syllable names not already present."""
    out, seen = list(real), set(real)
    for a, b, c in itertools.product(onsets, middles, ends):
        name = (a + b + c).capitalize()
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def _companies() -> list[str]:
    out = list(L.COMPANIES)
    seen = set(out)
    for a, b in itertools.product(L.COMPANY_HEADS, L.COMPANY_TAILS):
        name = f"{a} {b}"
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def project_pools(sizes: PoolSizes = PoolSizes()) -> ValuePools:
    """The project's own value pools, cut to ``sizes``.

    Raises:
      ValueError: a size exceeds what the project's lists provide.
    """
    firsts = _syllable_names(L.FIRST_NAMES, L.SYL_ON, L.SYL_MID, L.SYL_FIRST_END)
    lasts = _syllable_names(L.LAST_NAMES, L.SYL_ON, L.SYL_MID, L.SYL_LAST_END)
    return ValuePools(
        first_names=_take(firsts, sizes.first_names, "first_names"),
        middle_initials=MIDDLE_INITIALS,
        last_names=_take(lasts, sizes.last_names, "last_names"),
        birthplaces=_take(L.CITIES, sizes.birthplaces, "birthplaces"),
        universities=_take(L.UNIVERSITIES, sizes.universities, "universities"),
        majors=_take(L.MAJORS, sizes.majors, "majors"),
        companies=_take(_companies(), sizes.companies, "companies"),
        years=tuple(str(sizes.first_year + y) for y in range(sizes.years)),
    )


# Accepted spellings of the reference file's keys, normalised (lower case, non-letters dropped, plural 's' cut).
_KEY_TO_FIELD = {
    "firstname": "first_names", "first": "first_names",
    "middlename": "middle_initials", "middleinitial": "middle_initials", "middle": "middle_initials",
    "lastname": "last_names", "last": "last_names", "surname": "last_names",
    "birthplace": "birthplaces", "birthcity": "birthplaces", "city": "birthplaces",
    "university": "universities", "universitie": "universities",
    "major": "majors", "company": "companies", "companie": "companies",
    "birthyear": "years", "year": "years", "birthmonth": "months", "month": "months",
    "birthday": "days", "day": "days",
}


def _normalise_key(key: str) -> str:
    k = re.sub(r"[^a-z]", "", key.lower())
    return k[:-1] if k.endswith("s") and k[:-1] in _KEY_TO_FIELD else k


def read_pool_json(path: str | os.PathLike, *, fallback: ValuePools | None = None) -> ValuePools:
    """Read value pools from a reference-format ``all_possible_features.json``.

    Args:
      path: a JSON file holding one object ``{attribute_key: [value, ...], ...}``.
      fallback: pools for keys the file lacks (default: ``project_pools()``).

    Returns:
      The pools, file values replacing the fallback's field by field.

    Raises:
      ValueError: invalid UTF-8 or JSON, a non-object top level, an unknown key, or a bad value list (not a list,
        empty, a non-string value such as ``true`` or ``1.5``, blank, unstripped, bracketed or repeated values); the
        message names the file and the key (and the index of a bad value).
    """
    path = os.fspath(path)
    raw = jsonio.read_json_object(path, "a JSON object of attribute -> list of values")
    fields = {}
    for key, values in raw.items():
        field = _KEY_TO_FIELD.get(_normalise_key(key))
        if field is None:
            raise ValueError(f"{path}: unknown pool key {key!r}; known: {sorted(set(_KEY_TO_FIELD.values()))}")
        if field in fields:
            raise ValueError(f"{path}: key {key!r} repeats pool {field!r}")
        if isinstance(values, list):  # integers (birth years, days) read as their decimal strings; never booleans
            values = [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in values]
        _check_values(values, f"{path}: key {key!r}")
        fields[field] = tuple(values)
    return dataclasses.replace(fallback or project_pools(), **fields)
