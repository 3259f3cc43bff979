"""Object masks (character span and the reference's token match), BOS, padded batches."""

import numpy as np
import pytest

from cfka_jax.data.ckl_encode import encode, pad_batch
from cfka_jax.data.tokenize import train_word_tokenizer

TEXTS = ["Ann B. Cole works for Apex Dynamics .", "Apex moved to Apex Dynamics from Apex (Apex Dynamics)",
         "Bob lives in New York, NY ."]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return train_word_tokenizer(TEXTS, tmp_path_factory.mktemp("tok"))


def _tokens(tok, enc, i):
    return [t for t, m in zip(tok.convert_ids_to_tokens(enc.ids[i].tolist()), enc.object_mask[i]) if m]


def test_char_span_mask_marks_the_last_occurrence(tok):
    enc = encode(tok, TEXTS, ["Apex Dynamics", "Apex Dynamics", "New York, NY"])
    assert enc.ids[0][0] == tok.eos_token_id and enc.empty == 0
    assert _tokens(tok, enc, 0) == [" Apex", " Dynamics"]
    assert _tokens(tok, enc, 1) == ["Apex", " Dynamics"]  # inside "(...)", the last occurrence
    assert enc.object_mask[1][-3:].tolist() == [1.0, 1.0, 0.0]  # ... followed by ")"
    assert _tokens(tok, enc, 2) == [" New", " York", ",", " NY"]


def test_reference_mode_needs_a_leading_space_match(tok):
    enc = encode(tok, TEXTS[:2], ["Apex Dynamics", "Apex Dynamics"], object_mode="reference")
    assert _tokens(tok, enc, 0) == [" Apex", " Dynamics"]
    # "(Apex Dynamics)": "Apex" has no leading space there, so the last " Apex Dynamics" match is the earlier one
    assert enc.object_mask[1].sum() == 2 and enc.empty == 0
    missing = encode(tok, ["Bob lives in New York, NY ."], ["Apex"], object_mode="reference")
    assert missing.empty == 1 and missing.object_mask[0].sum() == 0


def test_no_bos_and_truncation(tok):
    enc = encode(tok, TEXTS[:1], ["Apex Dynamics"], bos=False, max_length=4)
    assert len(enc.ids[0]) == 4 and enc.ids[0][0] != tok.eos_token_id and enc.empty == 1
    with pytest.raises(ValueError, match="object_mode"):
        encode(tok, TEXTS, None, object_mode="exact")


def test_pad_batch_masks(tok):
    enc = encode(tok, TEXTS, ["Apex Dynamics", "Apex Dynamics", "NY"])
    b = pad_batch(enc, [2, 0], length=14)
    n2, n0 = len(enc.ids[2]), len(enc.ids[0])
    assert b["tokens"].shape == (2, 14) and b["attention_mask"][0].sum() == n2
    np.testing.assert_array_equal(b["target_mask"][0], [0] + [1] * (n2 - 1) + [0] * (14 - n2))
    ref = pad_batch(enc, [0], length=14, reference_mask=True)
    assert ref["target_mask"][0].sum() == n0  # one pad target kept (quirk #7)
    np.testing.assert_array_equal(b["positions"][1], np.arange(14))
    with pytest.raises(ValueError, match="more than the batch length"):
        pad_batch(enc, [1], length=3)
