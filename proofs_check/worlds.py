"""The fact worlds the proof checks use (fixed seeds, so every run measures the same thing)."""

from cfka_jax.theory.world import MULTI_RELATION, SlotSpec, WorldConfig, make_world  # noqa: F401 (MULTI_RELATION re-exported)

# Two name slots, a template and the query: 5 objects, 12 contexts. Small enough for exact Hessians.
SMALL = WorldConfig(
    num_objects=5,
    slots=(SlotSpec("name", 4, (0.2, 0.6)), SlotSpec("name", 3, (0.3, 1.0)), SlotSpec("template", 1), SlotSpec("query", 1)),
    object_skew=0.5,
    smoothing=0.05,
    seed=0,
)


def small_world():
    return make_world(SMALL)


def multi_relation_world():
    return make_world(MULTI_RELATION)
