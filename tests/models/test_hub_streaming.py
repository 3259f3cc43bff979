"""Streaming load (``hub.open_tensors``): a sharded folder is read one shard at a time, each shard once, checked
against its index before any tensor data is read, and loads bit-identically (looped and scanned layers)."""

import json

import jax
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from cfka_jax import models
from cfka_jax.models import hub

TINY = dict(model_type="qwen3", vocab_size=53, hidden_size=31, head_dim=8, intermediate_size=43, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """(model, folder): a random tiny Qwen3 written as three shards with an index."""
    root = tmp_path_factory.mktemp("streaming")
    cfg = models.config_from_hf(TINY)
    model = models.family.of(cfg).build(cfg, 0)
    models.save_pretrained(model, root / "single")
    tensors = hub.read_tensors(root / "single")
    keys = sorted(tensors)
    names = [f"model-0000{i + 1}-of-00003.safetensors" for i in range(3)]
    (root / "sharded").mkdir()
    weight_map = {}
    for i, name in enumerate(names):
        part = {k: tensors[k] for k in keys[i::3]}
        save_file(part, root / "sharded" / name)
        weight_map.update({k: name for k in part})
    (root / "sharded" / hub.INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (root / "sharded" / hub.CONFIG_FILE).write_text((root / "single" / hub.CONFIG_FILE).read_text())
    return model, root / "sharded"


def _reads(monkeypatch) -> list[str]:
    calls = []
    original = hub.read_safetensors

    def counted(file):
        calls.append(file.rsplit("/", 1)[-1])
        return original(file)

    monkeypatch.setattr(hub, "read_safetensors", counted)
    return calls


def test_each_shard_read_once_in_order_and_bit_identical(sharded, monkeypatch):
    model, folder = sharded
    calls = _reads(monkeypatch)
    loaded = models.from_pretrained(folder)
    assert calls == sorted(set(calls)) and len(calls) == 3
    for a, b in zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(loaded)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_scanned_layers_stream_into_the_stack(sharded):
    model, folder = sharded
    scanned = models.from_pretrained(folder, scan_layers=True)
    looped = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    stacked = nnx.to_pure_dict(nnx.state(scanned, nnx.Param))
    np.testing.assert_array_equal(np.asarray(stacked["embed_tokens"]["embedding"]),
                                  np.asarray(looped["embed_tokens"]["embedding"]))
    layers = [looped["layers"][i] for i in range(TINY["num_hidden_layers"])]
    want = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *layers)
    got = jax.tree.map(np.asarray, stacked["layers"])
    jax.tree.map(np.testing.assert_array_equal, got, want)


def test_index_checked_before_any_data_is_read(sharded, tmp_path, monkeypatch):
    _, folder = sharded
    for f in folder.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    index = json.loads((tmp_path / hub.INDEX_FILE).read_text())
    key = sorted(index["weight_map"])[0]
    index["weight_map"][key] = next(s for s in sorted(set(index["weight_map"].values()))
                                    if s != index["weight_map"][key])
    (tmp_path / hub.INDEX_FILE).write_text(json.dumps(index))
    calls = _reads(monkeypatch)
    with pytest.raises(hub.ConversionError, match=key.replace(".", r"\.")):
        models.from_pretrained(tmp_path)
    assert calls == []
