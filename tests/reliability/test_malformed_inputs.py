"""Malformed inputs (issue 11): each is generated here, rejected with a ValueError/OSError that names the file and
the key or line, and leaves the disk untouched. Inputs that can be recovered from (a corrupt cache entry) are
rebuilt exactly; NaN/Inf weights load with a warning naming the tensors.

Every case in ``CASES`` builds one malformed input under ``tmp_path`` and returns the call that must fail and the
path its message must name; the fragments registered with it (the key, line or row) must appear as well.
"""

import dataclasses
import json
import os
import shutil
import warnings

import flax.nnx as nnx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import load_file, save_file

from cfka_jax import models
from cfka_jax.data import io, knowedit, pools, templates
from cfka_jax.data.biography import BiographyConfig
from cfka_jax.data.corpus import read_texts
from cfka_jax.data.pipeline import DataConfig, build_data
from cfka_jax.data.tokenize import load_tokenizer, train_word_tokenizer
from cfka_jax.models import hub
from cfka_jax.experiments import theory_sweep

TINY_QWEN3 = dict(model_type="qwen3", vocab_size=53, hidden_size=31, head_dim=8, intermediate_size=43,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
TINY_PYTHIA = dict(model_type="gpt_neox", vocab_size=53, hidden_size=30, num_attention_heads=3, intermediate_size=41,
                   num_hidden_layers=2, rotary_pct=0.4)
TEXTS = ["the court ruled on the contract .", "a judge may hear the appeal", "the statute was amended in 1999"]
ZSRE = [{"prompt": "Who employs Ann?", "ground_truth": ["Acme"], "rephrase_prompt": "Ann works for",
         "locality": {"Relation_Specificity": [{"prompt": "The sky is", "ground_truth": ["blue"]}]}}]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Good inputs to copy and break: tiny Qwen3 and Pythia folders and a word-level tokenizer folder."""
    root = tmp_path_factory.mktemp("good")
    for name, hf in (("qwen3", TINY_QWEN3), ("pythia", TINY_PYTHIA)):
        cfg = models.config_from_hf(hf)
        cls = models.QwenModel if name == "qwen3" else models.PythiaModel
        models.save_pretrained(cls(cfg, rngs=nnx.Rngs(0)), root / name)
    train_word_tokenizer(TEXTS, root / "tok")
    return root


def _listing(root) -> list[tuple[str, int, int]]:
    """Every file under ``root`` with its size and modification time: equal before and after = nothing written."""
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(folder, name))
            out.append((os.path.relpath(os.path.join(folder, name), root), st.st_size, st.st_mtime_ns))
    return sorted(out)


def _copy(env, name, tmp_path):
    return shutil.copytree(env / name, tmp_path / name)


def _edit_json(path, **changes):
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


CASES = {}


def case(exc, *fragments, one_line=True):
    """Register ``build(tmp_path, env) -> (call, named_path)``: ``call()`` must raise ``exc`` with a message that
    holds ``named_path`` and every fragment (and fits on one line unless ``one_line`` is False)."""

    def register(build):
        CASES[build.__name__] = (build, exc, fragments, one_line)
        return build

    return register


# ------------------------------------------------------------------------------------------- model folders


@case(ValueError, "line 2: invalid JSON")
def config_invalid_json(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    (folder / "config.json").write_text('{"model_type": "qwen3",\n "vocab_size": }\n')
    return lambda: models.from_pretrained(folder), folder / "config.json"


@case(ValueError, "expected a JSON object of model settings, got a JSON list")
def config_not_an_object(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    (folder / "config.json").write_text("[1, 2, 3]")
    return lambda: models.from_pretrained(folder), folder / "config.json"


@case(ValueError, "line 2: invalid UTF-8 (byte 0xff")
def config_invalid_utf8(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    (folder / "config.json").write_bytes(b'{"model_type": "qwen3",\n "hidden_act": "\xff"}')
    return lambda: models.from_pretrained(folder), folder / "config.json"


@case(ValueError, "hidden_size must be an integer, got string '31'")
def config_int_field_as_string(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    _edit_json(folder / "config.json", hidden_size="31")
    return lambda: models.from_pretrained(folder), folder / "config.json"


@case(ValueError, "num_hidden_layers must be an integer, got boolean True")
def config_int_field_as_bool(tmp_path, env):
    folder = _copy(env, "pythia", tmp_path)
    _edit_json(folder / "config.json", num_hidden_layers=True)
    return lambda: models.from_pretrained(folder), folder / "config.json"


@case(ValueError, "tie_word_embeddings must be a boolean (true/false), got string 'false'")
def config_bool_field_as_string(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    _edit_json(folder / "config.json", tie_word_embeddings="false")
    return lambda: models.from_pretrained(folder), folder / "config.json"


@case(ValueError, "rms_norm_eps must be a finite number, got float nan")
def config_float_field_nan(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    _edit_json(folder / "config.json", rms_norm_eps=float("nan"))  # json writes the NaN literal
    return lambda: models.from_pretrained(folder), folder / "config.json"


@case(ValueError, "rope_parameters must be an object, got string 'default'")
def config_rope_parameters_not_an_object(tmp_path, env):
    folder = _copy(env, "pythia", tmp_path)
    _edit_json(folder / "config.json", rope_parameters="default")
    return lambda: models.from_pretrained(folder), folder / "config.json"


@case(FileNotFoundError, "no config.json")
def config_missing(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    (folder / "config.json").unlink()
    return lambda: models.from_pretrained(folder), folder


@case(FileNotFoundError, "no such model folder")
def model_folder_missing(tmp_path, env):
    folder = tmp_path / "EleutherAI" / "pythia-typo"  # looks like a Hub repo id: must not be looked up
    return lambda: models.from_pretrained(folder), folder


@case(NotADirectoryError, "not a folder")
def model_path_is_a_file(tmp_path, env):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\0" * 16)
    return lambda: models.from_pretrained(path), path


@case(FileNotFoundError, "no model.safetensors or model.safetensors.index.json")
def weights_missing(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    (folder / "model.safetensors").unlink()
    return lambda: models.from_pretrained(folder), folder


def _shard(folder):
    """Split the folder's weights into two shards with an index; returns the index path and the weight map."""
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    keys = sorted(tensors)
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {k: names[i % 2] for i, k in enumerate(keys)}
    for name in names:
        save_file({k: tensors[k] for k in keys if weight_map[k] == name}, folder / name)
    index = folder / hub.INDEX_FILE
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index, weight_map


@case(ValueError, "missing key 'weight_map'")
def index_without_weight_map(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    index, weight_map = _shard(folder)
    index.write_text(json.dumps({"metadata": {}, "weights": weight_map}))
    return lambda: models.from_pretrained(folder), index


@case(FileNotFoundError, "names missing shard file(s): model-00002-of-00002.safetensors")
def index_names_missing_shard(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    index, _ = _shard(folder)
    (folder / "model-00002-of-00002.safetensors").unlink()
    return lambda: models.from_pretrained(folder), index


@case(ValueError, "key 'weight_map' must be a non-empty object")
def index_weight_map_is_a_list(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    index, weight_map = _shard(folder)
    index.write_text(json.dumps({"weight_map": sorted(weight_map)}))
    return lambda: models.from_pretrained(folder), index


@case(ValueError, "key 'weight_map.model.norm.weight' must name a shard file in the same folder")
def index_shard_outside_folder(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    index, weight_map = _shard(folder)
    weight_map["model.norm.weight"] = "../model-00001-of-00002.safetensors"
    index.write_text(json.dumps({"weight_map": weight_map}))
    return lambda: models.from_pretrained(folder), index


@case(ValueError, "not a readable safetensors file")
def safetensors_truncated(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:len(data) // 2])
    return lambda: models.from_pretrained(folder), folder / "model.safetensors"


@case(ValueError, "not a readable safetensors file")
def safetensors_empty(tmp_path, env):
    folder = _copy(env, "pythia", tmp_path)
    (folder / "model.safetensors").write_bytes(b"")
    return lambda: models.from_pretrained(folder), folder / "model.safetensors"


@case(ValueError, "not a readable safetensors file")
def safetensors_garbage(tmp_path, env):
    folder = _copy(env, "pythia", tmp_path)
    (folder / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(4096))
    return lambda: models.from_pretrained(folder), folder / "model.safetensors"


@case(hub.ConversionError, "model.layers.0.mlp.up_proj.weight: dtype int32, expected a floating-point tensor",
      one_line=False)
def weights_integer_tensor(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.mlp.up_proj.weight"] = np.round(tensors["model.layers.0.mlp.up_proj.weight"] * 100
                                                            ).astype(np.int32)
    save_file(tensors, folder / "model.safetensors")
    return lambda: models.from_pretrained(folder), folder


# ---------------------------------------------------------------------------------------------- tokenizers


@case(FileNotFoundError, "no tokenizer files (looked for tokenizer.json, tokenizer.model, vocab.json")
def tokenizer_files_missing(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)  # a model folder (config.json, weights) without tokenizer files
    return lambda: load_tokenizer(folder), folder


@case(FileNotFoundError, "no such tokenizer folder")
def tokenizer_folder_missing(tmp_path, env):
    folder = tmp_path / "Qwen" / "Qwen3-0.6B"
    return lambda: load_tokenizer(folder), folder


@case(ValueError, "line 1: invalid JSON")
def tokenizer_json_truncated(tmp_path, env):
    folder = _copy(env, "tok", tmp_path)
    text = (folder / "tokenizer.json").read_text()
    (folder / "tokenizer.json").write_text(text[:len(text) // 3].replace("\n", " "))
    return lambda: load_tokenizer(folder), folder / "tokenizer.json"


@case(ValueError, "not a valid tokenizer.json")
def tokenizer_json_not_a_tokenizer(tmp_path, env):
    folder = _copy(env, "tok", tmp_path)
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "NoSuchModel"}}')
    return lambda: load_tokenizer(folder), folder / "tokenizer.json"


@case(ValueError, "invalid JSON")
def tokenizer_json_corrupt_behind_auto_tokenizer(tmp_path, env):
    folder = _copy(env, "tok", tmp_path)
    _edit_json(folder / "tokenizer_config.json", tokenizer_class="GPT2Tokenizer")  # the AutoTokenizer path
    (folder / "tokenizer.json").write_text('{"version": "1.0", "trunc')
    return lambda: load_tokenizer(folder), folder / "tokenizer.json"


@case(ValueError, "line 1: invalid JSON")
def tokenizer_config_corrupt(tmp_path, env):
    folder = _copy(env, "tok", tmp_path)
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": ')
    return lambda: load_tokenizer(folder), folder / "tokenizer_config.json"


# ------------------------------------------------------------------------------------------------- corpora


@case(ValueError, "line 1: invalid UTF-8 (byte 0x89 at byte column 1")
def corpus_binary_txt(tmp_path, env):
    path = tmp_path / "scan.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    return lambda: read_texts(path), path


@case(ValueError, "line 3: NUL character")
def corpus_txt_with_nul(tmp_path, env):
    path = tmp_path / "a.txt"
    path.write_text("first doc\n\nsecond\x00doc\n")
    return lambda: read_texts(path), path


@case(ValueError, "line 4: invalid UTF-8 (byte 0xe9 at byte column 4; a binary file or another encoding?)")
def corpus_txt_latin1(tmp_path, env):
    path = tmp_path / "a.txt"
    path.write_bytes("first doc\n\ncaf\u00e9 ok\n".encode() + "caf\u00e9\n".encode("latin-1"))
    return lambda: read_texts(path), path


@case(ValueError, "line 2: invalid UTF-8")
def corpus_jsonl_invalid_utf8(tmp_path, env):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "bad \xc3\x28"}\n')
    return lambda: read_texts(path), path


@case(ValueError, "line 2: lone UTF-16 surrogate \\ud800 at column 16")
def corpus_jsonl_lone_surrogate(tmp_path, env):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "ok \\ud83d\\ude00"}\n{"text": "half \\ud800 pair"}\n')  # a pair is fine, a half not
    return lambda: read_texts(path), path


@case(ValueError, "line 1: JSON nested too deeply")
def corpus_jsonl_deeply_nested(tmp_path, env):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "x", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    return lambda: read_texts(path), path


@case(ValueError, "line 2: expected a JSON object, got list")
def corpus_jsonl_line_not_an_object(tmp_path, env):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "ok"}\n["text", "list"]\n')
    return lambda: read_texts(path), path


@case(ValueError, "empty corpus")
def corpus_empty(tmp_path, env):
    path = tmp_path / "blank.txt"
    path.write_text("\n  \n\t\n")
    return lambda: read_texts(path), path


@case(ValueError, "row 1: column 'text' holds invalid UTF-8")
def corpus_parquet_invalid_utf8(tmp_path, env):
    raw = pa.array([b"fine", b"\xff\xfe broken"], type=pa.binary())
    column = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # unvalidated: as a foreign writer may
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": column}), path)
    return lambda: read_texts(path), path


# ---------------------------------------------------------------------------------- worlds, caches, KnowEdit


def _world(tmp_path):
    from cfka_jax.data.biography import generate_world

    folder = tmp_path / "world"
    io.save_world(generate_world(BiographyConfig(num_pt_people=3, num_cpt_people=1, train_bios_per_person=1)), folder)
    return folder


@case(ValueError, "line 2: invalid UTF-8")
def world_people_invalid_utf8(tmp_path, env):
    folder = _world(tmp_path)
    lines = (folder / "people.jsonl").read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"fullname": "', b'"fullname": "\xff')
    (folder / "people.jsonl").write_bytes(b"\n".join(lines))
    return lambda: io.load_world(folder), folder / "people.jsonl"


@case(ValueError, "bad BiographyConfig: num_pt_people must be an integer, got string '3'")
def world_config_field_as_string(tmp_path, env):
    folder = _world(tmp_path)
    _edit_json(folder / "config.json", num_pt_people="3")
    return lambda: io.load_world(folder), folder / "config.json"


@case(io.CorruptCacheError, "not a readable .npz file")
def packed_npz_truncated(tmp_path, env):
    from cfka_jax.data.packing import pack

    path = tmp_path / "p.npz"
    io.save_packed(pack([np.arange(1, 40, dtype=np.int32)], 8, 0), None, path)
    path.write_bytes(path.read_bytes()[:-40])
    return lambda: io.load_packed(path), path


@case(ValueError, "record 1", "key 'ground_truth'", "no answers ([])")
def knowedit_empty_answer_list(tmp_path, env):
    path = tmp_path / "test.json"
    path.write_text(json.dumps(ZSRE + [dict(ZSRE[0], ground_truth=[])]))
    return lambda: knowedit.load_knowedit(path), path


@case(ValueError, "record 0 locality.Relation_Specificity[0]", "key 'ground_truth'", "no answers")
def knowedit_empty_locality_answers(tmp_path, env):
    rec = json.loads(json.dumps(ZSRE[0]))
    rec["locality"]["Relation_Specificity"][0]["ground_truth"] = []
    path = tmp_path / "test.json"
    path.write_text(json.dumps([rec]))
    return lambda: knowedit.load_knowedit(path), path


@case(ValueError, "line 3: lone UTF-16 surrogate \\udc00")
def knowedit_lone_surrogate(tmp_path, env):
    path = tmp_path / "test.json"
    path.write_text('[\n {"prompt": "Who employs Ann?", "ground_truth": ["Acme"],\n'
                    '  "rephrase_prompt": "Ann \\udc00 works for", "locality": {"Relation_Specificity": []}}\n]\n')
    return lambda: knowedit.load_knowedit(path), path


@case(ValueError, "entry 0: no rewrites")
def knowedit_augmentation_without_rewrites(tmp_path, env):
    facts = knowedit.load_knowedit(_write_json(tmp_path / "test.json", ZSRE)).continual
    path = _write_json(tmp_path / "aug.json", [[], ["Ann's employer is Acme."]])
    return lambda: knowedit.augmented_pairs(path, facts), path


def _write_json(path, obj):
    path.write_text(json.dumps(obj))
    return path


# ------------------------------------------------------------------------------------- pools and templates


@case(ValueError, "key 'major'[1]: value must be a string, got bool True")
def pools_boolean_value(tmp_path, env):
    path = _write_json(tmp_path / "pools.json", {"major": ["Law", True]})
    return lambda: pools.read_pool_json(path), path


@case(ValueError, "key 'birth_year'[0]: value must be a string, got float 1990.5")
def pools_float_value(tmp_path, env):
    path = _write_json(tmp_path / "pools.json", {"birth_year": [1990.5]})
    return lambda: pools.read_pool_json(path), path


@case(ValueError, "row 1 (line 3): column 'length' must be an integer, got float 3.5")
def templates_fractional_length(tmp_path, env):
    path = tmp_path / "t.csv"
    path.write_text("template,length,attribute\n[Name] was born in [Birthplace].,6,birthplace\n"
                    "[Name] studied [Major].,3.5,major\n")
    return lambda: templates.read_template_table(path), path


@case(ValueError, "row 0: column 'template' must be a string, got int 7")
def templates_non_string_template(tmp_path, env):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"template": [7], "length": [3], "attribute": ["major"]}), path)
    return lambda: templates.read_template_table(path), path


# ------------------------------------------------------------------------------------------- sweep configs


def _sweep(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return lambda: theory_sweep.main(["--config", str(path), "--out", str(tmp_path / "out")]), path


@case(ValueError, "grid.toml, line 2: invalid TOML", "(column 9)")
def sweep_toml_syntax_error(tmp_path, env):
    return _sweep(tmp_path, "grid.toml", "ks = [0, 1]\nalphas == [0.5]\nsteps = 10\n")


@case(ValueError, "line 2: invalid JSON")
def sweep_json_syntax_error(tmp_path, env):
    return _sweep(tmp_path, "grid.json", '{"ks": [0, 1],\n "steps": 10,}\n')


@case(ValueError, "key 'x64' must be a boolean (true/false), got string 'false'")
def sweep_bool_as_string(tmp_path, env):
    return _sweep(tmp_path, "grid.toml", 'x64 = "false"\n')


@case(ValueError, "key 'alphas'[1] must be a finite number in (0.0, 1.0], got 1.5")
def sweep_alpha_out_of_range(tmp_path, env):
    return _sweep(tmp_path, "grid.toml", "alphas = [0.5, 1.5]\n")


@case(ValueError, "key 'alphas' must be a list of finite numbers, got string '0.5,1'")
def sweep_alphas_as_string(tmp_path, env):
    return _sweep(tmp_path, "grid.json", '{"alphas": "0.5,1"}')


@case(ValueError, "key 'steps' must be an integer, got float 100.0")
def sweep_int_as_float(tmp_path, env):
    return _sweep(tmp_path, "grid.toml", "steps = 100.0\n")


@case(ValueError, "key 'ks'[0] must be a finite number in [0.0, inf), got -1.0")
def sweep_negative_k(tmp_path, env):
    return _sweep(tmp_path, "grid.json", '{"ks": [-1.0, 0]}')


@case(ValueError, "expected a JSON object of SweepConfig fields, got a JSON list")
def sweep_json_not_an_object(tmp_path, env):
    return _sweep(tmp_path, "grid.json", "[1, 2]")


@case(FileNotFoundError, "no such sweep config file")
def sweep_config_missing(tmp_path, env):
    path = tmp_path / "gird.toml"
    return lambda: theory_sweep.main(["--config", str(path), "--out", str(tmp_path / "out")]), path


def test_enough_distinct_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_input_is_rejected_naming_file_and_key(name, tmp_path, env):
    build, exc, fragments, one_line = CASES[name]
    call, named = build(tmp_path, env)
    before = _listing(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", hub.NonFiniteWeightsWarning)
        with pytest.raises(exc) as err:
            call()
    assert isinstance(err.value, (ValueError, OSError))
    message = str(err.value)
    assert str(named) in message
    for fragment in fragments:
        assert fragment in message
    if one_line:
        assert "\n" not in message
    assert "Repo id" not in message and "huggingface.co" not in message
    assert _listing(tmp_path) == before


# ---------------------------------------------------------------------------------- warnings and recovery


def test_non_finite_weights_load_with_a_warning_naming_them(tmp_path, env):
    folder = _copy(env, "qwen3", tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.norm.weight"][3] = np.nan
    tensors["model.layers.1.self_attn.q_proj.weight"][0, :2] = [np.inf, -np.inf]
    save_file(tensors, folder / "model.safetensors")
    with pytest.warns(hub.NonFiniteWeightsWarning) as record:
        model = models.from_pretrained(folder)
    (message,) = [str(w.message) for w in record if issubclass(w.category, hub.NonFiniteWeightsWarning)]
    assert str(folder / "model.safetensors") in message
    assert "model.layers.1.self_attn.q_proj.weight (2 of " in message and "model.norm.weight (1 of 31)" in message
    assert "embed_tokens" not in message
    assert np.isnan(np.asarray(model.norm.scale[...])[3])  # loaded as stored: the warning is the signal
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        models.from_pretrained(env / "qwen3")  # finite weights: no warning


TINY_DATA = DataConfig(BiographyConfig(num_pt_people=6, num_cpt_people=2, train_bios_per_person=2), seq_len=64)


@pytest.mark.parametrize("victim", ["packed/eval_pt_test.npz", "tokenized/cpt_train.parquet", "world/people.jsonl"])
def test_corrupt_data_cache_entry_is_rebuilt_exactly(tmp_path, victim):
    first = build_data(TINY_DATA, tmp_path)
    path = os.path.join(first.folder, victim)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.warns(io.CacheRebuildWarning, match=victim.split("/")[-1].replace(".", r"\.")):
        again = build_data(TINY_DATA, tmp_path)
    assert again.folder == first.folder and again.world == first.world
    for name, split in first.splits.items():
        np.testing.assert_array_equal(again.splits[name].tokens, split.tokens)
    for name, (packed, fta) in first.eval.items():
        np.testing.assert_array_equal(again.eval[name][0].tokens, packed.tokens)
        np.testing.assert_array_equal(again.eval[name][1].token, fta.token)
    with open(path, "rb") as f:
        assert f.read() == data  # the rebuilt file is byte-identical
    with warnings.catch_warnings():
        warnings.simplefilter("error", io.CacheRebuildWarning)
        build_data(TINY_DATA, tmp_path)  # intact now: read back without a rebuild


def test_corrupt_world_cache_is_rebuilt(tmp_path):
    cfg = BiographyConfig(num_pt_people=3, num_cpt_people=1, train_bios_per_person=1)
    world = io.cached_world(cfg, tmp_path)
    (folder,) = tmp_path.iterdir()
    (folder / "pt_train.jsonl").write_text('{"pid": 0, "number": 1, "te')
    with pytest.warns(io.CacheRebuildWarning, match=r"pt_train\.jsonl, line 1: invalid JSON"):
        assert io.cached_world(cfg, tmp_path) == world
    assert io.load_world(folder) == world


def test_data_build_rejects_a_corrupt_user_tokenizer_before_writing(tmp_path, env):
    build_data(TINY_DATA, tmp_path / "cache")
    broken = _copy(env, "tok", tmp_path)
    (broken / "tokenizer.json").write_text("{")
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=r"tokenizer\.json, line 1: invalid JSON"):
        build_data(dataclasses.replace(TINY_DATA, tokenizer_path=str(broken)), tmp_path / "cache")
    assert _listing(tmp_path) == before
