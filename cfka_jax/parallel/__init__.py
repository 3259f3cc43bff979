"""Sharding on JAX's own runtime: one ``jax.sharding.Mesh`` with named axes (data, fsdp, tensor), logical axis
rules for the ports' parameters, sharded placement of train states, batches and sweep grids, and multi-host start.

``mesh``: :class:`MeshConfig`, ``make_mesh``, ``parse_mesh``, ``initialize_distributed``.
``rules``: logical axes of every port parameter (a declarative path table) mapped to mesh axes by one rule table;
``tree_shardings`` for params, optimiser states and whole train states; ``batch_sharding``; ``shard_leading``.
"""
