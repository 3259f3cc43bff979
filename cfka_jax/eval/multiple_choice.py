"""MMLU-style multiple-choice accuracy of a causal LM on local files (the "Original" vs "Domain" split, spec §1).

Questions come from ``data/mmlu.py`` (MMLU CSV, JSONL or Parquet files). Prompt (the MMLU form; lm-eval-harness spacing, i.e. one space before the subject)::

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

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.data.mmlu import LETTERS, MCQuestion
from cfka_jax.eval.batches import right_pad, row_blocks
from cfka_jax.shapes import Array, Float, Int
from cfka_jax.train.step import cast_floating

HEADER = "The following are multiple choice questions (with answers) about {}.\n\n"


@dataclasses.dataclass(frozen=True)
class MCConfig:
    """Evaluation settings: k shots from a dev set, batch size, the longest prompt in tokens."""

    shots: int = 0
    batch_size: int = 8
    max_length: int = 2048

    def __post_init__(self):
        if self.shots < 0 or self.batch_size < 1 or self.max_length < 8:
            raise ValueError(f"need shots >= 0, batch_size >= 1, max_length >= 8, got {self}")


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
            params = cast_floating(params, compute_dtype)
        return last_logits(graphdef, params, rest, tokens_BS, mask_BS, last_B)[:, ids_C]

    return jax.jit(score)


def _bucket(n: int, cap: int) -> int:
    return min(max(8, 1 << (n - 1).bit_length()), max(cap, n))


def choice_logits(score, params, enc: EncodedMC, *, batch_size: int, pad_id: int, max_length: int) -> np.ndarray:
    """Letter logits (n, C) of every prompt: longest first, fixed-size right-padded blocks (``eval/batches.py``)
    and power-of-two lengths, so few shapes compile."""
    lengths = np.array([len(t) for t in enc.tokens])
    out = [None] * len(lengths)
    for block in row_blocks(len(lengths), batch_size, order=np.argsort(-lengths, kind="stable")):
        width = _bucket(int(lengths[block.rows].max()), max_length)
        tokens, lens = right_pad(enc.tokens, block.rows, width=width, pad_id=pad_id)
        mask = (np.arange(width)[None, :] < lens[:, None]).astype(np.int32)
        logits = np.asarray(score(params, jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(lens - 1)))
        for r in np.flatnonzero(block.valid):
            out[block.rows[r]] = logits[r]
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
