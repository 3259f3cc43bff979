"""MMLU-style multiple-choice accuracy of a causal LM on local files (the "Original" vs "Domain" split, spec §1).

Inputs (nothing is downloaded):

* the original MMLU CSV layout: no header, one question per row ``question, A, B, C, D, answer letter`` (any number
  of choices from 2 to 10 is accepted); the subject is the file name ``<subject>_test.csv`` (``_dev``/``_val``
  suffixes are stripped as well);
* JSONL or Parquet records ``{question: str, choices: [str, ...], answer: int | letter, subject: str}`` (the layout
  of the HF ``cais/mmlu`` Parquet files); ``subject`` defaults to the file-name rule.

Prompt (the MMLU form; lm-eval-harness spacing, i.e. one space before the subject)::

    The following are multiple choice questions (with answers) about {subject with _ → space}.\\n\\n
    [k shots, each "{question}\\nA. {choice}\\n…\\nAnswer: {letter}\\n\\n"]
    {question}\\nA. {choice A}\\nB. {choice B}\\n…\\nAnswer:

Shots are the first k questions of the same subject in a dev file. A prompt longer than ``max_length`` tokens
drops shots (last first) until it fits, then keeps only its last ``max_length`` tokens (counted in ``truncated``).

Prediction: ``argmax_c logits[last, id(letter_c)]`` over the question's letters, where ``id(" A")`` is the last
token of ``tokenizer(" A")`` (the letters must map to distinct ids), and ``last`` is the prompt's final position.
Prompts are batched right-padded with an attention mask (positions 0 … S−1, so real tokens see the positions of
an unpadded forward) in power-of-two length buckets, and the scoring is one jitted pure function of the
parameters (split/merge, ``train/step.py``). Accuracy is the mean over questions (MMLU's "weighted" average),
overall (``All``), per named set and per subject.
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib
import re
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.data.io import iter_jsonl
from cfka_jax.shapes import Array, Float, Int

LETTERS = "ABCDEFGHIJ"
HEADER = "The following are multiple choice questions (with answers) about {}.\n\n"
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


@dataclasses.dataclass(frozen=True)
class MCConfig:
    """Evaluation settings: k shots from a dev set, batch size, the longest prompt in tokens."""

    shots: int = 0
    batch_size: int = 8
    max_length: int = 2048

    def __post_init__(self):
        if self.shots < 0 or self.batch_size < 1 or self.max_length < 8:
            raise ValueError(f"need shots >= 0, batch_size >= 1, max_length >= 8, got {self}")


# ------------------------------------------------------------------------------------------------------ reading


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
    with open(path, newline="", encoding="utf-8") as f:
        for row_no, row in enumerate(csv.reader(f), start=1):
            if not row:
                continue
            where = f"{path}, row {row_no}"
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


# ------------------------------------------------------------------------------------------------------ prompts


def format_question(q: MCQuestion, *, with_answer: bool) -> str:
    """``{question}\\nA. {choice}…\\nAnswer:`` (+ `` {letter}\\n\\n`` for a shot)."""
    text = q.question + "".join(f"\n{LETTERS[i]}. {c}" for i, c in enumerate(q.choices)) + "\nAnswer:"
    return text + f" {LETTERS[q.answer]}\n\n" if with_answer else text


def build_prompt(q: MCQuestion, shots: Sequence[MCQuestion] = ()) -> str:
    """The MMLU prompt of ``q`` after the subject header and the worked ``shots``."""
    header = HEADER.format(q.subject.replace("_", " "))
    return header + "".join(format_question(s, with_answer=True) for s in shots) + format_question(q, with_answer=False)


def letter_token_ids(tokenizer, num_letters: int = 4) -> np.ndarray:
    """int32 ids of " A", " B", …: the last token of ``tokenizer(" " + letter)``.

    Raises:
      ValueError: two letters share an id (e.g. both unknown to a word-level vocabulary) or a letter has no token.
    """
    ids = []
    for letter in LETTERS[:num_letters]:
        enc = tokenizer(" " + letter, add_special_tokens=False)["input_ids"]
        if not enc:
            raise ValueError(f"the tokenizer encodes {' ' + letter!r} as no token")
        ids.append(int(enc[-1]))
    if len(set(ids)) != len(ids):
        raise ValueError(f"answer letters {list(LETTERS[:num_letters])} do not map to distinct token ids: {ids}")
    return np.asarray(ids, np.int32)


@dataclasses.dataclass(frozen=True)
class EncodedMC:
    """Tokenised prompts of one question set.

    Attributes:
      tokens: one int32 array per prompt (length ≤ ``max_length``).
      answers, num_choices, shots: int32 per question (shots actually used).
      subjects: the subject per question.
      truncated: prompts cut on the left because even zero shots did not fit.
    """

    tokens: tuple[np.ndarray, ...]
    answers: np.ndarray
    num_choices: np.ndarray
    shots: np.ndarray
    subjects: tuple[str, ...]
    truncated: int


def encode_questions(questions: Sequence[MCQuestion], tokenizer, cfg: MCConfig = MCConfig(),
                     dev: Sequence[MCQuestion] = ()) -> EncodedMC:
    """Prompts (``build_prompt`` with up to ``cfg.shots`` same-subject dev questions) → token ids.

    Raises:
      ValueError: no questions.
    """
    if not questions:
        raise ValueError("no questions to encode")
    by_subject: dict[str, list[MCQuestion]] = {}
    for d in dev:
        by_subject.setdefault(d.subject, []).append(d)
    tokens, used, truncated = [], [], 0
    for q in questions:
        shots = by_subject.get(q.subject, [])[:cfg.shots]
        k = len(shots)
        ids = tokenizer(build_prompt(q, shots[:k]), add_special_tokens=True)["input_ids"]
        while len(ids) > cfg.max_length and k > 0:
            k -= 1
            ids = tokenizer(build_prompt(q, shots[:k]), add_special_tokens=True)["input_ids"]
        if len(ids) > cfg.max_length:
            ids, truncated = ids[-cfg.max_length:], truncated + 1
        tokens.append(np.asarray(ids, np.int32))
        used.append(k)
    answers = np.asarray([q.answer for q in questions], np.int32)
    num_choices = np.asarray([len(q.choices) for q in questions], np.int32)
    return EncodedMC(tuple(tokens), answers, num_choices, np.asarray(used, np.int32),
                     tuple(q.subject for q in questions), truncated)


# ------------------------------------------------------------------------------------------------------ scoring


def _at(x_BS_, last_B: Int[Array, " B"]):
    """Row b of ``x`` at position ``last[b]`` (``B S ...`` → ``B ...``)."""
    return jnp.take_along_axis(x_BS_, last_B.reshape((-1,) + (1,) * (x_BS_.ndim - 1)), axis=1)[:, 0]


def last_logits(graphdef, params, rest, tokens_BS: Int[Array, "B S"], mask_BS: Int[Array, "B S"],
                last_B: Int[Array, " B"]) -> Float[Array, "B V"]:
    """Next-token logits at each row's position ``last[b]`` of the merged model (pure in ``params``).

    The model is called as ``model(tokens, attention_mask_BT=mask, positions_BS=None)``. For the model ports
    (``DecoderLM``: ``final_hidden`` and ``_head``) the LM head is applied to the B selected hidden states only, so
    the B × S × V logits are never formed (XLA drops the unused full head); any other model's ``.logits`` are
    indexed directly.
    """
    model = nnx.merge(graphdef, params, rest)
    out = model(tokens_BS, attention_mask_BT=mask_BS, positions_BS=None)
    head, hidden_BSD = getattr(model, "_head", None), getattr(out, "final_hidden", None)
    if head is None or hidden_BSD is None:
        return _at(out.logits, last_B)
    return head(_at(hidden_BSD, last_B)[:, None, :])[:, 0].astype(jnp.float32)


def make_choice_scorer(graphdef, rest, letter_ids: np.ndarray, compute_dtype=None):
    """Jitted ``score(params, tokens_BS, mask_BS, last_B) -> letter logits B C``: ``last_logits`` at the ids of
    " A", " B", … (split/merge as in ``train/step.make_eval_logits``; no closure over a stateful model).
    Floating parameters are cast to ``compute_dtype`` first when given (mixed precision, as in training)."""
    ids_C = jnp.asarray(letter_ids, jnp.int32)

    def score(params, tokens_BS: Int[Array, "B S"], mask_BS: Int[Array, "B S"],
              last_B: Int[Array, " B"]) -> Float[Array, "B C"]:
        if compute_dtype is not None:
            params = jax.tree.map(lambda p: p.astype(compute_dtype) if jnp.issubdtype(p.dtype, jnp.floating)
                                  else p, params)
        return last_logits(graphdef, params, rest, tokens_BS, mask_BS, last_B)[:, ids_C]

    return jax.jit(score)


def _bucket(n: int, cap: int) -> int:
    return min(max(8, 1 << (n - 1).bit_length()), max(cap, n))


def choice_logits(score, params, enc: EncodedMC, *, batch_size: int, pad_id: int, max_length: int) -> np.ndarray:
    """Letter logits (n, C) of every prompt: longest first, right-padded batches, a fixed batch size (the last batch
    is filled with copies of its first row) and power-of-two lengths, so few shapes compile."""
    lengths = np.array([len(t) for t in enc.tokens])
    order = np.argsort(-lengths, kind="stable")
    out = [None] * len(order)
    for lo in range(0, len(order), batch_size):
        rows = list(order[lo:lo + batch_size])
        rows += [rows[0]] * (batch_size - len(rows))
        width = _bucket(int(lengths[rows].max()), max_length)
        tokens = np.full((batch_size, width), pad_id, np.int32)
        mask = np.zeros((batch_size, width), np.int32)
        for r, i in enumerate(rows):
            tokens[r, :lengths[i]], mask[r, :lengths[i]] = enc.tokens[i], 1
        logits = np.asarray(score(params, jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(lengths[rows] - 1)))
        for r, i in enumerate(rows[:min(batch_size, len(order) - lo)]):
            out[i] = logits[r]
    return np.stack(out)


def predictions(logits_nC: np.ndarray, num_choices: np.ndarray) -> np.ndarray:
    """argmax over each question's own letters (letters past its number of choices are excluded)."""
    valid = np.arange(logits_nC.shape[1])[None, :] < num_choices[:, None]
    return np.where(valid, logits_nC, -np.inf).argmax(axis=1).astype(np.int32)


def accuracy_report(name: str, preds: np.ndarray, answers: np.ndarray, subjects: Sequence[str]) -> dict:
    """``{name}/acc`` (mean over questions), ``{name}/n`` and ``{name}/acc/{subject}`` for every subject."""
    correct = np.asarray(preds) == np.asarray(answers)
    subjects = np.asarray(subjects, dtype=object)
    out = {f"{name}/acc": float(correct.mean()), f"{name}/n": int(correct.size)}
    for s in sorted(set(subjects.tolist())):
        out[f"{name}/acc/{s}"] = float(correct[subjects == s].mean())
    return out


def evaluate_sets(score, params, encoded: Mapping[str, EncodedMC], cfg: MCConfig, pad_id: int) -> dict:
    """Accuracy reports of every named set plus ``All`` (every question of every set, each counted once per set)."""
    out, preds_all, answers_all = {}, [], []
    for name, enc in encoded.items():
        logits = choice_logits(score, params, enc, batch_size=cfg.batch_size, pad_id=pad_id,
                               max_length=cfg.max_length)
        preds = predictions(logits, enc.num_choices)
        out.update(accuracy_report(name, preds, enc.answers, enc.subjects))
        preds_all.append(preds)
        answers_all.append(enc.answers)
    correct = np.concatenate(preds_all) == np.concatenate(answers_all)
    return out | {"All/acc": float(correct.mean()), "All/n": int(correct.size)}


def mc_evaluator(graphdef, rest, sets: Mapping[str, Sequence[MCQuestion]], tokenizer, cfg: MCConfig = MCConfig(),
                 *, dev: Sequence[MCQuestion] = (), compute_dtype=None):
    """``evaluate(params, step) -> dict`` of MC accuracies on the named ``sets`` (prompts encoded once).

    Raises:
      ValueError: an empty set, or letters without distinct token ids (``letter_token_ids``).
    """
    for name, qs in sets.items():
        if not qs:
            raise ValueError(f"multiple-choice set {name!r} is empty")
    num_letters = max(len(q.choices) for qs in sets.values() for q in qs)
    score = make_choice_scorer(graphdef, rest, letter_token_ids(tokenizer, num_letters), compute_dtype)
    encoded = {name: encode_questions(qs, tokenizer, cfg, dev) for name, qs in sets.items()}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def evaluate(params, step):
        del step
        return evaluate_sets(score, params, encoded, cfg, pad_id)

    return evaluate
