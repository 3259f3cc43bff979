"""A continued-pretraining world with separate out-of-domain probe tasks (spec §7.2–§7.3 on synthetic stand-ins).

The release runs CPT on PubMed and probes GSM8K / MBPP / Dolly (other tasks) plus PubMed itself (``bio``). Here
every part is one of the project's synthetic worlds, each in its own block of token ids of one shared vocabulary
(PAD = 0 and BOS = 1 are shared; a world's token ``t ≥ 2`` becomes ``offset_w + t − 2``):

* **Out-of-domain tasks** D (in the PT mixture, never in CPT), each a rule task with a response:
  ``ident_a`` and ``ident_b`` — two identification worlds (``synthetic.make_task``, different seeds and shapes:
  class template + input x, response ``f_c(x)``); ``longform`` — the long-form task of the format world
  (``formats.make_world``: ``Q subj e′ x … ANS y … EOS``, response after ANS). Each task's items are split into
  ``pt`` (PT mixture), ``sft`` (the plasticity fine-tune's train set) and ``probe`` (held out from both; the
  probe loss and R_D).
* **The CPT domain** ``domain`` — a fact corpus (``languages.make_facts`` / ``corpus``: items
  ``Q name rel ANS value EOS`` in two renderings plus translation pairs), absent from PT: CPT on it is new
  knowledge in new tokens, as PubMed is for an instruct model. Its in-domain probe (``bio``) is the value tokens
  of the rendering-0 items (which CPT trains on, as the release's ``bio`` probe reads PubMed).

PT trains on the OOD tasks' ``pt`` rows (response and prompt tokens alike: LM loss on all non-PAD targets); CPT on
the domain corpus (all non-PAD targets). Masks are ``target_mask`` keyed by target position (column 0 never).

**The identification tasks, and the variant a small base model knows.** An identification item is
``[BOS, T_c,1 … T_c,m, x_1 … x_n, SEP, y_1 … y_n]``: the class c is named by its template T_c (``m`` = 4 / 3
tokens for ``ident_a`` / ``ident_b``), ``x`` is drawn at random from 16 content tokens, and the response is
``y = f_c(x)``, which the prompt determines. ``ident_rule`` picks f_c (``synthetic.TaskConfig.rule``):

* ``permute`` (the default, the world of the recorded studies): ``y_i = π_c(x_{σ_c(i)})``, a per-class position
  permutation σ_c composed with a per-class token map π_c. With ``classes`` = 6 and 40 PT items per class, a
  6-block d = 48 port memorises the PT items (greedy accuracy on them near 1 after 1,500 steps) and stays near
  the position-only chance on held-out x: it never finds, per class, which input position each response token
  copies from. The base model does not know these tasks.
* ``map``: ``y_i = π_c(x_i)`` (σ_c the identity; every other draw the same, so templates, inputs and π_c are
  those of ``permute``). Response token i copies input token i, a fixed offset back for every class, through the
  class's token map; with fewer classes (``classes`` = 3: 80 PT items per class, each π_c entry met 25–30 times
  in one pass over the ``pt`` rows) the same port learns the rule, not the items, and reaches near-perfect accuracy
  on the held-out probe within the study's PT. Each change alone falls short at seed 0: ``map`` with 6 classes
  learns the rule late and only partly, 3 classes under ``permute`` still memorise ``ident_b``.

The answer is a function of the prompt in either rule; what changes is only how hard f_c is to learn from the PT
rows. ``longform`` and the domain are the same in every variant.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cfka_jax.geometry import formats, languages, synthetic
from cfka_jax.values import check_sizes

PAD, BOS = 0, 1
SHARED = 2
TASKS = ("ident_a", "ident_b", "longform")


@dataclasses.dataclass(frozen=True)
class OODWorldConfig:
    """Sizes of the world. ``pt`` / ``sft`` / ``probe``: items per OOD task in each split (the identification
    tasks round them to whole classes)."""

    pt: int = 240
    sft: int = 120
    probe: int = 60
    classes: int = 6
    """Classes of each identification task (3 with ``ident_rule='map'``: the variant the base model knows)."""
    entities: int = 60
    """Entities of the domain fact corpus (4 relations each)."""
    parallel: int = 200
    """Translation pairs in the domain corpus."""
    seed: int = 0
    ident_rule: str = "permute"
    """f_c of the identification tasks (``synthetic.RULES``): ``permute`` (``π_c(x_{σ_c(i)})``) or ``map``
    (``π_c(x_i)``); see the module docstring."""

    def __post_init__(self):
        check_sizes(self, ("pt", "sft", "probe", "classes", "entities"))
        if self.ident_rule not in synthetic.RULES:
            raise ValueError(f"ident_rule must be one of {synthetic.RULES}, got {self.ident_rule!r}")
        if self.parallel < 0:
            raise ValueError(f"parallel must be >= 0, got {self.parallel}")
        for name in ("pt", "sft", "probe"):
            if getattr(self, name) < self.classes:
                raise ValueError(f"{name} ({getattr(self, name)}) must be at least classes ({self.classes})")


@dataclasses.dataclass(frozen=True)
class Split:
    """Token rows ``[n, S]`` (int32, right-padded with PAD) and their ``target_mask`` ``[n, S]`` (float32)."""

    tokens: np.ndarray
    mask: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    def batches(self, batch_size: int) -> list[dict]:
        """Batches with ``tokens``, ``attention_mask`` (non-PAD) and ``target_mask``."""
        import jax.numpy as jnp

        attn = (self.tokens != PAD).astype(np.int32)
        attn[:, 0] = 1
        return [{"tokens": jnp.asarray(self.tokens[s:s + batch_size]),
                 "attention_mask": jnp.asarray(attn[s:s + batch_size]),
                 "target_mask": jnp.asarray(self.mask[s:s + batch_size])} for s in range(0, len(self), batch_size)]


@dataclasses.dataclass(frozen=True)
class OODWorld:
    """``tasks[D]`` = {"pt", "sft", "probe"} splits (response masks), ``pt_mix`` / ``cpt`` the training corpora (LM
    masks), ``bio`` the in-domain probe; ``offsets[w]`` the first id of world w's block; ``vocab_size``."""

    config: OODWorldConfig
    tasks: dict[str, dict[str, Split]]
    pt_mix: Split
    cpt: Split
    bio: Split
    offsets: dict[str, int]
    vocab_size: int
    seq_len: int


def remap(tokens: np.ndarray, offset: int) -> np.ndarray:
    """A world's token ids moved into its block: PAD and BOS stay, ``t ≥ 2`` becomes ``offset + t − 2``."""
    tokens = np.asarray(tokens)
    return np.where(tokens < SHARED, tokens, offset + tokens - SHARED).astype(np.int32)


def lm_mask(tokens: np.ndarray) -> np.ndarray:
    """``target_mask`` of every non-PAD target (column 0 is never a target)."""
    mask = (np.asarray(tokens) != PAD).astype(np.float32)
    mask[:, 0] = 0.0
    return mask


def _pad(tokens: np.ndarray, width: int) -> np.ndarray:
    out = np.full((len(tokens), width), PAD, np.int32)
    out[:, :tokens.shape[1]] = tokens
    return out


def _ident(cfg: OODWorldConfig, seed: int, template_len: int, input_len: int):
    per = [max(1, n // cfg.classes) for n in (cfg.pt, cfg.sft, cfg.probe)]
    tc = synthetic.TaskConfig(num_classes=cfg.classes, train_per_class=per[0] + per[1], test_per_class=per[2],
                              pretrain_classes=1, pretrain_per_class=1, template_len=template_len,
                              template_vocab=8, input_len=input_len, content_tokens=16, seed=seed,
                              rule=cfg.ident_rule)
    task = synthetic.make_task(tc)
    within = np.arange(len(task.train_tokens)) % tc.train_per_class
    parts = {"pt": task.train_tokens[within < per[0]], "sft": task.train_tokens[within >= per[0]],
             "probe": task.test_tokens}
    return parts, {k: synthetic.response_mask(tc, len(v)) for k, v in parts.items()}, tc.vocab_size


def _longform(cfg: OODWorldConfig, seed: int):
    fc = formats.FormatWorldConfig(subjects=4, entities_per_subject=4, content_tokens=16, new_entities=16,
                                   new_train=cfg.pt + cfg.sft, new_test=cfg.probe, input_len=4, answer_len=6,
                                   seed=seed)
    world = formats.make_world(fc)
    parts = {"pt": world.new_train[:cfg.pt], "sft": world.new_train[cfg.pt:], "probe": world.new_test}
    return parts, {k: formats.response_mask(v) for k, v in parts.items()}, fc.vocab_size


def _domain(cfg: OODWorldConfig, seed: int):
    lc = languages.LanguageConfig(languages=2, entities=cfg.entities, relations=4, name_pieces=16, name_len=2,
                                  value_concepts=16, value_len=2, parallel=cfg.parallel, queries=1, seed=seed)
    facts = languages.make_facts(lc)
    tokens, _ = languages.corpus(facts, seed=seed)
    bio = np.stack([languages.sequence(facts, i, 0) for i in range(lc.items)])
    bio_mask = np.zeros(bio.shape, np.float32)
    bio_mask[:, 4 + lc.name_len:] = 1.0  # [BOS, Q, name…, rel, ANS, value…, EOS]: targets after ANS
    return tokens, bio, bio_mask, lc.vocab_size


def make_world(cfg: OODWorldConfig) -> OODWorld:
    """The world of ``cfg`` (deterministic in ``cfg.seed``)."""
    s = 1000 * cfg.seed
    raw = {"ident_a": _ident(cfg, s + 1, template_len=4, input_len=5),
           "ident_b": _ident(cfg, s + 2, template_len=3, input_len=6),
           "longform": _longform(cfg, s + 3)}
    dom_tokens, bio, bio_mask, dom_vocab = _domain(cfg, s + 4)
    offsets, nxt = {}, SHARED
    for name, (_, _, vocab) in raw.items():
        offsets[name], nxt = nxt, nxt + vocab - SHARED
    offsets["domain"], vocab_size = nxt, nxt + dom_vocab - SHARED
    width = max([dom_tokens.shape[1], bio.shape[1]] + [p.shape[1] for parts, _, _ in raw.values()
                                                         for p in parts.values()])

    def split(tokens, mask, offset):
        return Split(_pad(remap(tokens, offset), width), _pad(mask, width).astype(np.float32))

    tasks = {name: {k: split(parts[k], masks[k], offsets[name]) for k in parts}
             for name, (parts, masks, _) in raw.items()}
    mix = np.concatenate([tasks[n]["pt"].tokens for n in TASKS])
    cpt = _pad(remap(dom_tokens, offsets["domain"]), width)
    return OODWorld(cfg, tasks, Split(mix, lm_mask(mix)), Split(cpt, lm_mask(cpt)),
                    split(bio, bio_mask, offsets["domain"]), offsets, vocab_size, width)


def token_blocks(world: OODWorld) -> dict[str, set[int]]:
    """The token ids (besides PAD/BOS) that occur in each OOD task's rows and in the CPT corpus."""
    out = {n: set(np.unique(np.concatenate([s.tokens.ravel() for s in world.tasks[n].values()])).tolist())
           for n in TASKS}
    out["domain"] = set(np.unique(world.cpt.tokens).tolist())
    return {k: v - {PAD, BOS} for k, v in out.items()}
