"""Synthetic languages (spec §4.3): one fact, disjoint token sets, one structure; the retrieval split and metrics."""

import numpy as np
import pytest

from cfka_jax.geometry import languages
from cfka_jax.geometry.languages import BOS, EOS, PAD, SEP, SPECIALS


@pytest.fixture(scope="module")
def facts():
    return languages.make_facts(languages.LanguageConfig(languages=4, entities=6, relations=3, name_pieces=5,
                                                         value_concepts=7, parallel=20, queries=5, seed=2))


def test_the_same_fact_has_disjoint_token_sets_and_one_structure(facts):
    c = facts.config
    for item in range(c.items):
        rendered = [languages.render(facts, item, ell) for ell in range(c.languages)]
        sets = [set(r.tolist()) for r in rendered]
        for a in range(c.languages):
            assert len(rendered[a]) == c.item_len and min(sets[a]) >= SPECIALS and max(sets[a]) < c.vocab_size
            for b in range(a + 1, c.languages):
                assert not sets[a] & sets[b], (item, a, b)
        # one structure: positions holding equal concepts hold equal tokens in every language
        concepts = languages.item_concepts(facts, item)
        same = concepts[:, None] == concepts[None, :]
        for r in rendered:
            assert ((r[:, None] == r[None, :]) == same).all()
    # each language's block is a permutation of its own ids; different facts differ in some language-0 token
    for ell in range(c.languages):
        block = SPECIALS + ell * c.concepts + np.arange(c.concepts)
        assert sorted(facts.lexicon[ell].tolist()) == block.tolist()
    assert len({tuple(languages.render(facts, i, 0)) for i in range(c.items)}) == c.items


def test_corpus_and_retrieval_split(facts):
    c = facts.config
    tokens, mask = languages.corpus(facts, seed=1)
    assert tokens.shape == (c.languages * c.items + c.parallel, c.seq_len)
    assert (tokens[:, 0] == BOS).all() and ((tokens == PAD) == (mask == 0)).all()
    pairs = tokens[c.languages * c.items:]
    assert (pairs[:, 1 + c.item_len] == SEP).all() and (pairs[:, -1] == EOS).all()
    split = languages.retrieval_split(facts, seed=0)
    assert split["cand_tokens"].shape[0] == (c.languages - 1) * c.queries
    assert ((split["query_item"][:, None] == split["cand_item"][None]).sum(1) == c.languages - 1).all()
    q_ids, k_ids = set(split["query_tokens"].ravel()) - {PAD, BOS, EOS}, set(split["cand_tokens"].ravel())
    assert not q_ids & k_ids


def test_retrieval_metrics_on_hand_built_scores():
    query_item = np.array([0, 1])
    cand_item = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    scores = np.array([[8, 7, 6, 5, 4, 3, 2, 1.0],     # ranks: 0, 1, 0, 1 ... : 2 of the top 4 are same-source
                       [0, 9, 0, 8, 0, 7, 0, 6.0]])    # all 4 same-source first
    m = languages.retrieval_metrics(scores, query_item, cand_item)
    assert m["recall@4"] == pytest.approx(0.75) and m["all_same@4"] == 0.5 and m["top1"] == 1.0
    assert m["recall@1"] == 1.0 and m["recall@10"] == 1.0
