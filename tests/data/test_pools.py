"""Value pools: the project's own lists and the reference-format JSON reader."""

import json

import pytest

from cfka_jax.data.pools import MIDDLE_INITIALS, PoolSizes, project_pools, read_pool_json

# Mimics the reference's all_possible_features.json: one object, keys named after the attributes, lists of strings.
REFERENCE_LIKE = {
    "first_name": ["Ava", "Liam", "Noor"],
    "middle_name": ["Q.", "X."],
    "last_name": ["Okafor", "Lindqvist"],
    "birthplace": ["Boulder, CO", "Ithaca, NY"],
    "university": ["Example Tech", "Sample College"],
    "major": ["Astronomy", "Law"],
    "company": ["Foo Robotics", "Bar Mills", "Baz Labs"],
}


def test_project_pools_sizes_and_contents():
    pools = project_pools()
    assert len(pools.first_names) == 1000 and len(pools.last_names) == 1000
    assert pools.middle_initials == MIDDLE_INITIALS and len(MIDDLE_INITIALS) == 26 and MIDDLE_INITIALS[0] == "A."
    assert len(pools.years) == 200 and pools.years[0] == "1900" and pools.years[-1] == "2099"
    assert len(pools.months) == 12 and len(pools.days) == 28 and pools.days[-1] == "28"
    assert len(pools.universities) == 146 and len(pools.majors) == 29 and len(pools.companies) == 500
    assert all(c.count(", ") == 1 and len(c.split(", ")[1]) == 2 for c in pools.birthplaces)
    small = project_pools(PoolSizes(first_names=10, companies=7))
    assert small.first_names == pools.first_names[:10] and len(small.companies) == 7


def test_pool_sizes_validated():
    with pytest.raises(ValueError, match="majors"):
        project_pools(PoolSizes(majors=10_000))
    with pytest.raises(ValueError, match="first_names"):
        PoolSizes(first_names=0)


def test_read_reference_format(tmp_path):
    path = tmp_path / "all_possible_features.json"
    path.write_text(json.dumps(REFERENCE_LIKE))
    pools = read_pool_json(path)
    assert pools.first_names == ("Ava", "Liam", "Noor") and pools.middle_initials == ("Q.", "X.")
    assert pools.companies == ("Foo Robotics", "Bar Mills", "Baz Labs")
    assert pools.years == project_pools().years  # absent keys fall back to the project's pools
    assert pools.num_names == 3 * 2 * 2


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(hobby=["chess"]), "'hobby'"),
    (lambda d: d.update(major=["Law", "Law"]), "key 'major'.*duplicate"),
    (lambda d: d.update(company=["Good", ""]), r"key 'company'\[1\]"),
    (lambda d: d.update(university="Example Tech"), "key 'university'"),
    (lambda d: d.update(birthplace=["[Birthplace]"]), r"key 'birthplace'\[0\]"),
])
def test_malformed_pool_names_file_and_key(tmp_path, edit, match):
    data = json.loads(json.dumps(REFERENCE_LIKE))
    edit(data)
    path = tmp_path / "pools.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match) as e:
        read_pool_json(path)
    assert str(path) in str(e.value)


def test_invalid_json_names_line(tmp_path):
    path = tmp_path / "pools.json"
    path.write_text('{\n "major": ["Law",\n}\n')
    with pytest.raises(ValueError, match=r"pools.json, line 3: invalid JSON"):
        read_pool_json(path)
