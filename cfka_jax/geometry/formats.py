"""A two-task world for collision vs erosion and format isolation (spec §6), and the old task's behaviour metrics.

**Old task (multiple choice, learned first).** Entity e of subject k has a fixed correct value ``f(e)`` (a content
token) and a fixed answer letter ``ℓ(e)``; its question lists four distinct content tokens as choices A–D with
``f(e)`` at ``ℓ(e)``. One item, in the canonical format (question marker Q, answer marker ANS):

    [BOS, Q, subj_k, e, A, c_A, B, c_B, C, c_C, D, c_D, ANS, ℓ(e), EOS]                       (15 tokens)

**New task (long form).** A question with ``input_len`` content tokens x and a long answer ``y_i = π(x_{σ(i)})``
(``answer_len`` tokens, σ cycling over the inputs), in the *same* markers:

    [BOS, Q, subj_k, e′, x_1 … x_n, ANS, y_1 … y_m, EOS]

With ``input_len = 8`` the new task's ANS sits at position 12, as the old task's does, so the two tasks cannot be
told apart by position. The **format-isolated** variant renders the same items with other markers (P for Q, R for
ANS, spec §6.6).
Subjects of the new task are drawn with unequal weights ``subject_weights`` (subject 0 most often), so the
subjects differ in how much the new task's prompts resemble theirs — the variation across subjects that the
pre-finetuning prediction of §6.5 is scored against. In that default world the subjects differ by one token only.

**Graded similarity** (``cue_len = M > 0``). The question marker Q becomes a cue of M tokens, and each old subject
shares a set fraction of it with the new task. The new task's cue is ``N_1 … N_M``, and the old task owns
``O_1 … O_M`` (2M ids after the content tokens). A permutation ``τ`` of the M cue positions is drawn per seed
(after every draw of the default world). Subject s shares the positions ``S_s = {τ_1 … τ_{k_s}}``:

    cue_s[j] = N_j  if j ∈ S_s,   O_j  otherwise;      cue_new = N_1 … N_M

    f_s = |{j : cue_s[j] = cue_new[j]}| / M = k_s / M,      k_s ≤ k_t  ⇒  S_s ⊆ S_t

By default ``k_s = round(s·M/(S−1))``, so with 8 subjects and M = 7 the knob is f_s = s/7 ∈ {0, 1/7, …, 1}. The knob
is monotone in two senses: a subject's share of the new cue grows with k, and the shared sets are nested, so a more
similar subject holds every shared token of a less similar one. Everything else is the default world's, drawn from
the same seed: the same items, with Q replaced by the cue. Answer marker ANS, positions, letters and content pool
stay common to every subject. So erosion keeps the default world's global part, and the cue adds a similarity to the
new task that grows with f by construction (that erosion follows it is the premise the graded erosion study
measures, as the Spearman of f against erosion). ``kembd``, the token-overlap term of §6.5's CH2, is affected as
well: the cue adds exactly k_s to the overlap of an old prompt of subject s with any new prefix that holds the cue.
That term grows with f by construction too, and ``ch2_no_kembd`` is the CH2 without it. Draw the new task's subjects
uniformly (``subject_weights`` all equal) when the cue is to be the only graded similarity. Each item is ``M − 1``
tokens longer, and the two tasks' ANS are still at the same position (:attr:`FormatWorldConfig.old_answer_pos`).

**Metrics** (spec §6.4, at the old task's answer position, i.e. the target right after ANS):

* ``choice_mass`` = P(A)+P(B)+P(C)+P(D) (:func:`choice_mass`);
* canonical-format rate: the greedy answer is exactly one letter followed by EOS (:func:`canonical`);
* content accuracy: the argmax over the four letters is ``ℓ(e)`` (``choice_argmax_correct``).

Collision, as in the conflict task of ``cfka geometry energy``: the old task's answer NLL change after the first
update step; erosion: the drift of ``choice_mass`` and the canonical rate over the new task's training.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.shapes import Array, Bool, Float, Int
from cfka_jax.values import check_sizes

PAD, BOS, EOS = 0, 1, 2
Q, ANS, P_MARK, R_MARK = 3, 4, 5, 6
LETTERS = (7, 8, 9, 10)
FIRST_FREE = 11
OLD_LEN = 15
OLD_ANSWER_POS = 13  # target position of the letter (scored from the ANS position 12)


@dataclasses.dataclass(frozen=True)
class FormatWorldConfig:
    """Sizes of the two-task world."""

    subjects: int = 8
    """Subjects k; each entity belongs to one, and its token subj_k is in both tasks' prompts."""
    entities_per_subject: int = 24
    """Entities of each subject in the old (multiple-choice) task."""
    content_tokens: int = 32
    """Content tokens: the old task's choices and values, the new task's inputs and answers (>= 4)."""
    new_entities: int = 64
    """Entities e′ of the new (long-form) task, disjoint from the old task's."""
    new_train: int = 1200
    """Training items of the new task."""
    new_test: int = 200
    """Held-out items of the new task."""
    input_len: int = 8
    """n, the content tokens x of a new-task question (8 puts its ANS at position 12, as the old task's)."""
    answer_len: int = 8
    """m, the tokens of a new-task answer y."""
    subject_weights: tuple[float, ...] = ()
    """The new task's subject weights (``subjects`` values; empty: ``subjects − 1, …, 0``, normalised)."""
    cue_len: int = 0
    """M, the length of the graded cue that replaces the question marker Q (0: the single marker Q)."""
    cue_shared: tuple[int, ...] = ()
    """k_s, how many of the M cue positions subject s shares with the new task's cue (``subjects`` values in
    0..M; empty: ``round(s·M/(S−1))``). Only with ``cue_len > 0``."""
    seed: int = 0
    """Seed of the world (values, letters, choices, items)."""

    def __post_init__(self):
        check_sizes(self, ("subjects", "entities_per_subject", "content_tokens", "new_entities", "new_train",
                           "new_test", "input_len", "answer_len"))
        if self.content_tokens < 4:
            raise ValueError(f"content_tokens must be >= 4 (four distinct choices), got {self.content_tokens}")
        if self.subject_weights and (len(self.subject_weights) != self.subjects
                                     or min(self.subject_weights) < 0 or sum(self.subject_weights) <= 0):
            raise ValueError(f"subject_weights must be {self.subjects} non-negative weights with a positive sum, "
                             f"got {self.subject_weights}")
        if self.cue_len < 0:
            raise ValueError(f"cue_len must be >= 0 (0: the single marker Q), got {self.cue_len}")
        if self.cue_shared and (not self.cue_len or len(self.cue_shared) != self.subjects
                                or not all(0 <= k <= self.cue_len for k in self.cue_shared)):
            raise ValueError(f"cue_shared must be {self.subjects} integers in 0..cue_len (cue_len > 0), got "
                             f"{self.cue_shared} with cue_len {self.cue_len}")

    @property
    def weights(self) -> np.ndarray:
        """New-task subject probabilities (default linear, subject 0 most frequent, the last one never drawn)."""
        w = np.asarray(self.subject_weights or np.arange(self.subjects, 0, -1) - 1.0, float)
        return w / w.sum()

    @property
    def shared(self) -> np.ndarray:
        """k_s per subject: the cue positions subject s shares with the new task (all 0 without a cue)."""
        if not self.cue_len:
            return np.zeros(self.subjects, np.int64)
        if self.cue_shared:
            return np.asarray(self.cue_shared, np.int64)
        return np.rint(np.arange(self.subjects) * self.cue_len / max(self.subjects - 1, 1)).astype(np.int64)

    @property
    def similarity(self) -> np.ndarray:
        """f_s = k_s / M, the knob of the graded world (all 0 without a cue)."""
        return self.shared / self.cue_len if self.cue_len else np.zeros(self.subjects)

    @property
    def subject0(self) -> int:
        return FIRST_FREE

    @property
    def entity0(self) -> int:
        return FIRST_FREE + self.subjects

    @property
    def content0(self) -> int:
        return self.entity0 + self.subjects * self.entities_per_subject + self.new_entities

    @property
    def cue0(self) -> int:
        """The first cue id: the new task's cue ``N_j = cue0 + j``, the old task's ``O_j = cue0 + M + j``."""
        return self.content0 + self.content_tokens

    @property
    def vocab_size(self) -> int:
        return self.cue0 + 2 * self.cue_len

    @property
    def stretch(self) -> int:
        """How many tokens the cue adds to every item (``M − 1``; 0 without a cue)."""
        return max(self.cue_len - 1, 0)

    @property
    def old_len(self) -> int:
        return OLD_LEN + self.stretch

    @property
    def old_answer_pos(self) -> int:
        """The old task's answer-letter target position (scored from ANS, one before)."""
        return OLD_ANSWER_POS + self.stretch

    @property
    def new_len(self) -> int:
        return 6 + self.input_len + self.answer_len + self.stretch


@dataclasses.dataclass(frozen=True)
class FormatWorld:
    """Token arrays (int32 numpy) of the two tasks.

    Attributes:
      old: ``[n, old_len]`` multiple-choice items (canonical markers; 15 tokens without a cue), ``old_subject`` and
        ``old_letter`` their subject and correct letter index (0..3). The old task is a memorised question bank:
        it is trained and evaluated on the same items, so content accuracy measures what of the learned answers
        survives.
      new_train, new_test: ``[n, new_len]`` long-form items with the canonical markers; ``new_*_subject``.
      iso_train, iso_test: the same long-form items with the isolated markers P / R (with a cue: R only).
      cue_order: the permutation τ of the cue positions (empty without a cue); subject s shares ``τ[:k_s]``.
    """

    config: FormatWorldConfig
    old: np.ndarray
    old_subject: np.ndarray
    old_letter: np.ndarray
    new_train: np.ndarray
    new_train_subject: np.ndarray
    new_test: np.ndarray
    new_test_subject: np.ndarray
    iso_train: np.ndarray
    iso_test: np.ndarray
    cue_order: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))


def _old_items(cfg: FormatWorldConfig, rng: np.random.Generator):
    n = cfg.subjects * cfg.entities_per_subject
    subject = np.repeat(np.arange(cfg.subjects), cfg.entities_per_subject)
    value = rng.integers(0, cfg.content_tokens, size=n)
    letter = rng.integers(0, 4, size=n)
    choices = np.empty((n, 4), np.int64)
    for i in range(n):
        others = rng.choice(np.setdiff1d(np.arange(cfg.content_tokens), [value[i]]), size=3, replace=False)
        choices[i] = np.insert(others, letter[i], value[i])
    tokens = np.empty((n, OLD_LEN), np.int64)
    tokens[:, 0], tokens[:, 1], tokens[:, 12], tokens[:, 14] = BOS, Q, ANS, EOS
    tokens[:, 2] = cfg.subject0 + subject
    tokens[:, 3] = cfg.entity0 + np.arange(n)
    for j, lt in enumerate(LETTERS):
        tokens[:, 4 + 2 * j] = lt
        tokens[:, 5 + 2 * j] = cfg.content0 + choices[:, j]
    tokens[:, 13] = np.asarray(LETTERS)[letter]
    return tokens.astype(np.int32), subject.astype(np.int32), letter.astype(np.int32)


def _new_items(cfg: FormatWorldConfig, rng: np.random.Generator, n: int, pi, sigma):
    subject = rng.choice(cfg.subjects, size=n, p=cfg.weights)
    entity = rng.integers(0, cfg.new_entities, size=n)
    x = rng.integers(0, cfg.content_tokens, size=(n, cfg.input_len))
    y = pi[x[:, sigma]]
    c0 = cfg.content0
    tokens = np.concatenate([np.full((n, 1), BOS), np.full((n, 1), Q), (cfg.subject0 + subject)[:, None],
                             (cfg.entity0 + cfg.subjects * cfg.entities_per_subject + entity)[:, None], c0 + x,
                             np.full((n, 1), ANS), c0 + y, np.full((n, 1), EOS)], axis=1).astype(np.int32)
    return tokens, subject.astype(np.int32)


def isolate(tokens: np.ndarray) -> np.ndarray:
    """The same items with the isolated markers: Q → P, ANS → R (other tokens unchanged)."""
    out = tokens.copy()
    out[out == Q] = P_MARK
    out[out == ANS] = R_MARK
    return out


def cues(cfg: FormatWorldConfig, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cue of every subject (``[S, M]``) and the new task's (``[M]``): subject s holds ``N_j`` at the positions
    ``order[:k_s]`` and ``O_j`` elsewhere."""
    m = cfg.cue_len
    new = cfg.cue0 + np.arange(m)
    old = np.tile(cfg.cue0 + m + np.arange(m), (cfg.subjects, 1))
    for s, k in enumerate(cfg.shared):
        old[s, order[:k]] = new[order[:k]]
    return old, new


def _with_cue(tokens: np.ndarray, cue_XM: np.ndarray) -> np.ndarray:
    """``tokens`` with the question marker at position 1 replaced by the rows' cues."""
    return np.concatenate([tokens[:, :1], cue_XM.astype(tokens.dtype), tokens[:, 2:]], axis=1)


def make_world(cfg: FormatWorldConfig) -> FormatWorld:
    """The two tasks of ``cfg`` (deterministic in ``cfg.seed``; with a cue, the same items with Q replaced)."""
    rng = np.random.default_rng(cfg.seed)
    old, subject, letter = _old_items(cfg, rng)
    pi = rng.permutation(cfg.content_tokens)
    sigma = np.arange(cfg.answer_len) % cfg.input_len
    sigma = sigma[rng.permutation(cfg.answer_len)]
    new_train, sub_train = _new_items(cfg, rng, cfg.new_train, pi, sigma)
    new_test, sub_test = _new_items(cfg, rng, cfg.new_test, pi, sigma)
    order = np.zeros(0, np.int64)
    if cfg.cue_len:
        order = rng.permutation(cfg.cue_len)
        old_cue, new_cue = cues(cfg, order)
        old = _with_cue(old, old_cue[subject])
        new_train = _with_cue(new_train, np.tile(new_cue, (len(new_train), 1)))
        new_test = _with_cue(new_test, np.tile(new_cue, (len(new_test), 1)))
    return FormatWorld(cfg, old, subject, letter, new_train, sub_train, new_test, sub_test, isolate(new_train),
                       isolate(new_test), order)


def response_mask(tokens: np.ndarray) -> np.ndarray:
    """``target_mask`` (keyed by target position) of the tokens after the answer marker (ANS or R), EOS included."""
    is_marker = (tokens == ANS) | (tokens == R_MARK)
    after = np.cumsum(is_marker, axis=1) - is_marker > 0
    return after.astype(np.float32)


def choice_mass(logits_XV: Float[Array, "*X V"], letters=LETTERS) -> Float[Array, "*X"]:
    """``P(A..D) = Σ_{c∈letters} softmax(logits)_c`` (fp32), spec §6.4 ``choice_mass``."""
    p = jax.nn.softmax(logits_XV.astype(jnp.float32), axis=-1)
    return jnp.sum(p[..., jnp.asarray(letters)], axis=-1)


def letter_argmax(logits_XV: Float[Array, "*X V"], letters=LETTERS) -> Int[Array, "*X"]:
    """Index (0..3) of the most likely of the four letters (likelihood accuracy over the options)."""
    return jnp.argmax(logits_XV[..., jnp.asarray(letters)], axis=-1)


def canonical(first_XV: Float[Array, "*X V"], second_XV: Float[Array, "*X V"], letters=LETTERS
              ) -> Bool[Array, "*X"]:
    """Greedy answer is exactly one letter: argmax of the first answer position is a letter and argmax of the next
    position (after that letter) is EOS."""
    first = jnp.argmax(first_XV, axis=-1)
    return jnp.isin(first, jnp.asarray(letters)) & (jnp.argmax(second_XV, axis=-1) == EOS)


def old_task_metrics(logits_fn, old_tokens: Int[Array, "B S"], letters_B: Int[Array, " B"], *,
                     answer_pos: int = OLD_ANSWER_POS) -> dict:
    """Per-item ``choice_mass``, canonical flag, content hit and answer-letter NLL of the old task.

    ``logits_fn(tokens) -> [B, S, V]``; two forwards: the prompt with the true letter (teacher forcing: P(A..D),
    letter argmax, NLL), and the prompt followed by the greedy first token (canonical format). ``answer_pos``: the
    letter's target position (``world.config.old_answer_pos``; 13 without a cue).
    """
    logits = logits_fn(old_tokens)
    at = logits[:, answer_pos - 1]
    lp = jax.nn.log_softmax(at.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(lp, old_tokens[:, answer_pos][:, None], axis=-1)[:, 0]
    greedy = old_tokens.at[:, answer_pos].set(jnp.argmax(at, axis=-1).astype(old_tokens.dtype))
    second = logits_fn(greedy)[:, answer_pos]
    return {"choice_mass": choice_mass(at), "canonical": canonical(at, second),
            "content": letter_argmax(at) == letters_B, "nll": nll}


def ifmass_force(logits_XV: Float[Array, "*X V"], letters=LETTERS) -> Float[Array, "*X V"]:
    """Logit gradient of ``ifmass = log Σ_{c∈letters} p(c)``: ``q − π`` with q = π restricted to the letters and
    renormalised (spec §6.5)."""
    p = jax.nn.softmax(logits_XV.astype(jnp.float32), axis=-1)
    on = jnp.zeros(p.shape[-1], bool).at[jnp.asarray(letters)].set(True)
    q = jnp.where(on, p, 0.0)
    return q / jnp.sum(q, axis=-1, keepdims=True) - p


def prefix_counts(tokens: np.ndarray, rows: np.ndarray, pos: np.ndarray, vocab: int) -> np.ndarray:
    """``[n, V]`` counts of the ids of ``tokens[rows[i], :pos[i]]`` (the prefix of each token, for ``kembd``)."""
    out = np.zeros((len(rows), vocab), np.float32)
    for i, (r, p) in enumerate(zip(rows, pos)):
        np.add.at(out[i], tokens[r, :p], 1.0)
    return out


def erosion_prediction(params, update, obs_tokens: np.ndarray, *, net, answer_pos: int = OLD_ANSWER_POS
                       ) -> dict[str, np.ndarray]:
    """The pre-finetuning erosion score of every old-task item (spec §6.5, ``seq5``), ``{term: [n_obs]}``.

    Update side: the tokens of ``update`` (a :class:`~cfka_jax.geometry.onestep.TokenSet`, e.g. every response
    token of the new task's examples), each with ``g_u``, ``Wᵀg_u`` and its normalised attention inputs.
    Observation side: each old item's prompt up to ANS with the objective ``ifmass`` (force ``q − π`` at the answer
    position). Per pair ``ch1 = gg·hh_l``, ``ch2 = gwwg·(hh_oth + kembd)`` (``kembd`` = multiset overlap of the
    update prefix with the prompt, an integer count added as is, pitfall 18), ``total = ch1 + ch2``; then the
    **mean** over update tokens. Also ``ch2_no_kembd`` and the baselines ``h_dot`` / ``h_cos`` (dot product and
    cosine of the final states). ``answer_pos``: the old letter's target position (``config.old_answer_pos``).
    """
    from cfka_jax.geometry import channels, onestep
    from cfka_jax.geometry.readout import readout_matrix, readout_projection

    obs = onestep.TokenSet(jnp.asarray(obs_tokens), jnp.arange(len(obs_tokens), dtype=jnp.int32),
                           jnp.full(len(obs_tokens), answer_pos, jnp.int32))
    feat = onestep.jitted(onestep.token_features, net)
    fu, fo = feat(params, update), feat(params, obs)
    logits = net.model(params)(obs.tokens).logits[:, answer_pos - 1]
    g_o = ifmass_force(logits)
    fo = fo.replace(g=g_o, wtg=readout_projection(readout_matrix(params, net.cfg).astype(g_o.dtype), g_o))
    vocab = net.cfg.vocab_size
    ku = prefix_counts(np.asarray(update.tokens), np.asarray(update.rows), np.asarray(update.pos), vocab)
    ko = prefix_counts(obs_tokens, np.arange(len(obs_tokens)), np.full(len(obs_tokens), answer_pos), vocab)
    terms = channels.seq5(fo, fu, jnp.asarray(ko @ ku.T))
    hn_o = fo.h / jnp.linalg.norm(fo.h, axis=-1, keepdims=True)
    hn_u = fu.h / jnp.linalg.norm(fu.h, axis=-1, keepdims=True)
    terms = {**terms, "h_dot": channels.gram(fo.h, fu.h), "h_cos": channels.gram(hn_o, hn_u)}
    return {k: np.asarray(jnp.mean(v, axis=1)) for k, v in terms.items()}
