"""Per-fact retention after naive CPT: measured on a port, predicted by the theory's convergence points.

Measured. Fact f = (person, attribute) of the PT population; its test occurrences are examples of the packed
``pt_test`` set (``lm_theory/biography.examples``). s_f is the mean over them of the soft first-token probability
softmax(logits[chunk, q])[first value token] (per-occurrence sFTA, spec §5.1), under the PT and the CPT model;
the measured retention is r_f = s_f^CPT / s_f^PT over the facts the PT model knows (s_f^PT ≥ ``known``).

Predicted (spec §2.3, §2.7; the protocol of ``theory/cpt.py``: attention fixed, η_Y ≫ η_Z). After PT the store
is the reference optimum U_old, so object o's logit in context X is Σ_{s∈X} v^old_{o,s} (the PT corpus's
v_{o,s} = ln Pr_ε(s|o) + L⁻¹ ln Pr_ε(o), every object, smoothing ε). Naive CPT moves only the columns y_s of
tokens that occur in the new data, towards the new data's optimum U_new; the other columns keep U_old:

    p_PT(o | X)  = softmax_o Σ_{s∈X} v^old_{o,s},
    p_CPT(o | X) = softmax_o Σ_{s∈X} v^post_{o,s},     v^post_{·,s} = v^new_{·,s} if n_new(s) > 0 else v^old_{·,s},

and the predicted retention of f is the mean over its occurrences of ln p_CPT(o_f | X) − ln p_PT(o_f | X) (a log
ratio: the naive-Bayes posteriors are far too peaked for a float32 ratio). The sums run over the distinct token
types of X, as the counts do. What the prediction encodes: a fact survives through the
evidence its context tokens carry that CPT never touches (name tokens no new person shares), and loses the
evidence of shared tokens (templates, shared first names) and the prior of objects the new data does not use.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax.data.packing import Packed
from cfka_jax.eval.batches import row_blocks
from cfka_jax.lm_theory.cooccurrence import CoOccurrence, log_prior_terms
from cfka_jax.lm_theory.stats import correlate
from cfka_jax.train.step import make_eval_logits


def presence(contexts: list[np.ndarray], num_tokens: int) -> np.ndarray:
    """(E, M) float32 indicator of the token types of every context."""
    out = np.zeros((len(contexts), num_tokens), np.float32)
    for k, ctx in enumerate(contexts):
        out[k, ctx] = 1.0
    return out


def predicted_log_probs(old: CoOccurrence, new: CoOccurrence, present_EM: np.ndarray, objects_E: np.ndarray, *,
                        smoothing: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """(ln p_PT, ln p_CPT) of every example's own object (module docstring)."""
    v_old = log_prior_terms(old, support="all", smoothing=smoothing)
    v_new = log_prior_terms(new, support="all", smoothing=smoothing)
    exposed = jnp.asarray(new.n_s > 0)[:, None]
    v_post = jnp.where(exposed, v_new, v_old)
    x = jnp.asarray(present_EM, v_old.dtype)
    rows = jnp.arange(len(objects_E))
    log_pt = jax.nn.log_softmax(x @ v_old, axis=-1)[rows, objects_E]
    log_cpt = jax.nn.log_softmax(x @ v_post, axis=-1)[rows, objects_E]
    return np.asarray(log_pt, np.float64), np.asarray(log_cpt, np.float64)


def example_soft(graphdef, params, rest, packed: Packed, chunk_E: np.ndarray, query_E: np.ndarray,
                 batch_size: int = 16) -> np.ndarray:
    """softmax(logits[chunk, q])[tokens[chunk, q + 1]] for every example (float64, (E,))."""
    logits_fn, out = make_eval_logits(graphdef, rest), np.zeros(len(chunk_E))
    chunks = np.unique(chunk_E)
    for block in row_blocks(len(chunks), batch_size):
        rows = chunks[block.rows]
        batch = {"tokens": jnp.asarray(packed.tokens[rows], jnp.int32),
                 "positions": jnp.asarray(packed.positions[rows], jnp.int32)}
        if packed.doc_mask:
            batch["segment_ids"] = jnp.asarray(packed.segment_ids[rows], jnp.int32)
        probs = np.asarray(jax.nn.softmax(logits_fn(params, batch), axis=-1))
        for i, c in enumerate(chunks[block.rows[block.valid]]):
            sel = np.flatnonzero(chunk_E == c)
            out[sel] = probs[i, query_E[sel], packed.tokens[c, query_E[sel] + 1]]
    return out


def per_fact(facts_E2: np.ndarray, values_E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique facts (F, 2), mean of ``values`` over each fact's occurrences (F,))."""
    keys, inverse = np.unique(facts_E2, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    return keys, np.bincount(inverse, weights=values_E) / np.bincount(inverse)


def compare(facts_E2: np.ndarray, soft_pt: np.ndarray, soft_cpt: np.ndarray, log_pt: np.ndarray,
            log_cpt: np.ndarray, *, known: float = 0.5, num_boot: int = 1000) -> dict:
    """Rank agreement of measured and predicted per-fact retention over the known facts; also how well the
    theory's PT posterior ranks what the port learned (all facts)."""
    _, s_pt = per_fact(facts_E2, soft_pt)
    _, s_cpt = per_fact(facts_E2, soft_cpt)
    _, pred = per_fact(facts_E2, log_cpt - log_pt)
    _, pred_pt = per_fact(facts_E2, log_pt)
    keep = s_pt >= known
    out = {"facts": int(s_pt.size), "known": int(keep.sum()), "known_threshold": known,
           "measured_mean_retention": float(np.mean(s_cpt[keep] / s_pt[keep])) if keep.any() else float("nan"),
           "pt_fit": correlate(pred_pt, s_pt, num_boot=num_boot).as_dict()}
    if keep.sum() >= 3:
        out["retention"] = correlate(pred[keep], s_cpt[keep] / s_pt[keep], num_boot=num_boot).as_dict()
    return out
