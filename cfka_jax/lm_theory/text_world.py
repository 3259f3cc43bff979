"""DI against received attention for ports trained on the rendered theory world (``data/theory_text.py``).

The measurement is ``cfka di-attention``'s (spec §2.6, §2.8), applied to the rendered world's examples:

* DI of every token type from the corpus's own (token, object) presence counts over the examples' contexts
  (``cooccurrence.count_cooccurrence``, ``diversity.diversity_index``, the project default convention centred /
  co-occurring objects and the quoted un-centred / all objects);
* the attention the query pays to each token type, per layer, pooled over layers, head magnitudes averaged
  (``attention.attention_mass`` / ``per_type``: z_s = Σ over the examples holding s of the query's attention on
  s's positions, divided by the number of those examples);
* Pearson and Spearman over the *eligible* token types — every type but EOS in at least ``min_count`` contexts —
  with percentile-bootstrap intervals over token types (``stats.correlate``).

``span`` picks the context: ``document`` (from the document start, the Biography convention) or ``fact`` (the
example's own sentence, the theory's context). In a one-fact document the two are the same.
Besides the correlation, :func:`diagnostics` reports where the attention goes: the share of the query's pooled
attention on itself, on the other tokens of its own sentence, and on earlier sentences of its chunk.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cfka_jax.data.packing import Packed
from cfka_jax.data.theory_text import Located, TextCorpus
from cfka_jax.lm_theory.attention import attention_mass, per_type
from cfka_jax.lm_theory.cooccurrence import count_cooccurrence
from cfka_jax.lm_theory.diversity import CONVENTIONS, diversity_index
from cfka_jax.lm_theory.stats import correlate

SPANS = ("document", "fact")
REPORTED = {"centred/cooccur": CONVENTIONS[0], "uncentred/all": CONVENTIONS[3]}
"""The DI conventions a walk reports: the project default and the quoted form."""


@dataclasses.dataclass(frozen=True)
class CorpusDI:
    """The DI side of one span: DI per reported convention (M,), n_s (M,), the eligible token types (M,) bool."""

    span: str
    di: dict
    n_s: np.ndarray
    eligible: np.ndarray


def corpus_di(packed: Packed, ex: Located, corpus: TextCorpus, *, span: str = "document",
              min_count: int = 20) -> CorpusDI:
    """Counts, DI and eligible types of the examples' contexts (module docstring).

    Raises:
      ValueError: an unknown span, or fewer than 3 eligible token types.
    """
    if span not in SPANS:
        raise ValueError(f"span must be one of {SPANS}, got {span!r}")
    co = count_cooccurrence(ex.contexts(packed.tokens, span=span), ex.objects, num_tokens=corpus.vocab_size,
                            num_objects=len(corpus.object_ids))
    eligible = (co.n_s >= min_count) & (np.asarray(corpus.kinds) != "eos")
    if eligible.sum() < 3:
        raise ValueError(f"only {int(eligible.sum())} token types in >= {min_count} contexts: too few to correlate")
    di = {name: np.asarray(diversity_index(co, conv), np.float64) for name, conv in REPORTED.items()}
    return CorpusDI(span, di, co.n_s, eligible)


def received_attention(graphdef, params, rest, packed: Packed, ex: Located, c: CorpusDI, *,
                       batch_size: int = 256) -> np.ndarray:
    """z^l_s of one member over the span's contexts, (L, M) float64."""
    start = ex.start if c.span == "document" else ex.sentence
    mass = attention_mass(graphdef, params, rest, packed, ex.chunk, ex.query, start, num_tokens=len(c.n_s),
                          batch_size=batch_size)
    return per_type(mass, c.n_s)[0]


def correlations(c: CorpusDI, z_LM: np.ndarray, *, num_boot: int = 1000) -> dict:
    """{convention: Correlation dict} of DI against the pooled z over the eligible types, plus per layer for the
    default convention (``layers``)."""
    keep = c.eligible
    out = {name: correlate(di[keep], z_LM.mean(0)[keep], num_boot=num_boot).as_dict() for name, di in c.di.items()}
    default = c.di["centred/cooccur"][keep]
    out["layers"] = [correlate(default, z[keep], num_boot=num_boot).as_dict() for z in z_LM]
    return out


def diagnostics(graphdef, params, rest, packed: Packed, ex: Located, corpus: TextCorpus, *,
                batch_size: int = 256) -> dict:
    """Where the query's pooled attention mass goes, as shares of the whole row (mean over examples): on the query
    itself, on the rest of its own sentence, on earlier sentences of its document, before the document (earlier
    documents of the chunk)."""
    self_only = Located(ex.chunk, ex.query, ex.query, ex.query, ex.objects)
    sentence = Located(ex.chunk, ex.query, ex.sentence, ex.sentence, ex.objects)
    document = Located(ex.chunk, ex.query, ex.start, ex.start, ex.objects)
    chunk = Located(ex.chunk, ex.query, np.zeros_like(ex.query), np.zeros_like(ex.query), ex.objects)
    m = corpus.vocab_size
    total = {}
    for name, loc in (("self", self_only), ("sentence", sentence), ("document", document), ("chunk", chunk)):
        mass = attention_mass(graphdef, params, rest, packed, loc.chunk, loc.query, loc.start, num_tokens=m,
                              batch_size=batch_size)
        total[name] = float(mass.mean(0).sum())
    whole = max(total["chunk"], 1e-30)
    return {"on_query": total["self"] / whole, "on_own_sentence": (total["sentence"] - total["self"]) / whole,
            "on_earlier_sentences": (total["document"] - total["sentence"]) / whole,
            "before_document": (total["chunk"] - total["document"]) / whole}
