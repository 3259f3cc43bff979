"""Continual-learning algorithms on the model ports, one file each (conventions §2).

``peft``: LoRA adapters (:class:`~cfka_jax.continual.peft.LoRAConfig`, ``apply_lora``, ``merge_and_unload``) and
freeze filters/masks (``trainable_filter``, ``frozen_filter``, ``trainable_mask``, ``masked_tx``).
``ewc``: Fisher estimates and the EWC penalty.
``stoc`` → ``dedup`` → ``replay``: generative replay (STOC attention scores and snippet rules, MinHash LSH,
``ReplayConfig`` / ``build_replay`` / ``load_replay`` for STOC, Random and LAMOL corpora).
``metrics`` / ``evaluate`` / ``em`` / ``fluency`` / ``multiple_choice``: hFTA/sFTA, exact match, KnowEdit
Fluency and MMLU-format accuracy.
``step`` / ``optim`` / ``trainer`` / ``recipes``: the donated jitted train step, AdamW schedule, resumable loop.
"""
