"""On-disk formats: world JSONL, tokenised Parquet, packed npz, config-hash caches, malformed input errors."""

import dataclasses
import json
import os

import numpy as np
import pytest

from cfka_jax.data import io
from cfka_jax.data.packing import fta_targets, pack
from cfka_jax.data.tokenize import tokenize_split

from tests.data.conftest import SMOKE


def test_world_round_trip_and_cache(world, tmp_path):
    io.save_world(world, tmp_path / "w")
    assert io.load_world(tmp_path / "w") == world
    cached = io.cached_world(SMOKE, tmp_path / "cache")
    folder, = os.listdir(tmp_path / "cache")
    assert cached == world and folder == f"world-{io.config_hash(SMOKE)}"
    assert io.cached_world(SMOKE, tmp_path / "cache") == world  # read back, not regenerated


def test_config_hash_tracks_fields_and_file_contents(tmp_path):
    assert io.config_hash(SMOKE) == io.config_hash(dataclasses.replace(SMOKE))
    assert io.config_hash(SMOKE) != io.config_hash(dataclasses.replace(SMOKE, seed=8))
    path = tmp_path / "pools.json"
    path.write_text(json.dumps({"major": ["Law"]}))
    cfg = dataclasses.replace(SMOKE, pool_path=str(path))
    before = io.config_hash(cfg)
    path.write_text(json.dumps({"major": ["Art"]}))
    assert io.config_hash(cfg) != before
    with pytest.raises(ValueError, match="no such file"):
        io.config_hash(dataclasses.replace(SMOKE, pool_path=str(tmp_path / "missing.json")))


@pytest.mark.parametrize("line, match", [
    ('{"pid": 0, "number": 1, "text": "x", "order": [0]', r"pt_test.jsonl, line 2: invalid JSON"),
    ('[1, 2]', r"pt_test.jsonl, line 2: expected a JSON object"),
    ('{"pid": 0, "number": 1, "order": [], "templates": []}', r"pt_test.jsonl, line 2: missing key 'text'"),
    ('{"pid": 0, "number": "1", "text": "x", "order": [], "templates": []}',
     r"pt_test.jsonl, line 2: key 'number' must be int"),
    ('{"pid": 999, "number": 1, "text": "x", "order": [], "templates": []}', r"pt_test.jsonl, line 2: key 'pid' 999"),
])
def test_malformed_world_line_named(world, tmp_path, line, match):
    io.save_world(world, tmp_path)
    path = tmp_path / "pt_test.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=match):
        io.load_world(tmp_path)


def test_malformed_people_and_config(world, tmp_path):
    io.save_world(world, tmp_path)
    people = tmp_path / "people.jsonl"
    rows = people.read_text().splitlines()
    rows[2] = rows[2].replace('"pid": 2', '"pid": 5')
    people.write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"people.jsonl, line 3: key 'pid' is 5, expected 2"):
        io.load_world(tmp_path)
    (tmp_path / "config.json").write_text('{"num_pt_people": 3, "pool_sizes": {}, "bogus": 1}')
    with pytest.raises(ValueError, match="config.json: bad BiographyConfig"):
        io.load_world(tmp_path)


def test_tokenized_and_packed_round_trip(world, tokenizer, tmp_path):
    split = tokenize_split(world.pt_test, world.people, tokenizer)
    io.save_tokenized(split, tmp_path / "s.parquet")
    back = io.load_tokenized(tmp_path / "s.parquet")
    for f in dataclasses.fields(split):
        np.testing.assert_array_equal(getattr(back, f.name), getattr(split, f.name))
    packed = pack(split.docs(), 64, 0, doc_mask=True)
    fta = fta_targets(packed, split.idx)
    io.save_packed(packed, fta, tmp_path / "p.npz")
    p2, f2 = io.load_packed(tmp_path / "p.npz")
    assert p2.doc_mask is True and f2.num_dropped == fta.num_dropped
    np.testing.assert_array_equal(p2.loss_mask, packed.loss_mask)
    np.testing.assert_array_equal(f2.token, fta.token)
    io.save_packed(packed, None, tmp_path / "q.npz")
    assert io.load_packed(tmp_path / "q.npz")[1] is None


def test_tokenized_missing_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"pid": [1]}), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad.parquet: missing column"):
        io.load_tokenized(tmp_path / "bad.parquet")
