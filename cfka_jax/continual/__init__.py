"""Continual-learning algorithms on the model ports, one concern per file (docs/architecture.md).

``peft``: LoRA adapters (:class:`~cfka_jax.continual.peft.LoRAConfig`, ``apply_lora``, ``merge_and_unload``,
``merged_params``) and freeze filters/masks (``trainable_filter``, ``frozen_filter``, ``trainable_mask``, ``masked_tx``).
``ewc``: Fisher estimates and the EWC penalty operands.
``stoc`` → ``dedup`` → ``replay``: generative replay (STOC attention scores and snippet rules, MinHash LSH,
``ReplayConfig`` / ``build_replay`` / ``load_replay`` for STOC, Random and LAMOL corpora).
The training engine is ``cfka_jax/train/``, the metrics ``cfka_jax/eval/``, the run recipes ``cfka_jax/runs/``.
"""
