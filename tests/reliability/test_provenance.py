"""Provenance (issue 24): a φ records the tokenizer (and world, parent run) it was made from; a consumer refuses a
φ of the same vocabulary size over other tokens, a φ recording nothing, and a reused ``cfka taalm --biography``
folder whose φ came from another PT run, each with one line naming the flag and the folder, before reading any
parameter or writing anything."""

import json

import pytest

from cfka_jax import provenance
from cfka_jax.continual.peft import LoRAConfig
from cfka_jax.continual.taalm import phi as phimod
from cfka_jax.continual.taalm.weights import phi_token_weights, save_phi
from cfka_jax.data.tokenize import train_word_tokenizer
from cfka_jax.provenance import tokenizer_fingerprint
from cfka_jax.runs.folder import RunFolder, RunFolderError
from tests.helpers import VOCAB, tiny_model

WORDS_A = " ".join(f"a{i}" for i in range(VOCAB - 2))  # VOCAB - 2 words + EOS + UNK = VOCAB entries
WORDS_B = " ".join(f"b{i}" for i in range(VOCAB - 2))  # same size, other tokens


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    root = tmp_path_factory.mktemp("toks")
    return train_word_tokenizer([WORDS_A], root / "a"), train_word_tokenizer([WORDS_B], root / "b")


@pytest.fixture(scope="module")
def phi_dirs(toks, tmp_path_factory):
    cfg = phimod.PhiConfig(lora=LoRAConfig(rank=2, alpha=4.0, dropout=0.0))
    root = tmp_path_factory.mktemp("phi")
    made = save_phi(root / "made", phimod.build_phi(tiny_model(5), cfg), cfg, step=0,
                    made_from={"tokenizer": tokenizer_fingerprint(toks[0])})
    import shutil

    bare = shutil.copytree(made, root / "bare")  # the same φ with its provenance record removed
    meta = json.loads((bare / "phi.json").read_text())
    del meta[provenance.KEY]
    (bare / "phi.json").write_text(json.dumps(meta))
    return made, bare


def test_fingerprint_is_the_vocabulary_not_the_size_or_folder(toks, tmp_path):
    a, b = toks
    assert len(a) == len(b) == VOCAB
    assert tokenizer_fingerprint(a) != tokenizer_fingerprint(b)
    again = train_word_tokenizer([WORDS_A], tmp_path / "elsewhere")
    assert tokenizer_fingerprint(again) == tokenizer_fingerprint(a)


def test_phi_of_the_same_size_over_other_tokens_is_refused(toks, phi_dirs):
    made, _ = phi_dirs
    phi_token_weights(made, vocab_size=VOCAB, tokenizer=toks[0])  # its own tokenizer: accepted
    with pytest.raises(ValueError) as exc:
        phi_token_weights(made, vocab_size=VOCAB, tokenizer=toks[1])
    msg = str(exc.value)
    assert msg.startswith(f"--token-weights {made} was made from something else: tokenizer") and "\n" not in msg


def test_phi_recording_no_provenance_is_refused(toks, phi_dirs):
    _, bare = phi_dirs
    with pytest.raises(ValueError, match=rf"--token-weights {bare}: records no provenance"):
        phi_token_weights(bare, vocab_size=VOCAB, tokenizer=toks[0])


def test_torn_phi_json_names_the_file(toks, phi_dirs, tmp_path):
    import shutil

    torn = tmp_path / "torn"
    shutil.copytree(phi_dirs[0], torn)
    text = (torn / "phi.json").read_text()
    (torn / "phi.json").write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"phi\.json, line \d+: invalid JSON"):
        phi_token_weights(torn, tokenizer=toks[0])


def _finished_run(path, seed: int):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"run": {"seed": seed, "out": str(path), "progress": False},
                                                  "preset": {"steps": 4}}))
    (path / "final.json").write_text(json.dumps({"step": 4}))
    return RunFolder(path)


def test_run_identity_is_the_run_not_the_folder(tmp_path):
    a, moved, other = (_finished_run(tmp_path / n, s) for n, s in (("a", 0), ("moved", 0), ("other", 1)))
    assert a.identity() == moved.identity() != other.identity()
    assert a.identity()["parent_step"] == 4
    with pytest.raises(RunFolderError, match="holds no finished run"):
        RunFolder(tmp_path / "absent").identity()


def test_taalm_biography_refuses_a_phi_of_another_pt_run(tmp_path, monkeypatch):
    """The stage check of ``cfka taalm --biography PT --out DIR`` when DIR/phi holds another PT run's φ."""
    from cfka_jax.experiments import taalm_biography as tb

    first, second = _finished_run(tmp_path / "pt1", 0), _finished_run(tmp_path / "pt2", 1)
    out = tmp_path / "bio"
    (out / "phi").mkdir(parents=True)
    monkeypatch.setattr(tb, "made_from", lambda cfg, bundle: RunFolder(cfg.pt_dir).identity())
    cfg = tb.PRESETS["smoke"]()
    import dataclasses

    made = tb.made_from(dataclasses.replace(cfg, pt_dir=str(first.path)), None)
    (out / "phi" / "phi.json").write_text(json.dumps({provenance.KEY: made}))
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(ValueError) as exc:
        tb.phi_stage(dataclasses.replace(cfg, pt_dir=str(second.path), out=str(out)), None, None)
    msg = str(exc.value)
    assert f"--biography {second.path}" in msg and str(out / "phi") in msg and "parent_run" in msg, msg
    assert sorted(p.name for p in out.rglob("*")) == before
    # the same PT run (moved) is accepted: the stage returns the existing φ folder
    assert tb.phi_stage(dataclasses.replace(cfg, pt_dir=str(first.path), out=str(out)), None, None) == out / "phi"


def test_check_made_from_lists_every_difference():
    with pytest.raises(ValueError, match=r"^--x f was made from something else: a 1 \(this run: 2\); b <absent>"):
        provenance.check_made_from({"a": 1}, {"a": 2, "b": 3}, flag="--x", folder="f")
    provenance.check_made_from({"a": 1, "extra": 0}, {"a": 1}, flag="--x", folder="f")
