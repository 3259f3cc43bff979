"""MMLU-format multiple-choice question files (nothing is downloaded).

* the original MMLU CSV layout: no header, one question per row ``question, A, B, C, D, answer letter`` (any number
  of choices from 2 to 10 is accepted); the subject is the file name ``<subject>_test.csv`` (``_dev``/``_val``
  suffixes are stripped as well);
* JSONL or Parquet records ``{question: str, choices: [str, ...], answer: int | letter, subject: str}`` (the layout
  of the HF ``cais/mmlu`` Parquet files); ``subject`` defaults to the file-name rule.

Errors name the file and the 1-based row/line (0-based row for Parquet). ``split_by_subjects`` gives the paper's
"Original" (general subjects) vs "Domain" split; ``question_sets`` assembles the named sets of a run.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Sequence

import numpy as np

from cfka_jax import jsonio
from cfka_jax.data.io import iter_jsonl

LETTERS = "ABCDEFGHIJ"
_SPLIT_SUFFIX = re.compile(r"_(test|dev|val|validation|train)$")


@dataclasses.dataclass(frozen=True)
class MCQuestion:
    """One question: its text, 2–10 choices, the index of the right one and its subject."""

    question: str
    choices: tuple[str, ...]
    answer: int
    subject: str

    def __post_init__(self):
        if not 2 <= len(self.choices) <= len(LETTERS):
            raise ValueError(f"need 2 to {len(LETTERS)} choices, got {len(self.choices)}")
        if not 0 <= self.answer < len(self.choices):
            raise ValueError(f"answer index {self.answer} out of range for {len(self.choices)} choices")


def subject_from_path(path) -> str:
    """``abstract_algebra_test.csv`` → ``abstract_algebra``."""
    return _SPLIT_SUFFIX.sub("", pathlib.Path(path).stem)


def _answer_index(value, n: int, where: str) -> int:
    if isinstance(value, str) and len(value.strip()) == 1 and value.strip().upper() in LETTERS[:n]:
        return LETTERS.index(value.strip().upper())
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < n:
        return int(value)
    raise ValueError(f"{where}: answer {value!r} is neither a letter in {LETTERS[:n]} nor an index in [0, {n})")


def read_mc_csv(path) -> list[MCQuestion]:
    """Questions of an MMLU CSV (no header; question, choices…, answer letter).

    Raises:
      ValueError: naming the file and 1-based row for a short row, an empty question or a bad answer.
    """
    subject, out = subject_from_path(path), []
    for row_no, (where, row) in enumerate(jsonio.read_csv_rows(path), start=1):
        if not row:
            continue
        line = where.rsplit(" ", 1)[1]
        where = f"{path}, row {row_no}" + ("" if line == str(row_no) else f" (line {line})")
        if len(row) < 4:
            raise ValueError(f"{where}: expected question, >= 2 choices and an answer letter, got {len(row)} "
                             f"columns")
        if not row[0].strip():
            raise ValueError(f"{where}: empty question")
        hint = " (MMLU CSVs have no header row)" if row_no == 1 else ""
        try:
            answer = _answer_index(row[-1], len(row) - 2, where)
        except ValueError as err:
            raise ValueError(f"{err}{hint}") from None
        out.append(MCQuestion(row[0], tuple(row[1:-1]), answer, subject))
    return out


def _from_record(record, where: str, default_subject: str) -> MCQuestion:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected an object, got {type(record).__name__}")
    for key in ("question", "choices", "answer"):
        if key not in record:
            raise ValueError(f"{where}: missing field {key!r} (keys: {sorted(record)})")
    question, choices, subject = record["question"], record["choices"], record.get("subject") or default_subject
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: field 'question' must be a non-empty string")
    if not isinstance(subject, str):
        raise ValueError(f"{where}: field 'subject' must be a string, got {type(subject).__name__}")
    if not isinstance(choices, (list, tuple, np.ndarray)) or not all(isinstance(c, str) for c in choices):
        raise ValueError(f"{where}: field 'choices' must be a list of strings")
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"{where}: need 2 to {len(LETTERS)} choices, got {len(choices)}")
    return MCQuestion(question, tuple(choices), _answer_index(record["answer"], len(choices), where), subject)


def read_mc_records(path) -> list[MCQuestion]:
    """Questions of a JSONL (1-based line numbers in errors) or Parquet (0-based rows) file.

    Raises:
      ValueError: invalid JSON, a missing field, a wrongly typed field or a bad answer, naming file and line/row.
    """
    path = pathlib.Path(path)
    default = subject_from_path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
        return [_from_record(r, f"{path}, row {i}", default) for i, r in enumerate(rows)]
    return [_from_record(record, where, default) for where, record in iter_jsonl(path)]


def read_mc(paths) -> list[MCQuestion]:
    """Questions of ``.csv``/``.jsonl``/``.parquet`` files or folders of them (sorted), in order.

    Raises:
      ValueError: a missing path, an unknown extension, a folder without question files, or no question at all.
    """
    items = [paths] if isinstance(paths, (str, pathlib.Path)) else list(paths)
    files = []
    for item in map(pathlib.Path, items):
        if item.is_dir():
            found = sorted(p for p in item.rglob("*") if p.suffix in (".csv", ".jsonl", ".parquet"))
            if not found:
                raise ValueError(f"{item}: folder holds no .csv/.jsonl/.parquet question file")
            files.extend(found)
        elif not item.is_file():
            raise ValueError(f"{item}: no such file or folder")
        elif item.suffix not in (".csv", ".jsonl", ".parquet"):
            raise ValueError(f"{item}: unknown question file extension {item.suffix!r} (.csv, .jsonl, .parquet)")
        else:
            files.append(item)
    out = [q for f in files for q in (read_mc_csv(f) if f.suffix == ".csv" else read_mc_records(f))]
    if not out:
        raise ValueError(f"no questions in {[str(f) for f in files]}")
    return out


def split_by_subjects(questions: Sequence[MCQuestion], domain_subjects: Sequence[str], *,
                      names: tuple[str, str] = ("Original", "Domain")) -> dict[str, list[MCQuestion]]:
    """{names[0]: questions of other subjects, names[1]: questions of ``domain_subjects``}.

    Raises:
      ValueError: a domain subject that no question has (a typo would otherwise give an empty set).
    """
    present = {q.subject for q in questions}
    missing = sorted(set(domain_subjects) - present)
    if missing:
        raise ValueError(f"domain subjects {missing} match no question (subjects: {sorted(present)})")
    domain = set(domain_subjects)
    return {names[0]: [q for q in questions if q.subject not in domain],
            names[1]: [q for q in questions if q.subject in domain]}


def question_sets(*, mc: Sequence[str] = (), domain_subjects: Sequence[str] = (), original: Sequence[str] = (),
                  domain: Sequence[str] = (), limit: int | None = None, seed: int = 0) -> dict[str, list[MCQuestion]]:
    """The named question sets of a run: ``mc`` files split into Original/Domain by ``domain_subjects`` (or one
    set ``MC`` without them), or the ``original`` and ``domain`` files as given; at most ``limit`` seeded
    questions per set; sets left empty by the subject split are dropped.

    Raises:
      ValueError: both forms given, or a file error (named).
    """
    if mc and (original or domain):
        raise ValueError("give either mc files (split by domain subjects) or original/domain files, not both")
    if mc:
        qs = read_mc(list(mc))
        sets = split_by_subjects(qs, domain_subjects) if domain_subjects else {"MC": qs}
    else:
        sets = {name: read_mc(list(files)) for name, files in (("Original", original), ("Domain", domain)) if files}
    sets = {k: v for k, v in sets.items() if v}
    if limit is not None:
        rng = np.random.default_rng([seed, 4])
        sets = {k: [v[i] for i in sorted(rng.choice(len(v), min(limit, len(v)), replace=False))]
                for k, v in sets.items()}
    return sets

