"""Mixing replay into the new data of a continual pre-training run at new-data fraction α (spec §4.3, §6.4).

One entry point, :func:`mix_replay`, with the rule as a switch:

* ``token_share`` (project default for real data): all new documents plus replay documents drawn so that replay
  tokens / all tokens ≈ 1 − α. With N new tokens the replay target is R* = N (1 − α) / α; replay documents are
  taken in successive seeded permutations (each pass uses every replay document once, so documents repeat only
  when R* exceeds the replay corpus) and the prefix whose token count is nearest to R* is kept.
* ``reference_copies`` (the synthetic reference, decision #7): [replay] + [new] × int(α / (1 − α)) in float64,
  i.e. every replay document once and whole copies of the new data (α = 0.5, 0.67, 0.8, 0.9 → 1, 2, 4, 9 copies).
* ``code_5050`` (the real-data reference's ``CPTDataset`` with ratios [1 − α, 1 − α], a bug kept for parity): both
  sources drawn with replacement to int((n_replay / (1 − α)) · (1 − α)) ≈ n_replay documents each, a 50/50 mix
  for any α.

The batcher shuffles the result every epoch, so the order returned here does not matter for training.
"""

from __future__ import annotations

import math

import numpy as np

RULES = ("token_share", "reference_copies", "code_5050")


def replay_copies(alpha: float) -> int:
    """Copies of the new data per replay file at new-data fraction α: int(α / (1 − α)) in float64 (§4.3)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1) for a replay mixture, got {alpha}")
    return int(np.float64(alpha) / (np.float64(1.0) - np.float64(alpha)))


def _token_share(new_docs, replay_docs, alpha: float, seed: int) -> tuple[list, list, dict]:
    new_tokens = int(sum(len(d) for d in new_docs))
    target = new_tokens * (1.0 - alpha) / alpha
    lens = np.array([len(d) for d in replay_docs], np.int64)
    if target > 0 and lens.sum() == 0:
        raise ValueError(f"alpha = {alpha} < 1 needs replay documents with tokens, got {len(replay_docs)} documents")
    picks = np.zeros(0, np.int64)
    if target > 0:
        passes = math.ceil(target / lens.sum()) + 1
        rng = np.random.default_rng([seed, 3])
        order = np.concatenate([rng.permutation(len(replay_docs)) for _ in range(passes)])
        csum = np.concatenate([[0], np.cumsum(lens[order])])
        k = int(np.searchsorted(csum, target))  # first prefix reaching the target
        k = k - 1 if k > 0 and target - csum[k - 1] < csum[k] - target else k
        picks = order[:k]
    extra = {"replay_unique": len(set(picks.tolist())),
             "replay_passes": len(picks) / len(replay_docs) if len(replay_docs) else 0.0}
    return list(new_docs), [replay_docs[i] for i in picks], extra


def _code_5050(new_docs, replay_docs, alpha: float, seed: int) -> tuple[list, list, dict]:
    rng = np.random.default_rng(seed)
    ratio = np.float64(1.0) - np.float64(alpha)
    k = int(len(replay_docs) / ratio * ratio)  # CPTDataset: target = len(first) / ratio; draw int(target · ratio)
    rep = rng.integers(0, len(replay_docs), size=k)
    new = rng.integers(0, len(new_docs), size=k)
    return [new_docs[i] for i in new], [replay_docs[i] for i in rep], {}


def mix_replay(new_docs: list[np.ndarray], replay_docs: list[np.ndarray], alpha: float, *,
               rule: str = "token_share", seed: int = 0) -> tuple[list[np.ndarray], dict]:
    """(training documents, statistics) of new data mixed with replay by ``rule`` (module docstring).

    ``alpha = 1`` (``token_share`` only) returns the new documents alone. Statistics: ``rule``, ``alpha``,
    ``new_tokens``, ``replay_tokens``, ``replay_share`` (achieved replay tokens / all tokens), ``replay_docs``
    (drawn, repeats counted) and, for ``token_share``, ``replay_unique`` and ``replay_passes``.

    Raises:
      ValueError: an unknown rule, α outside (0, 1) ((0, 1] for ``token_share``), no new documents, or no replay
        documents where the rule needs them.
    """
    if rule not in RULES:
        raise ValueError(f"mixing rule must be one of {RULES}, got {rule!r}")
    if not (0.0 < alpha <= 1.0 if rule == "token_share" else 0.0 < alpha < 1.0):
        raise ValueError(f"alpha (the new-data fraction) must be in (0, {'1]' if rule == 'token_share' else '1)'} "
                         f"for rule {rule!r}, got {alpha}")
    if not new_docs:
        raise ValueError("replay mixing needs new documents")
    if rule != "token_share" and not replay_docs:
        raise ValueError(f"rule {rule!r} needs replay documents, got none")
    if rule == "token_share":
        new, replay, extra = _token_share(new_docs, replay_docs, alpha, seed)
        docs = new + replay
    elif rule == "reference_copies":
        new, replay, extra = list(new_docs) * replay_copies(alpha), list(replay_docs), {}
        docs = replay + new
    else:
        new, replay, extra = _code_5050(new_docs, replay_docs, alpha, seed)
        docs = replay + new
    new_tokens, replay_tokens = int(sum(map(len, new))), int(sum(map(len, replay)))
    return docs, {"rule": rule, "alpha": alpha, "new_tokens": new_tokens, "replay_tokens": replay_tokens,
                  "replay_share": replay_tokens / max(1, new_tokens + replay_tokens), "replay_docs": len(replay),
                  **extra}
