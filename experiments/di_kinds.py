"""The DI law per layer kind (spec cfka_stoc.md §2.6, §2.8; claim ``cfka.di-law-gated-deltanet``): rows of
``cfka di-attention --record`` for a hybrid port (Qwen3.5: Gated DeltaNet linear layers and gated full-attention
layers) and the plain ports beside it.

From the ``context`` measure's z (``lm_theory/measures.py``; a Gated DeltaNet layer's map is its row-normalised
|mixing matrix|, ``lm_theory/attention.py``) and the project's default DI (centred, co-occurring objects), over the
eligible token types, with 95 % bootstrap intervals over token types:

* per (seed, kind, layer): Pearson / Spearman of DI against z of that layer (heads averaged);
* per (seed, kind) with ``layer`` ``"pooled"``: z averaged over the kind's layers and heads;
* per kind with ``seed`` ``"mean"``: the seed-mean z pooled over the kind's layers, trained and untrained
  (``ports``: the members at their initialisation, what position alone gives);
* per seed, ``summary`` ``"held-out"``: held-out sFTA (the theory's regime needs ≥ 0.7).

Kinds are never pooled together: a hybrid model's two maps are different objects (module docstring of
``lm_theory/attention.py``).
"""

from __future__ import annotations

import numpy as np

from cfka_jax.lm_theory.stats import correlate

RECORD = "cfka/di_attention_{arch}"
"""The record's name under the results root, per architecture."""
MEASURE = "context"
DI = "centred/cooccur"
"""The project's default DI convention (the claim rows' ``DEFAULT_DI``)."""


def _row(di: np.ndarray, z: np.ndarray, num_boot: int, **keys) -> dict:
    c = correlate(di, z, num_boot=num_boot)
    return {**keys, "measure": MEASURE, "di": DI, "token_types": c.n, "pearson": c.pearson,
            "pearson_lo": c.pearson_ci[0], "pearson_hi": c.pearson_ci[1], "spearman": c.spearman,
            "spearman_lo": c.spearman_ci[0], "spearman_hi": c.spearman_ci[1]}


def kind_rows(arrays: dict, kinds: tuple[str, ...], seeds: tuple[int, ...], heldout: list[dict], *,
              num_boot: int) -> list[dict]:
    """The record's rows (module docstring) from ``dm.panel``'s arrays (``z_context_ELNM``,
    ``z_init_context_ELNM``, ``context_eligible``, ``context_di_centred_cooccur``) and the layer kinds.

    Raises:
      ValueError: the arrays' layer count differs from ``len(kinds)`` or their member count from ``len(seeds)``.
    """
    z, z0 = arrays[f"z_{MEASURE}_ELNM"], arrays[f"z_init_{MEASURE}_ELNM"]
    if z.shape[1] != len(kinds) or z.shape[0] != len(seeds):
        raise ValueError(f"z has {z.shape[0]} members × {z.shape[1]} layers; expected {len(seeds)} seeds × "
                         f"{len(kinds)} layer kinds {kinds}")
    keep = arrays[f"{MEASURE}_eligible"]
    di = arrays[f"{MEASURE}_di_{DI.replace('/', '_')}"][keep]
    rows = []
    for kind in sorted(set(kinds)):
        layers = [l for l, k in enumerate(kinds) if k == kind]
        for e, seed in enumerate(seeds):
            for l in layers:
                rows.append(_row(di, z[e, l].mean(0)[keep], num_boot, seed=seed, kind=kind, layer=l,
                                 ports="trained"))
            rows.append(_row(di, z[e, layers].mean((0, 1))[keep], num_boot, seed=seed, kind=kind, layer="pooled",
                             ports="trained"))
        for ports, zz in (("trained", z), ("untrained", z0)):
            rows.append(_row(di, zz[:, layers].mean((0, 1, 2))[keep], num_boot, seed="mean", kind=kind,
                             layer="pooled", ports=ports))
    rows += [{"summary": "held-out", "seed": h["seed"], "heldout_sfta": h["Original/sFTA"],
              "heldout_hfta": h["Original/hFTA"], "heldout_em": h["Original/EM"]} for h in heldout]
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per kind, the seed-mean pooled correlations (trained, untrained) and the per-seed pooled ones."""
    lines = ["| layer kind | ports | seed | layer | Pearson [95% CI] | Spearman [95% CI] | token types |",
             "|---|---|---|---|---|---|---|"]
    ci = lambda r, k: f"{r[k]:+.3f} [{r[k + '_lo']:+.3f}, {r[k + '_hi']:+.3f}]"  # noqa: E731
    for r in rows:
        if "kind" in r:
            lines.append(f"| {r['kind']} | {r['ports']} | {r['seed']} | {r['layer']} | {ci(r, 'pearson')} | "
                         f"{ci(r, 'spearman')} | {r['token_types']} |")
    return "\n".join(lines)


def regime(preset: str, arch: str, kinds: tuple[str, ...], pt_step: int, pt_steps: int, attention: str) -> dict:
    """The record's regime fields (what was measured on what)."""
    return {"model": f"{arch} port of the {preset} Biography preset, layers {list(kinds)} (attention: {attention})",
            "world": f"Biography {preset}",
            "dose": f"PT {pt_step} of {pt_steps} steps",
            "measure": "Pearson / Spearman of DI (centred, co-occurring objects) against the query's attention mass "
                       "per token type over the context from the document start (the 'context' measure), per layer "
                       "kind: softmax weights for full-attention layers, the row-normalised |token-mixing matrix| "
                       "for Gated DeltaNet layers (lm_theory/attention.py); 95 % bootstrap intervals over token "
                       "types"}
