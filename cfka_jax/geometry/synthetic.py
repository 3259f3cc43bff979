"""A synthetic multi-class task for the identification benchmark (the shape of DataInf's, spec §4.2).

Each class c has a fixed instruction template (``template_len`` tokens drawn from a template vocabulary shared by
all classes, as instructions share words) and a token transformation ``f_c(x)_i = π_c(x_{σ_c(i)})`` (a
class-specific position permutation σ_c and content-token permutation π_c; ``rule="map"`` fixes σ_c to the
identity, ``f_c(x)_i = π_c(x_i)``: a per-class token map that a small model learns from a few dozen examples,
used where the rule must be *teachable*, the selection study). One example:

    [BOS, T_c,1 … T_c,m, x_1 … x_n, SEP, f_c(x)_1 … f_c(x)_n]          (S = 2 + m + 2n tokens, no padding)

Like the DataInf sets, the benchmark data are ordered by class: train item j has class ``j // train_per_class``
and test item i class ``i // test_per_class``; the positives of test item i are the train items of its class.

The benchmark runs on a *base* model, as the release runs Qwen2.5-1.5B base: :func:`fit` trains the model on
``pretrain_classes`` further classes of the same generator (their own templates and rules), so it knows the format
but not the benchmark's templates or transformations.

The *conflict* splits re-use the pretraining classes' templates with their second half redrawn (and fresh
transformations): a new format that diverges from one the base model has learned, so at the first changed template
token the base model predicts the old token confidently, and wrongly — the confidently-wrong, dominant-rival tokens
of update energy and collision (spec §5–§6).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from cfka_jax.models import family
from cfka_jax.models.family import ModelSize
from cfka_jax.train.loop import LoopConfig, run_loop
from cfka_jax.train.optim import OptimConfig, make_optimizer
from cfka_jax.train.step import Loss, init_state, make_train_step
from cfka_jax.values import check_sizes

PAD, BOS, SEP = 0, 1, 2
SPECIALS = 3
RULES = ("permute", "map")


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """Sizes of the synthetic task (defaults: DataInf's 10 classes × 90 train / 10 test)."""

    num_classes: int = 10
    """Benchmark classes, each with its own instruction template and transformation f_c."""
    train_per_class: int = 90
    """Training examples per benchmark class."""
    test_per_class: int = 10
    """Test examples per benchmark class."""
    pretrain_classes: int = 10
    """Further classes of the same generator that :func:`fit` trains the base model on (not benchmark classes)."""
    pretrain_per_class: int = 100
    """Examples per pretraining class."""
    template_len: int = 8
    """m, the tokens of a class's instruction template."""
    template_vocab: int = 16
    """The template vocabulary all classes draw their templates from."""
    input_len: int = 6
    """n, the content tokens x of an example (and of its transformation f_c(x))."""
    content_tokens: int = 24
    """The content vocabulary x and f_c(x) are drawn from."""
    seed: int = 0
    """Seed of the templates, rules and examples."""
    rule: str = "permute"
    """``permute``: ``f_c(x)_i = π_c(x_{σ_c(i)})``; ``map``: ``f_c(x)_i = π_c(x_i)`` (σ_c the identity)."""

    def __post_init__(self):
        check_sizes(self, ("num_classes", "train_per_class", "test_per_class", "pretrain_classes",
                           "pretrain_per_class", "template_len", "template_vocab", "input_len",
                           "content_tokens"))
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")

    @property
    def vocab_size(self) -> int:
        return SPECIALS + self.template_vocab + self.content_tokens

    @property
    def seq_len(self) -> int:
        return 2 + self.template_len + 2 * self.input_len


@dataclasses.dataclass(frozen=True)
class Task:
    """Token arrays and class labels of the benchmark splits and the pretraining set (int32 numpy)."""

    config: TaskConfig
    train_tokens: np.ndarray
    train_labels: np.ndarray
    test_tokens: np.ndarray
    test_labels: np.ndarray
    pretrain_tokens: np.ndarray
    conflict_train_tokens: np.ndarray
    conflict_test_tokens: np.ndarray

    def tokens(self, split: str) -> np.ndarray:
        """``train`` / ``test`` (benchmark), ``pretrain``, ``conflict_train`` / ``conflict_test``."""
        return getattr(self, f"{split}_tokens")

    def batch(self, split: str) -> dict:
        tokens = jnp.asarray(self.tokens(split))
        return {"tokens": tokens, "attention_mask": jnp.ones_like(tokens)}


def _rules(cfg: TaskConfig, rng: np.random.Generator, classes: int, templates=None):
    sigma = np.stack([rng.permutation(cfg.input_len) for _ in range(classes)])
    pi = np.stack([rng.permutation(cfg.content_tokens) for _ in range(classes)])
    if cfg.rule == "map":  # the same draws (the rng stream of every later split is unchanged), σ_c the identity
        sigma = np.broadcast_to(np.arange(cfg.input_len), sigma.shape)
    if templates is None:
        templates = rng.integers(0, cfg.template_vocab, size=(classes, cfg.template_len))
    return sigma, pi, templates


def _examples(cfg: TaskConfig, rules, rng: np.random.Generator, per_class: int) -> tuple[np.ndarray, np.ndarray]:
    sigma, pi, templates = rules
    labels = np.repeat(np.arange(len(sigma)), per_class)
    n = labels.size
    x = rng.integers(0, cfg.content_tokens, size=(n, cfg.input_len))
    y = pi[labels[:, None], x[np.arange(n)[:, None], sigma[labels]]]
    content0 = SPECIALS + cfg.template_vocab
    tokens = np.concatenate([np.full((n, 1), BOS), SPECIALS + templates[labels], content0 + x,
                             np.full((n, 1), SEP), content0 + y], axis=1)
    return tokens.astype(np.int32), labels.astype(np.int32)


def _diverge(templates: np.ndarray, cfg: TaskConfig, rng: np.random.Generator) -> np.ndarray:
    """The templates with every token of their second half replaced by a different template token."""
    out = templates.copy()
    half = cfg.template_len // 2
    shift = rng.integers(1, cfg.template_vocab, size=out[:, half:].shape)
    out[:, half:] = (out[:, half:] + shift) % cfg.template_vocab
    return out


def template_mask(cfg: TaskConfig, rows: int) -> np.ndarray:
    """``target_mask`` of the template tokens after the first (predictable from the class's first token)."""
    mask = np.zeros((rows, cfg.seq_len), np.float32)
    mask[:, 2:1 + cfg.template_len] = 1.0
    return mask


def make_task(cfg: TaskConfig) -> Task:
    """The benchmark splits, the pretraining set and the conflict splits of ``cfg`` (deterministic in ``cfg.seed``)."""
    rng = np.random.default_rng(cfg.seed)
    rules = _rules(cfg, rng, cfg.num_classes)
    train = _examples(cfg, rules, rng, cfg.train_per_class)
    test = _examples(cfg, rules, rng, cfg.test_per_class)
    pre_rules = _rules(cfg, rng, cfg.pretrain_classes)
    pretrain, _ = _examples(cfg, pre_rules, rng, cfg.pretrain_per_class)
    conflict = _rules(cfg, rng, cfg.pretrain_classes, templates=_diverge(pre_rules[2], cfg, rng))
    conflict_train, _ = _examples(cfg, conflict, rng, cfg.train_per_class)
    conflict_test, _ = _examples(cfg, conflict, rng, cfg.test_per_class)
    return Task(cfg, *train, *test, pretrain, conflict_train, conflict_test)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The from-scratch model of the task: ``arch`` names a registered family (``models/family.py``): ``'qwen'``
    (Qwen2, tied head as the small Qwen models), ``'pythia'`` (GPT-NeoX, untied ``embed_out``, parallel residual,
    rotary_pct 0.25) or ``'llama'`` (untied head)."""

    arch: str = "qwen"
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 64
    seed: int = 0

    def __post_init__(self):
        family.get(self.arch)  # raises on an unknown family, naming the registered ones

    def build(self, vocab_size: int) -> nnx.Module:
        fam = family.get(self.arch)
        size = ModelSize(self.hidden, self.layers, self.heads, self.kv_heads, self.intermediate)
        return fam.build(fam.from_size(size, vocab_size=vocab_size, max_position_embeddings=64), self.seed)


def response_mask(cfg: TaskConfig, rows: int) -> np.ndarray:
    """``target_mask`` (keyed by target position) of the response tokens ``f_c(x)`` only, ``[rows, S]``."""
    mask = np.zeros((rows, cfg.seq_len), np.float32)
    mask[:, cfg.seq_len - cfg.input_len:] = 1.0
    return mask


def fit(model: nnx.Module, task: Task, *, steps: int, batch_size: int = 32, lr: float = 3e-3, seed: int = 0,
        split: str = "pretrain", loss_fn=None, response_only: bool = False) -> tuple[nnx.Module, list[float]]:
    """Train ``model`` on a split (default the pretraining set; all targets, or the response tokens only) with AdamW
    (cosine schedule, no weight decay) and return it with the loss of every step; ``loss_fn`` replaces the
    engine's mean NLL. The parameters of ``model`` are donated to the train step: pass a copy to keep them."""
    tokens = task.tokens(split)
    mask = response_mask(task.config, len(tokens)) if response_only else np.ones(tokens.shape, np.float32)
    return fit_arrays(model, tokens, mask, steps=steps, batch_size=batch_size, lr=lr, seed=seed, loss_fn=loss_fn)


def optim_config(steps: int, lr: float) -> OptimConfig:
    """The fits' AdamW: cosine schedule (10 % warm-up, to lr/10), no weight decay."""
    return OptimConfig(peak_lr=lr, min_lr=lr / 10, warmup_steps=steps // 10, total_steps=max(steps, 1),
                       weight_decay=0.0)


def make_finetuner(graphdef, rest, *, steps: int, batch_size: int = 32, lr: float = 3e-3, loss_fn=None):
    """``run(params, tokens, mask, seed, callback=None, callback_steps=()) -> (state, losses)``: ``steps`` AdamW
    steps (:func:`optim_config`) on token rows and their ``target_mask``, one compiled step shared by every call.

    ``params`` are copied (the step donates its buffers); the steps run in the engine's loop
    (``train.loop.run_loop``, in memory: a non-finite step stops the fine-tune); ``callback(state, step)`` runs
    before the first step when 0 is in ``callback_steps`` and after every step listed there (the state's optimiser
    moments included; do not keep references across steps, they are donated).
    """
    tx = make_optimizer(optim_config(steps, lr))
    step = make_train_step(graphdef, rest, tx, loss=Loss() if loss_fn is None else Loss(loss_fn=loss_fn))

    def run(params, tokens: np.ndarray, mask: np.ndarray, seed: int = 0, callback=None, callback_steps=()):
        state = init_state(jax.tree.map(jnp.copy, params), tx)
        rng = np.random.default_rng(seed)
        at = set(callback_steps)
        if callback is not None and 0 in at:
            callback(state, 0)
        losses = []

        def batch_at(t: int) -> dict:  # drawn in step order from Random(seed)
            idx = rng.choice(len(tokens), size=min(batch_size, len(tokens)), replace=False)
            return {"tokens": jnp.asarray(tokens[idx]), "target_mask": jnp.asarray(mask[idx])}

        state = run_loop(state, step, batch_at, cfg=LoopConfig(steps=steps, log_every=max(steps, 1), progress=False),
                         on_metrics=lambda t, m: losses.append(float(m["loss"])),
                         on_state=lambda t, s: callback(s, t),
                         state_at=(lambda t: t in at) if callback is not None else None).state
        return state, losses

    return run


def fit_arrays(model: nnx.Module, tokens: np.ndarray, mask: np.ndarray, *, steps: int, batch_size: int = 32,
               lr: float = 3e-3, seed: int = 0, loss_fn=None, callback=None, callback_steps=()
               ) -> tuple[nnx.Module, list[float]]:
    """:func:`fit` on token rows and their ``target_mask`` (keyed by target position): AdamW, cosine schedule
    (10 % warm-up, to lr/10), no weight decay, batches drawn without replacement from ``Random(seed)``.

    ``callback(params, step)`` runs before the first step when 0 is in ``callback_steps`` and after every step
    listed there (the parameters are the state's; do not keep references across steps, they are donated).
    """
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    run = make_finetuner(graphdef, rest, steps=steps, batch_size=batch_size, lr=lr, loss_fn=loss_fn)
    cb = None if callback is None else (lambda state, t: callback(state.params, t))
    state, losses = run(params, tokens, mask, seed, callback=cb, callback_steps=callback_steps)
    return nnx.merge(graphdef, state.params, rest), losses


def identification(scores: np.ndarray, task: Task, k: int | None = None) -> dict:
    """Per test item AUC and Recall@K (K = class size) of ``scores[test, train]``; mean ± std (ddof 0)."""
    from cfka_jax.geometry.stats import auc, recall_at_k

    k = k or task.config.train_per_class
    pos = task.test_labels[:, None] == task.train_labels[None, :]
    aucs = np.array([auc(s, p) for s, p in zip(np.asarray(scores), pos)])
    recalls = np.array([recall_at_k(s, p, k) for s, p in zip(np.asarray(scores), pos)])
    return {"auc_mean": float(aucs.mean()), "auc_std": float(aucs.std()), "recall_mean": float(recalls.mean()),
            "recall_std": float(recalls.std()), "k": k, "auc": aucs.tolist(), "recall": recalls.tolist()}
