"""experiments/di_slots: the slot comparison of two di-attention panels over the types both count."""

import numpy as np
import pytest

from cfka_jax.experiments import di_slots


def _panel(tmp_path, name, z_ELM, slots, eligible, n_s, di):
    d = tmp_path / name
    d.mkdir()
    np.savez(d / "attention.npz", z_ELM=z_ELM, slots=slots, eligible=eligible, n_s=n_s, di_centred_cooccur=di)
    return d


def test_compare_uses_types_eligible_in_both_with_the_same_slot(tmp_path, capsys):
    # 6 types: slots name, name, relation, relation, template, object
    slots = np.array([0, 0, 1, 1, 2, 3])
    z_a = np.arange(2 * 3 * 6, dtype=float).reshape(2, 3, 6)
    z_b = z_a + 100.0
    a = _panel(tmp_path, "A", z_a, slots, np.array([1, 1, 1, 0, 1, 1], bool), np.arange(6.0), np.ones(6))
    # type 1 changes slot in B (dropped), type 3 is not eligible in A (dropped), type 5 not eligible in B
    slots_b = slots.copy()
    slots_b[1] = 2
    b = _panel(tmp_path, "B", z_b, slots_b, np.array([1, 1, 1, 1, 1, 0], bool), np.arange(6.0) * 2, np.zeros(6))
    rows = {r["slot"]: r for r in di_slots.compare(di_slots.load(a, "centred_cooccur"),
                                                   di_slots.load(b, "centred_cooccur"), "centred_cooccur")}
    assert [rows[s]["types"] for s in ("name", "relation", "template", "object")] == [1, 1, 1, 0]
    # name: type 0 only; seed means of z_a[:, :, 0] over layers: seed 0 -> (0+6+12)/3 = 6, seed 1 -> 24
    assert rows["name"]["a"]["attention"] == pytest.approx(15.0)
    assert (rows["name"]["a"]["min"], rows["name"]["a"]["max"]) == (6.0, 24.0)
    assert rows["name"]["b"]["attention"] == pytest.approx(115.0)
    assert rows["name"]["a"]["per_layer"] == pytest.approx([9.0, 15.0, 21.0])
    assert rows["relation"]["b"]["contexts"] == 4.0 and rows["relation"]["a"]["di"] == 1.0
    assert "b" not in rows["object"]
    assert di_slots.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "| object | 0 |" in out and "| name | 1 |" in out


def test_missing_array_is_one_line_error_naming_the_file(tmp_path, capsys):
    d = tmp_path / "A"
    d.mkdir()
    np.savez(d / "attention.npz", z_ELM=np.zeros((1, 1, 2)))
    assert di_slots.main([str(d), str(d)]) == 2
    err = capsys.readouterr().err
    assert "attention.npz" in err and err.count("\n") == 1


def test_flags_parse_in_any_order_and_a_bad_convention_is_refused(tmp_path, capsys):
    assert di_slots.FLAGS.parse(["--di", "centred_all", "x", "y"]) == di_slots.Config("x", "y", "centred_all")
    assert di_slots.FLAGS.parse(["x", "y", "--di", "centred_all"]) == di_slots.Config("x", "y", "centred_all")
    with pytest.raises(SystemExit) as err:
        di_slots.main(["x", "y", "--di", "centred"])
    assert err.value.code == 2 and "--di" in capsys.readouterr().err
