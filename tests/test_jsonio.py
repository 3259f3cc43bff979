"""cfka_jax/jsonio.py: strict UTF-8/JSON/JSONL reading and the no-conversion field type check."""

import pytest

from cfka_jax import jsonio


@pytest.mark.parametrize("text, lone", [
    (r'"ok \ud83d\ude00"', None),  # a surrogate pair is one character
    (r'"\\ud800"', None),  # an escaped backslash followed by "ud800" is plain text
    (r'"\\\ud800"', r"\ud800"),  # an escaped backslash, then a real escape
    (r'"\udc00 low first"', r"\udc00"),
    (r'"high at the end \ud83d"', r"\ud83d"),
    (r'"two highs \ud83d\ud83d\ude00"', r"\ud83d"),
    (r'{"\ud800": 1}', r"\ud800"),  # keys too
])
def test_lone_surrogates_are_found_exactly(text, lone):
    if lone is None:
        jsonio.parse_json(text, "f.json")
    else:
        with pytest.raises(ValueError, match=rf"f\.json, line 1: lone UTF-16 surrogate \{lone}"):
            jsonio.parse_json(text, "f.json")


def test_jsonl_lines_blank_lines_and_crlf(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\r\n\r\n  \n{"b": "\xc3\xa9"}\n')
    assert list(jsonio.iter_jsonl(path)) == [(f"{path}, line 1", {"a": 1}), (f"{path}, line 4", {"b": "é"})]
    path.write_bytes(b'{"a": 1}\n{"a": \n')
    with pytest.raises(ValueError, match=r"a\.jsonl, line 2: invalid JSON: Expecting value \(column 7\)"):
        list(jsonio.iter_jsonl(path))


def test_invalid_utf8_names_line_and_column(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"one\ntwo\nth\xffree\n")
    with pytest.raises(ValueError, match=r"a\.txt, line 3: invalid UTF-8 \(byte 0xff at byte column 3"):
        jsonio.read_text(path)


@pytest.mark.parametrize("value, hint, ok", [
    (3, int, True), (True, int, False), (3.0, int, False), ("3", int, False),
    (3, float, True), (0.5, float, True), (True, float, False), (float("nan"), float, False),
    (float("inf"), float, False), ("0.5", float, False),
    (False, bool, True), ("false", bool, False), (0, bool, False),
    (None, int | None, True), ([1, 2], int | list[int] | None, True), ([1, True], int | list[int] | None, False),
    ([0.5, 1], tuple[float, ...], True), ("0.5", tuple[float, ...], False), ([[1]], list[int], False),
])
def test_type_problem_converts_nothing(value, hint, ok):
    assert (jsonio.type_problem(value, hint) is None) == ok
