"""Biography sentence templates (spec cfka_stoc.md §3.3).

A template is one sentence with exactly one ``[Name]`` and exactly one placeholder of its attribute
(``[Birthplace]``, ``[Birthdate]``, ``[University]``, ``[Major]``, ``[Company]``) and no other bracketed
placeholder. The project ships its own 20 templates per attribute over four length groups
(``project_templates``); ``read_template_table`` reads a table in the reference layout (``all_templates.parquet``
or a CSV with columns ``template, length, attribute``; extra columns such as ``pretrain``/``length_group`` are
ignored) and names the first bad row.
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from cfka_jax.data import _template_lists as _T

ATTRIBUTES = ("birthplace", "birthdate", "university", "major", "company")
"""The five attributes in canonical sentence order (§3.4)."""

PLACEHOLDERS = {a: f"[{a.capitalize()}]" for a in ATTRIBUTES}
NAME_PLACEHOLDER = "[Name]"
_BRACKETED = re.compile(r"\[[^\[\]]*\]")


@dataclasses.dataclass(frozen=True)
class Templates:
    """Templates per attribute, in ``ATTRIBUTES`` order.

    Attributes:
      by_attribute: ``by_attribute[a]`` is the tuple of templates for ``ATTRIBUTES[a]``.
    """

    by_attribute: tuple[tuple[str, ...], ...]

    def __post_init__(self):
        if len(self.by_attribute) != len(ATTRIBUTES):
            raise ValueError(f"need templates for {len(ATTRIBUTES)} attributes, got {len(self.by_attribute)}")
        for attr, temps in zip(ATTRIBUTES, self.by_attribute):
            if not temps:
                raise ValueError(f"no templates for attribute {attr!r}")
            for i, t in enumerate(temps):
                problem = template_problem(t, attr)
                if problem:
                    raise ValueError(f"template {i} of {attr!r}: {problem}: {t!r}")

    def for_attribute(self, attribute: str) -> tuple[str, ...]:
        return self.by_attribute[ATTRIBUTES.index(attribute)]


def template_problem(template: str, attribute: str) -> str | None:
    """Why ``template`` is not a valid template of ``attribute``, or None when it is."""
    if attribute not in PLACEHOLDERS:
        return f"unknown attribute {attribute!r}; expected one of {ATTRIBUTES}"
    if not isinstance(template, str) or not template.strip():
        return "empty template"
    found = _BRACKETED.findall(template)
    if found.count(NAME_PLACEHOLDER) != 1:
        return f"expected exactly one {NAME_PLACEHOLDER}, found {found.count(NAME_PLACEHOLDER)}"
    ph = PLACEHOLDERS[attribute]
    if found.count(ph) != 1:
        return f"expected exactly one {ph}, found {found.count(ph)}"
    extra = [f for f in found if f not in (NAME_PLACEHOLDER, ph)]
    if extra:
        return f"unexpected placeholder(s) {extra}"
    if template.count("[") != len(found) or template.count("]") != len(found):
        return "unbalanced brackets"
    return None


def fill(template: str, attribute: str, name: str, value: str) -> str:
    """The sentence ``template`` with ``[Name]`` and the attribute placeholder replaced."""
    return template.replace(NAME_PLACEHOLDER, name).replace(PLACEHOLDERS[attribute], value)


def project_templates() -> Templates:
    """The project's own templates: 20 per attribute, word lengths ≈ 3–33 in four groups."""
    return Templates((_T.BIRTHPLACE, _T.BIRTHDATE, _T.UNIVERSITY, _T.MAJOR, _T.COMPANY))


def _normalise_attribute(raw) -> str | None:
    key = re.sub(r"[^a-z]", "", str(raw).lower())
    return key if key in PLACEHOLDERS else None


def _read_table(path: str):
    import pandas as pd

    try:
        if path.endswith(".parquet"):
            return pd.read_parquet(path)
        if path.endswith(".csv"):
            return pd.read_csv(path, keep_default_na=False)
    except Exception as e:  # pandas/pyarrow raise many types; name the file once
        raise ValueError(f"{path}: cannot read template table: {e}") from None
    raise ValueError(f"{path}: template table must be .parquet or .csv")


def _is_integer(value) -> bool:
    """An integer cell: an int (numpy's too) or a whole float, or a string of digits (a CSV column with mixed
    contents reads as strings); never a boolean, NaN or a fractional number."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    if isinstance(value, (float, np.floating)):
        return bool(np.isfinite(value)) and float(value).is_integer()
    return isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value) is not None


def read_template_table(path: str | os.PathLike) -> Templates:
    """Read and validate a template table.

    Args:
      path: ``.parquet`` or ``.csv`` with at least the columns ``template``, ``length``, ``attribute``.

    Returns:
      Templates grouped by attribute in file order.

    Raises:
      ValueError: an unreadable file, a missing column, or a row with an unknown attribute, a length that is not
        an integer (``3.5``, ``true``, ``"x"``), a non-string template or bad placeholders; the message names the
        file, the row (0-based data row; CSV also gives the line) and the column.
    """
    path = os.fspath(path)
    df = _read_table(path)
    missing = {"template", "length", "attribute"} - set(df.columns)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}; have {list(df.columns)}")
    groups: dict[str, list[str]] = {a: [] for a in ATTRIBUTES}
    for row, (template, length, attribute) in enumerate(zip(df["template"], df["length"], df["attribute"])):
        where = f"{path}: row {row}" + (f" (line {row + 2})" if path.endswith(".csv") else "")
        attr = _normalise_attribute(attribute)
        if attr is None:
            raise ValueError(f"{where}: unknown attribute {attribute!r}; expected one of {ATTRIBUTES}")
        if not _is_integer(length):
            raise ValueError(f"{where}: column 'length' must be an integer, got {type(length).__name__} {length!r}")
        if not isinstance(template, str):
            raise ValueError(f"{where}: column 'template' must be a string, got {type(template).__name__} "
                             f"{template!r:.60}")
        problem = template_problem(template, attr)
        if problem:
            raise ValueError(f"{where}: {problem}: {template!r}")
        groups[attr].append(template)
    empty = [a for a in ATTRIBUTES if not groups[a]]
    if empty:
        raise ValueError(f"{path}: no templates for attribute(s) {empty}")
    return Templates(tuple(tuple(groups[a]) for a in ATTRIBUTES))
