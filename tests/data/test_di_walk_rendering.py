"""The theory world written as token sequences (``data/theory_text.py``), the data of ``cfka di-walk``."""

import numpy as np
import pytest

from cfka_jax.data.theory_text import Rendering, packed, render
from cfka_jax.lm_theory.cooccurrence import count_cooccurrence
from cfka_jax.theory.world import MULTI_RELATION, make_world


@pytest.fixture(scope="module")
def world():
    return make_world(MULTI_RELATION)


def test_plain_one_fact_documents_are_the_world_contexts(world):
    c = render(world, Rendering(facts=64, seed=1))
    contexts, objects = np.asarray(world.contexts), np.asarray(world.objects)
    assert len(c.docs) == 64 and c.eos_id == c.vocab_size - 1
    for d, doc in enumerate(c.docs):
        x, o = doc[:-2], doc[-2]
        assert doc[-1] == c.eos_id and o in objects
        assert any(np.array_equal(x, row) for row in contexts)  # one enumerated context, in slot order
        assert c.examples.query[d] == len(x) - 1 and c.examples.sentence[d] == 0
        assert objects[c.examples.objects[d]] == o


def test_counts_of_a_large_corpus_estimate_the_world(world):
    c = render(world, Rendering(facts=20_000, seed=0))
    p, ex = packed(c, 7)
    assert len(ex.chunk) == 20_000 and np.all(ex.query == 4)
    co = count_cooccurrence(ex.contexts(p.tokens), ex.objects, num_tokens=c.vocab_size,
                            num_objects=len(c.object_ids))
    nx = int(world.context_tokens.shape[0])
    np.testing.assert_allclose(co.n_o / co.total, np.asarray(world.pr_o), atol=0.015)
    emission = co.counts[:nx] / co.n_o[None, :]
    np.testing.assert_allclose(emission, np.asarray(world.pr_s_given_o)[:nx], atol=0.05)


def test_templates_repeats_and_packing(world):
    r = Rendering(facts=48, repeats=4, facts_per_doc=3, templates=2, template_words=3, filler_vocab=5, seed=2)
    c = render(world, r)
    assert len(c.docs) == 16 and len(np.unique(c.examples.fact)) == 12
    assert np.all(np.bincount(c.examples.fact) == 4)
    kinds = np.asarray(c.kinds)
    for d, q, s in zip(c.examples.doc, c.examples.query, c.examples.sentence):
        doc = c.docs[d]
        assert kinds[doc[q]] == "query" and kinds[doc[q + 1]] == "object" and kinds[doc[q + 2]] == "end"
        assert kinds[doc[s + 2]] == "relation" and (kinds[doc[s + 3:s + 6]] == "word").all()
    # the same fact keeps its context and object in every rendering
    first = {}
    for d, q, s, f in zip(c.examples.doc, c.examples.query, c.examples.sentence, c.examples.fact):
        names_obj = (tuple(c.docs[d][s:s + 2]), int(c.docs[d][q + 1]))
        assert first.setdefault(int(f), names_obj) == names_obj
    p, ex = packed(c, 16)
    assert np.all(ex.query < 15) and np.all(ex.start <= ex.sentence) and np.all(ex.sentence <= ex.query)
    for ch, q, o in zip(ex.chunk, ex.query, ex.objects):
        assert p.tokens[ch, q + 1] == c.object_ids[o]


@pytest.mark.parametrize("bad", [dict(facts=0), dict(facts=10, repeats=3), dict(templates=-1),
                                 dict(facts=2, facts_per_doc=3), dict(template_words=True)])
def test_bad_renderings_are_refused(bad):
    with pytest.raises(ValueError, match="rendering|facts"):
        Rendering(**bad)
