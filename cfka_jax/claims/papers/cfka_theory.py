"""The cFKA paper's continual-learning claims judged in the theory model (replay share, EWC, oscillation)."""

from __future__ import annotations

from cfka_jax.claims.papers import PaperClaim

CLAIMS: tuple[PaperClaim, ...] = ()
