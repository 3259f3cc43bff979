"""The single-layer theory (``cfka_jax/theory``) measured on trained multi-layer LMs (spec cfka_stoc.md §2.5–§2.8).

* ``cooccurrence`` / ``diversity``: the Diversity Index of every token type from a corpus's own (token, object)
  co-occurrence counts, with the support and centring conventions of ``theory/diversity.py``;
* ``attention``: the attention a port pays to each token type (layers, heads, occurrences; STOC's maps);
* ``stats``: the one home of correlation + bootstrap (Pearson / Spearman are ``theory/diversity``'s);
* ``biography``: the Biography adapter (examples from packed value occurrences, slots of token types, facts);
* ``stoc_link``: overlap of STOC-selected and lowest-DI tokens; ``retention``: per-fact retention after naive CPT
  against the theory's convergence-point prediction;
* ``invariants``: quantities conserved by gradient flow with per-block rates in every port (head rescalings,
  norm ↔ projection, gated MLP), the multi-layer generalisation of ``theory/conservation.py``.

Layer: above ``models/``, ``data/``, ``train/``, ``eval/`` and ``continual/`` (beside ``geometry/``), below ``runs/``.
"""
