"""Teacher-forced object-token probes and the LAMA-CKL / TemporalWiki metrics (spec taalm.md §5.5, §5.6, §8).

Scoring (no generation): one forward pass over the probe; the prediction at s−1 is argmax_v p(v | x_<s); the
per-example accuracy is the **fraction of the object's sub-tokens** predicted exactly (partial credit), the
per-example NLL the mean NLL over the object tokens (the reference's "ppl": not exponentiated). Predictions are
compared over the masked positions directly (quirk #16: the reference drops a predicted id 0). An empty object
mask scores accuracy 0 and is counted (quirk #17; the reference's NaN/error); its NLL is left out of the mean.

LAMA-CKL metrics over the points k = 0 (before training) … N (after epoch N):

    Top Acc = max_k ACC_TO-LEARN(k);  Epoch = the smallest k reaching it;  NF Acc = ACC_NOT-TO-FORGET(Epoch);
    Total Knowledge = Top Acc + NF Acc.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.data.ckl_encode import Encoded, pad_batch
from cfka_jax.eval.batches import row_blocks
from cfka_jax.shapes import Array, Float, Int
from cfka_jax.train.losses import gold_log_probs, shifted_log_softmax


def probe_scores(
    logits_BSV: Float[Array, "B S V"], tokens_BS: Int[Array, "B S"], object_mask_BS: Float[Array, "B S"]
) -> tuple[Float[Array, " B"], Float[Array, " B"], Float[Array, " B"]]:
    """Per-example (object accuracy, object NLL, number of object tokens); token-space mask, column 0 ignored."""
    y = object_mask_BS[:, 1:].astype(jnp.float32)
    logp = shifted_log_softmax(logits_BSV)
    target = tokens_BS[:, 1:]
    nll = -gold_log_probs(logp, tokens_BS)
    correct = (jnp.argmax(logp, axis=-1).astype(target.dtype) == target).astype(jnp.float32)
    n = jnp.sum(y, axis=1)
    denom = jnp.maximum(n, 1.0)
    return jnp.sum(correct * y, axis=1) / denom, jnp.sum(nll * y, axis=1) / denom, n


def make_probe_scorer(logits_fn: Callable) -> Callable:
    """Jitted ``scorer(params, batch) -> (acc_B, nll_B, n_B)`` for ``logits_fn(params, batch) -> B S V``."""
    return jax.jit(lambda params, batch: probe_scores(logits_fn(params, batch), batch["tokens"],
                                                      batch["object_mask"]))


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """Accuracy and NLL of a probe set (means over examples) and the per-example values."""

    acc: float
    nll: float
    per_example_acc: np.ndarray
    per_example_nll: np.ndarray
    empty: int


def evaluate_probes(scorer: Callable, params, enc: Encoded, *, batch_size: int = 64, pad_id: int = 0
                    ) -> ProbeResult:
    """Score every probe of ``enc`` in fixed-shape batches (padded to the set's longest probe and to
    ``batch_size`` rows, so one compiled program serves the whole set)."""
    n = len(enc)
    if n == 0:
        raise ValueError("empty probe set")
    length, accs, nlls, counts = enc.max_len, [], [], []
    for block in row_blocks(n, batch_size):
        batch = pad_batch(enc, block.rows, length=length, pad_id=pad_id)
        acc, nll, cnt = jax.device_get(scorer(params, {k: jnp.asarray(v) for k, v in batch.items()}))
        accs.append(acc[block.valid])
        nlls.append(nll[block.valid])
        counts.append(cnt[block.valid])
    acc, nll, cnt = np.concatenate(accs), np.concatenate(nlls), np.concatenate(counts)
    has = cnt > 0
    mean_nll = float(nll[has].mean()) if has.any() else float("nan")
    return ProbeResult(float(acc.mean()), mean_nll, acc, np.where(has, nll, np.nan), int((~has).sum()))


def ckl_summary(acc_to_learn: Sequence[float], acc_not_to_forget: Sequence[float]) -> dict:
    """Top Acc, Epoch, NF Acc and Total Knowledge (module docstring) from per-point accuracies (k = 0 … N).

    Raises:
        ValueError: empty or unequal-length sequences.
    """
    tl, nf = list(acc_to_learn), list(acc_not_to_forget)
    if not tl or len(tl) != len(nf):
        raise ValueError(f"need equal, non-empty accuracy lists, got {len(tl)} and {len(nf)}")
    top = max(tl)
    epoch = tl.index(top)
    return {"top_acc": top, "epoch": epoch, "nf_acc": nf[epoch], "total_knowledge": top + nf[epoch]}
