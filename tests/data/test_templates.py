"""Templates: the project's own set, placeholder validation, the table reader."""

import pandas as pd
import pytest

from cfka_jax.data.templates import (ATTRIBUTES, PLACEHOLDERS, Templates, fill, project_templates,
                                     read_template_table, template_problem)


def test_project_templates_cover_attributes_and_lengths():
    temps = project_templates()
    for attr, group in zip(ATTRIBUTES, temps.by_attribute):
        assert len(group) >= 20 and len(set(group)) == len(group)
        lengths = [len(t.split()) for t in group]
        assert min(lengths) <= 10 and max(lengths) > 20  # several length groups
        for t in group:
            assert template_problem(t, attr) is None
            assert not t.startswith(PLACEHOLDERS[attr])  # the value always has a leading space (§3.5)


@pytest.mark.parametrize("template, attr, problem", [
    ("[Name] works at [Company].", "company", None),
    ("He works at [Company].", "company", "exactly one [Name]"),
    ("[Name] and [Name] work at [Company].", "company", "exactly one [Name]"),
    ("[Name] works at [Company] and [Company].", "company", "exactly one [Company]"),
    ("[Name] works at [Major].", "company", "exactly one [Company]"),
    ("[Name] works at [Company] in [Birthplace].", "company", "unexpected placeholder"),
    ("[Name] works at [Company] [oops.", "company", "unbalanced"),
    ("[Name] works at [Company].", "hobby", "unknown attribute"),
])
def test_template_problem(template, attr, problem):
    got = template_problem(template, attr)
    assert got is None if problem is None else problem in got


def test_fill():
    assert fill("[Name] was born in [Birthplace].", "birthplace", "Ann B. Lee", "Reno, NV") == \
        "Ann B. Lee was born in Reno, NV."
    with pytest.raises(ValueError, match="template 0 of 'major'"):
        Templates(tuple((f"[Name] {PLACEHOLDERS[a]}.",) if a != "major" else ("[Name] studied.",) for a in ATTRIBUTES))


def _table():
    rows = [{"template": f"[Name] has {PLACEHOLDERS[a]} number {i}.", "length": 5 + i,
             "attribute": a.capitalize(), "pretrain": 1} for a in ATTRIBUTES for i in range(3)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_read_template_table(tmp_path, suffix):
    path = tmp_path / f"all_templates.{suffix}"
    df = _table()
    df.to_csv(path, index=False) if suffix == "csv" else df.to_parquet(path)
    temps = read_template_table(path)
    assert temps.for_attribute("major") == tuple(f"[Name] has [Major] number {i}." for i in range(3))


@pytest.mark.parametrize("row, column, value, match", [
    (4, "template", "[Name] has [Company].", r"row 4 \(line 6\): expected exactly one \[Birthdate\]"),
    (7, "attribute", "Hobby", r"row 7 \(line 9\): unknown attribute 'Hobby'"),
    (2, "length", "long", r"row 2 \(line 4\): column 'length' must be an integer, got str 'long'"),
])
def test_bad_template_row_named(tmp_path, row, column, value, match):
    df = _table().astype({"length": object})
    df.loc[row, column] = value
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    with pytest.raises(ValueError, match=match) as e:
        read_template_table(path)
    assert str(path) in str(e.value)


def test_missing_column_and_attribute(tmp_path):
    path = tmp_path / "t.csv"
    _table().drop(columns=["length"]).to_csv(path, index=False)
    with pytest.raises(ValueError, match="missing column"):
        read_template_table(path)
    _table()[lambda d: d.attribute != "Major"].to_csv(path, index=False)
    with pytest.raises(ValueError, match="no templates for attribute"):
        read_template_table(path)
