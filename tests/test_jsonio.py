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


def test_atomic_writes_leave_no_temporary_file_and_the_usual_mode(tmp_path):
    import os
    import stat

    from cfka_jax import jsonio

    path = tmp_path / "sub" / "r.json"
    jsonio.write_json_atomic(path, {"a": [1, 2]}, indent=1)
    jsonio.write_text_atomic(tmp_path / "t.md", "x\n")
    assert jsonio.read_json_object(path) == {"a": [1, 2]} and (tmp_path / "t.md").read_text() == "x\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["r.json", "sub", "t.md"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    with pytest.raises(ValueError, match=r"r\.json: refusing to write a non-finite number"):
        jsonio.write_json_atomic(path, {"a": float("nan")}, allow_nan=False)
    assert jsonio.read_json_object(path) == {"a": [1, 2]}


def test_csv_and_toml_errors_name_file_and_line(tmp_path):
    from cfka_jax import jsonio

    (tmp_path / "a.toml").write_text("a = 1\nb = [1,\nc =\n")
    with pytest.raises(ValueError, match=r"a\.toml, line 3: invalid TOML: .*\(column \d+\)$"):
        jsonio.read_toml(tmp_path / "a.toml")
    (tmp_path / "b.csv").write_text('h,i\n"multi\nline",z\nq,r\n')
    assert [w.rsplit(" ", 1)[1] for w, _ in jsonio.read_csv_rows(tmp_path / "b.csv")] == ["1", "2", "4"]
    (tmp_path / "c.csv").write_bytes(b"h,i\nok,\xff\n")
    with pytest.raises(ValueError, match=r"c\.csv, line 2: invalid UTF-8"):
        list(jsonio.read_csv_rows(tmp_path / "c.csv"))


class _Crash(RuntimeError):
    pass


def test_a_crash_mid_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    import json as json_module

    import numpy as np

    path = tmp_path / "r.json"
    jsonio.write_json_atomic(path, {"old": 1}, indent=1)
    before = path.read_bytes()
    real_fsync = jsonio.os.fsync

    def crash(fd):  # the data is in the temporary file, the rename has not happened
        raise _Crash("killed")

    monkeypatch.setattr(jsonio.os, "fsync", crash)
    with pytest.raises(_Crash):
        jsonio.write_json_atomic(path, {"new": 2}, indent=1)
    with pytest.raises(_Crash):
        jsonio.write_jsonl_atomic(path, [{"new": 2}])
    with pytest.raises(_Crash):
        jsonio.write_npz_atomic(path, {"a": np.zeros(3)})
    monkeypatch.setattr(jsonio.os, "fsync", real_fsync)
    assert path.read_bytes() == before and json_module.loads(before) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_written_files_read_back_byte_for_byte(tmp_path):
    import json as json_module

    import numpy as np

    obj = {"b": [1.5, float("nan")], "a": "é"}
    jsonio.write_json_atomic(tmp_path / "s.json", obj, indent=1, sort_keys=True)
    assert (tmp_path / "s.json").read_text(encoding="utf-8") == json_module.dumps(obj, indent=1, sort_keys=True) + "\n"
    jsonio.write_json_atomic(tmp_path / "n.json", [1], newline=False)
    assert (tmp_path / "n.json").read_bytes() == b"[1]"
    rows = [{"step": 1, "loss": 0.5}, {"step": 2, "text": "ü"}]
    jsonio.write_jsonl_atomic(tmp_path / "a.jsonl", rows, ensure_ascii=False)
    assert [r for _, r in jsonio.iter_jsonl(tmp_path / "a.jsonl")] == rows
    assert (tmp_path / "a.jsonl").read_text(encoding="utf-8") == '{"step": 1, "loss": 0.5}\n{"step": 2, "text": "ü"}\n'
    jsonio.append_jsonl(tmp_path / "a.jsonl", {"step": 3})
    jsonio.append_jsonl(tmp_path / "new" / "b.jsonl", {"step": 0})
    assert [r["step"] for _, r in jsonio.iter_jsonl(tmp_path / "a.jsonl")] == [1, 2, 3]
    assert (tmp_path / "new" / "b.jsonl").read_text() == '{"step": 0}\n'
    arrays = {"x_N": np.arange(4, dtype=np.int32), "y_NM": np.ones((2, 3), np.float32)}
    for compressed in (False, True):
        jsonio.write_npz_atomic(tmp_path / "z.npz", arrays, compressed=compressed)
        back = jsonio.read_npz(tmp_path / "z.npz", keys=arrays)
        assert all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in arrays.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "n.json", "new", "s.json", "z.npz"]


def test_a_record_that_cannot_be_written_changes_nothing(tmp_path):
    path = tmp_path / "log.jsonl"
    jsonio.append_jsonl(path, {"step": 1})
    with pytest.raises(TypeError):
        jsonio.append_jsonl(path, {"step": object()})
    with pytest.raises(ValueError, match=r"log\.jsonl: refusing to write a non-finite number"):
        jsonio.append_jsonl(path, {"step": float("inf")}, allow_nan=False)
    assert path.read_text() == '{"step": 1}\n'


def test_portable_json_nulls_nan_and_names_infinities():
    import numpy as np

    obj = {1: (np.float32(0.5), np.int64(3), float("nan"), float("inf"), -np.inf), "s": [np.float64("nan")]}
    assert jsonio.portable_json(obj) == {"1": [0.5, 3, None, "inf", "-inf"], "s": [None]}
    assert type(jsonio.portable_json(np.int64(3))) is int


def test_portable_json_files_are_strict_json(tmp_path):
    import numpy as np

    path = tmp_path / "g.json"
    jsonio.write_json_atomic(path, {"r": np.float32(float("nan")), "e": [1.0, float("-inf")]}, portable=True, indent=1)
    assert path.read_text() == '{\n "r": null,\n "e": [\n  1.0,\n  "-inf"\n ]\n}\n'
    assert jsonio.read_json(path) == {"r": None, "e": [1.0, "-inf"]}
