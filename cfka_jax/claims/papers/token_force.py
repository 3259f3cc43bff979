"""The token_force paper's empirical claims."""

from __future__ import annotations

from cfka_jax.claims.papers import PaperClaim

CLAIMS: tuple[PaperClaim, ...] = ()
