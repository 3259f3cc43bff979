"""Dimension-letter legend and jaxtyping aliases used across cfka_jax.

Legend (used in signatures, einsum strings and math-heavy locals such as ``q_BSNH``):

====  ==============================================================
B     batch
S     query positions (sequence)
T     key positions
D     model width
N     query heads
K     key/value heads
H     head dimension
F     MLP width
V     vocabulary
L     layers
J     context tokens of a theory-model context (the lemmas' L; query included)
M     theory vocabulary size (all token types)
O     number of objects (candidate answers) in a fact world
X     context (non-object) token types of a fact world
C     number of distinct contexts in an enumerated fact world
P     number of hyperparameter/seed configurations in a sweep
R     logged time points of a trajectory
E     examples (object occurrences of a packed corpus, ``lm_theory``)
I     bootstrap resamples (``lm_theory/stats``)
A     rotary dimensions of a head (partial RoPE; the rest, H − A, pass through)
====  ==============================================================
"""

from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

__all__ = ["Array", "Bool", "Float", "Int", "PRNGKeyArray"]
