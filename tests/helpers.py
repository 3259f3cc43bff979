"""A tiny Qwen-architecture LM and batches for the continual-learning tests (prime sizes)."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.models.qwen import QwenConfig, QwenModel

VOCAB, SEQ = 37, 11


def tiny_model(seed: int = 0) -> QwenModel:
    cfg = QwenConfig(model_type="qwen2", vocab_size=VOCAB, hidden_size=24, intermediate_size=29, num_hidden_layers=2,
                     num_attention_heads=6, num_key_value_heads=2, head_dim=4,
                     tie_word_embeddings=True, initializer_range=0.2)
    return QwenModel(cfg, rngs=nnx.Rngs(seed))


def batch(seed: int = 0, rows: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, VOCAB, size=(rows, SEQ)).astype(np.int32)
    mask = np.ones((rows, SEQ), np.float32)
    mask[:, 0] = 0.0
    return {"tokens": jnp.asarray(tokens), "target_mask": jnp.asarray(mask)}


def split(model):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return graphdef, params, rest


def refused_line(argv: list[str], capsys, monkeypatch, tmp_path) -> tuple[int, str]:
    """``cfka ARGV`` run in an empty ``tmp_path``: its exit code and the last line it wrote to stderr (a value the
    parser itself refuses raises ``SystemExit``, caught here). The caller checks the code, the words and that
    nothing was written (``tmp_path`` still empty)."""
    from cfka_jax import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFKA_TRACEBACK", raising=False)
    try:
        code = cli.main(argv)
    except SystemExit as info:
        code = info.code
    return code, capsys.readouterr().err.strip().splitlines()[-1]
