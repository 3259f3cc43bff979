"""The one replay-mixing entry point (cfka_jax/data/mixing.py): token share, the synthetic reference's copies and
the real-data reference's 50/50 bug."""

import numpy as np
import pytest

from cfka_jax.data.mixing import mix_replay, replay_copies

EOS = 0


def _docs(n, tag):
    return [np.full(3, tag * 1000 + i, np.int32) for i in range(n)]


def test_reference_copies():
    assert [replay_copies(a) for a in (0.9, 0.8, 0.67, 0.5)] == [9, 4, 2, 1]
    new, old = [np.array([1, EOS])], [np.array([2, EOS]), np.array([3, EOS])]
    mixed, stats = mix_replay(new, old, 0.8, rule="reference_copies")
    assert len(mixed) == 2 + 4 and mixed[0] is old[0] and all(m is new[0] for m in mixed[2:])
    assert stats["replay_docs"] == 2 and stats["new_tokens"] == 8 and stats["replay_tokens"] == 4
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            replay_copies(bad)
        with pytest.raises(ValueError, match="alpha"):
            mix_replay(new, old, bad, rule="reference_copies")


def test_token_share_hits_the_target():
    rng = np.random.default_rng(0)
    new = [np.ones(rng.integers(5, 40), np.int32) for _ in range(50)]
    replay = [np.full(rng.integers(3, 12), 2, np.int32) for _ in range(7)]  # far fewer tokens than needed
    for alpha in (0.5, 0.67, 0.8, 0.9):
        docs, stats = mix_replay(new, replay, alpha, seed=1)
        new_tokens = sum(len(d) for d in new)
        replay_tokens = sum(len(d) for d in docs[len(new):])
        assert docs[:len(new)] == new and stats["replay_tokens"] == replay_tokens
        target = new_tokens * (1 - alpha) / alpha
        assert abs(replay_tokens - target) <= 12 / 2  # nearest prefix: within half the longest replay document
        assert stats["replay_share"] == pytest.approx(replay_tokens / (new_tokens + replay_tokens))
        counts = np.bincount([int(np.flatnonzero([d is r for r in replay])[0]) for d in docs[len(new):]],
                             minlength=len(replay))
        assert counts.max() - counts.min() <= 1  # whole passes over the replay corpus: repeats are balanced
    again, _ = mix_replay(new, replay, 0.8, seed=1)
    assert [len(d) for d in again] == [len(d) for d in mix_replay(new, replay, 0.8, seed=1)[0]]
    alone, stats = mix_replay(new, [], 1.0, seed=0)
    assert alone == new and stats["replay_tokens"] == 0 and stats["replay_share"] == 0.0
    with pytest.raises(ValueError):
        mix_replay(new, [], 0.8, seed=0)
    with pytest.raises(ValueError):
        mix_replay(new, replay, 0.0, seed=0)


def test_code_5050_is_half_half_for_any_alpha():
    new, rep = _docs(20, 1), _docs(7, 2)
    for alpha in (0.5, 0.8, 0.9):
        mixed, stats = mix_replay(new, rep, alpha, rule="code_5050", seed=1)
        ids = [int(d[0]) for d in mixed]
        assert sum(i >= 2000 for i in ids) == 7 and sum(i < 2000 for i in ids) == 7
        assert stats["replay_share"] == 0.5
    with pytest.raises(ValueError):
        mix_replay(new, rep, 1.0, rule="code_5050")
    with pytest.raises(ValueError):
        mix_replay(new, [], 0.5, rule="code_5050")
    with pytest.raises(ValueError, match="rule"):
        mix_replay(new, rep, 0.5, rule="alpha")
