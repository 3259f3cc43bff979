"""Examples, objects and slots of the Biography world as the theory reads them."""

import numpy as np
import pytest

from cfka_jax.lm_theory import biography as bio


@pytest.mark.parametrize("objects", ["value", "first_token"])
def test_examples_point_at_their_objects(bundle, objects):
    vocab = bio.object_vocabulary(bundle, objects)
    ex = bio.examples(bundle, "pt_train", vocab, objects)
    packed, targets = bundle.eval["pt_train"]
    assert len(ex.objects) == len(targets.chunk) > 0
    keys = {i: k for k, i in vocab.items()}
    tok = bundle.tokenizer
    for k in range(0, len(ex.objects), 7):
        person = bundle.world.people[int(ex.pid[k])]
        value = person.values[int(ex.attr[k])]
        first = tok(" " + value, add_special_tokens=False)["input_ids"][0]
        assert packed.tokens[ex.chunk[k], ex.query[k] + 1] == first  # the query predicts the value
        assert keys[int(ex.objects[k])] == ((int(ex.attr[k]), value) if objects == "value" else first)
        span = packed.doc_ids[ex.chunk[k], ex.start[k]:ex.query[k] + 1]
        assert np.all(span == ex.doc[k]) and (ex.start[k] == 0 or packed.doc_ids[ex.chunk[k], ex.start[k] - 1]
                                             != ex.doc[k])  # the context is the document's prefix in the chunk


def test_split_without_an_eval_pack(bundle):
    vocab = bio.object_vocabulary(bundle)
    ex = bio.examples(bundle, "cpt_train", vocab)
    packed, targets = bio.packed_split(bundle, "cpt_train")
    assert "cpt_train" not in bundle.eval and len(ex.objects) == len(targets.chunk)
    assert len(ex.objects) + targets.num_dropped == 5 * len(bundle.splits["cpt_train"])
    assert set(ex.pid.tolist()) <= {p.pid for p in bundle.world.people if not p.is_original}


def test_token_slots(bundle):
    slots = bio.token_slots(bundle)
    tok = bundle.tokenizer
    person = bundle.world.people[0]
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    last = ids(" " + person.fullname.split()[-1])[0]
    assert bio.SLOTS[slots[last]] == "name"
    assert bio.SLOTS[slots[ids(" majored")[0]]] == "relation"  # only the major templates use it
    assert bio.SLOTS[slots[ids(".")[0]]] == "template"
    year = ids(" " + person.values[1])[-1]  # the birthdate's year occurs only inside values
    assert bio.SLOTS[slots[year]] == "object"
    assert bio.SLOTS[slots[bundle.eos_id]] == "other"
    assert np.count_nonzero(slots == bio.SLOTS.index("object")) > 20


def test_unknown_object_kind(bundle):
    with pytest.raises(ValueError, match="objects"):
        bio.object_vocabulary(bundle, "word")
