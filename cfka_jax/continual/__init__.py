"""Continual-learning algorithms on the model ports, one file each (conventions §2).

``peft``: LoRA adapters (:class:`~cfka_jax.continual.peft.LoRAConfig`, ``apply_lora``, ``merge_and_unload``) and
freeze filters/masks (``trainable_filter``, ``frozen_filter``, ``trainable_mask``, ``masked_tx``).
"""
