"""The prompt controls of issue #23: first-k spans, Random without EOS, Random made of vocabulary tokens."""

import numpy as np
import pytest

from cfka_jax.continual.replay import ReplayConfig, make_prompts
from cfka_jax.continual.stoc import first_spans, random_spans, vocab_spans

EOS = 0


def _docs():
    rng = np.random.default_rng(3)
    # documents as the pipeline packs them: tokens 1.. and a final EOS; one holds an inner EOS at position 4
    docs = [np.concatenate([rng.integers(1, 50, size=n), [EOS]]).astype(np.int32) for n in (11, 7, 20)]
    docs[2][4] = EOS
    return docs


def test_first_spans_tile_the_start():
    assert first_spans(12, span_len=3, top_k=3) == [(0, 3), (3, 6), (6, 9)]
    assert first_spans(7, span_len=3, top_k=3) == [(0, 3), (3, 6)]  # only complete spans
    assert first_spans(2, span_len=3, top_k=3) == [(0, 2)]
    prompts = make_prompts(None, _docs(), ReplayConfig(kind="first_k"), EOS)
    assert [(p.source, p.start, p.end) for p in prompts[:3]] == [(0, 0, 3), (0, 3, 6), (0, 6, 9)]
    assert all(p.ids == tuple(int(t) for t in _docs()[p.source][p.start:p.end]) for p in prompts)


def test_random_no_eos_never_holds_eos_and_plain_random_can():
    docs = _docs()
    for seed in range(20):
        prompts = make_prompts(None, docs, ReplayConfig(kind="random_no_eos", top_k=3, seed=seed), EOS)
        assert prompts and all(EOS not in p.ids and len(p.ids) == 3 for p in prompts)
    # the inner EOS at position 4 of document 2 bars starts 2, 3, 4; the final EOS bars the last start
    rng = np.random.default_rng(0)
    starts = {a for _ in range(200) for a, _ in random_spans(rng, 21, span_len=3, top_k=3, doc=docs[2], avoid=EOS)}
    assert starts == set(range(19)) - {2, 3, 4, 18}
    with_eos = [p for seed in range(20) for p in make_prompts(None, docs, ReplayConfig(kind="random", seed=seed), EOS)
                if EOS in p.ids]
    assert with_eos  # the plain Random baseline does end on EOS sometimes (the reason for the control)


def test_random_vocab_draws_only_allowed_ids_and_is_seeded():
    allowed = np.array([5, 7, 11])
    rng = np.random.default_rng(1)
    spans = vocab_spans(rng, allowed, span_len=4, top_k=3)
    assert len(spans) == 3 and all(len(s) == 4 and set(s) <= {5, 7, 11} for s in spans)
    docs = _docs()
    cfg = ReplayConfig(kind="random_vocab", top_k=2, span_len=3)
    a = make_prompts(None, docs, cfg, EOS, vocab_ids=np.arange(1, 40))
    b = make_prompts(None, docs, cfg, EOS, vocab_ids=np.arange(1, 40))
    assert a == b and len(a) == len(docs) * 2
    assert all(p.source == -1 and len(p.ids) == 3 and EOS not in p.ids for p in a)
    assert len({p.ids for p in a}) > 1
    with pytest.raises(ValueError, match="vocab_ids"):
        make_prompts(None, docs, cfg, EOS)
    with pytest.raises(ValueError, match="kind"):
        ReplayConfig(kind="random-vocab")
