"""Token-force geometry (Ren, Deng, Hong, Lyle, Gal 2026; spec ``token_force.md``): pure functions of
``(params, batch)`` on the Qwen and Pythia ports.

Map of the files:

* ``force``: the one shared shift (:func:`~cfka_jax.geometry.force.to_targets`), force ``g = e_y − π``, update
  energy ``E = ‖g‖²`` and its bounds.
* ``net``: the split-model view (:class:`~cfka_jax.geometry.net.Net`), model facts, parameter roles.
* ``streams``: one forward pass returning logits, h and the per-block residual streams.
* ``readout``: W as ``[V, d]`` for tied and untied heads, ``Wᵀg``, readout transmission R and its evaluator.
* ``channels``: CH1 and the named CH2 variants (no generic CH2), ``seq5``.
* ``onestep``: token factors and gradients, the exact first-order term by scope, the actual one-step change,
  the tied-head decomposition.
* ``validation``: the Section-3 pair table and its §8 summaries.
* ``attribution`` / ``baselines``: forward-only RH/GH sequence scores (token-Gram form); exact per-example
  gradient products and DataInf.
* ``synthetic``: the synthetic multi-class identification task and its base model.
* ``energy``: energy-threshold masking as a training ``loss_fn``, energy statistics and histograms.
* ``resets``: readout / top-block resets as parameter-tree surgery; the functionally untied copy of a tied port.
* ``plasticity``: probe batches of value tokens, the SFT plasticity curve, the drop-vs-gain statistic.
* ``stats``: correlations, sign agreement, Hoyer sparsity, AUC, Recall@K.
* ``tiny``: tiny random-init Pythia / Qwen ports with prime sizes, shared by the tests and the proof checks.
"""
