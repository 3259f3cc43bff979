"""Small, valid inputs for every command, written to a folder by the tests (no training, no downloads): a 2-block
Qwen3 folder with a byte-level BPE tokenizer, a second one whose tokenizer differs, a corpus, a KnowEdit file, the
LAMA-CKL and TemporalWiki folders and the TA file of ``tests/runs/ckl_fixtures.py``; and :func:`tripwire`, which
stops a command at its first write under a folder (the tests of the "validate, then write" contract)."""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import pathlib

from tests.runs import ckl_fixtures as F

BLOCKS = 2
"""The number of blocks of the world's models (options are checked against it)."""


def write_model(folder: pathlib.Path, *, tokenizer_extra: str = "") -> pathlib.Path:
    """A random-init Qwen3 folder (``config.json``, safetensors) with the fixtures' tokenizer, written by the port."""
    from flax import nnx

    from cfka_jax.models import save_pretrained
    from cfka_jax.models.qwen import QwenConfig, QwenModel

    tok = F.write_tokenizer(folder, extra=tokenizer_extra)
    cfg = QwenConfig(model_type="qwen3", vocab_size=len(tok), hidden_size=16, intermediate_size=24,
                     num_hidden_layers=BLOCKS, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                     tie_word_embeddings=True, max_position_embeddings=512, eos_token_id=tok.eos_token_id)
    save_pretrained(QwenModel(cfg, rngs=nnx.Rngs(0)), folder)
    return folder


def write_world(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every input the commands read, in ``root``; returns name → path."""
    root.mkdir(parents=True, exist_ok=True)
    w = {"model": write_model(root / "model"),
         "other_model": write_model(root / "other", tokenizer_extra="zebra quartz xylophone " * 20),
         "lama": F.write_lama(root / "lama"), "twiki": F.write_twiki(root / "twiki")}
    (root / "corpus").mkdir()
    (root / "corpus" / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in F.corpus()[:40]))
    w["corpus"] = root / "corpus"
    w["knowedit"] = root / "knowedit.json"
    w["knowedit"].write_text(json.dumps([
        {"subject": s, "prompt": f"Where is {s} ?", "target_new": o, "ground_truth": [o],
         "rephrase_prompt": f"Which place is {s} in ?",
         "locality": {"Relation_Specificity": [{"prompt": f"The neighbour of {s} is", "ground_truth": [s]}]}}
        for s, o in zip(F.SUBJECTS[:4], F.OBJECTS[:4])]))
    w["phi_train"] = w["lama"] / "train_attention_traindata.jsonl"
    return w


class Wrote(BaseException):
    """Raised by :func:`tripwire` at a command's first write (a BaseException: no ``except Exception`` hides it)."""


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@contextlib.contextmanager
def tripwire(root: pathlib.Path):
    """Within the block, creating, opening for writing, renaming or removing anything under ``root`` raises
    :class:`Wrote` naming the path: a command stopped by it had resolved its inputs and started to write."""
    root = pathlib.Path(root).resolve()
    inside = lambda p: pathlib.Path(os.path.abspath(os.fspath(p))).is_relative_to(root)  # noqa: E731
    real = {"open": builtins.open, "os_open": os.open, "mkdir": os.mkdir, "replace": os.replace,
            "rename": os.rename, "remove": os.remove, "unlink": os.unlink, "rmdir": os.rmdir}

    def trip(path):
        raise Wrote(os.fspath(path))

    def open_(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+") and inside(file):
            trip(file)
        return real["open"](file, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if flags & _WRITE_FLAGS and inside(path):
            trip(path)
        return real["os_open"](path, flags, *args, **kwargs)

    def guard(name):
        def call(path, *args, **kwargs):
            if inside(path):
                trip(path)
            return real[name](path, *args, **kwargs)
        return call

    patches = {(builtins, "open"): open_, (io, "open"): open_, (os, "open"): os_open,
               **{(os, n): guard(n) for n in ("mkdir", "replace", "rename", "remove", "unlink", "rmdir")}}
    saved = {key: getattr(*key) for key in patches}
    for (mod, name), fn in patches.items():
        setattr(mod, name, fn)
    try:
        yield
    finally:
        for (mod, name), fn in saved.items():
            setattr(mod, name, fn)


def snapshot(root: pathlib.Path) -> dict[str, bytes | None]:
    """Every file (bytes) and folder (None) under ``root``, by relative path."""
    root = pathlib.Path(root)
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def refused(argv: list[str], root, capsys) -> str:
    """``cfka argv`` under the tripwire of ``root``: exit 2, no traceback, ``root`` unchanged; the error line."""
    import pytest

    from cfka_jax import cli

    before = snapshot(root)
    try:
        with tripwire(root):
            code = cli.main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    except Wrote as wrote:
        pytest.fail(f"cfka {' '.join(argv)} was accepted: it started writing {wrote}")
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert snapshot(root) == before, "a refused command changed its folders"
    return err.strip().splitlines()[-1]
