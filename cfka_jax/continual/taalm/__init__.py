"""TAALM: token-weighted learning with a meta-learned Train-Attention model (Seo, Lee, Yeo, NeurIPS 2024,
arXiv:2407.16920; spec taalm.md).

``twppl``: the token-weighted loss (``twppl.twppl``; the module keeps the name), L_solve, known-masking,
``twppl_loss`` for ``make_train_step``.
``adamw``: the reference's differentiable AdamW (epsilon inside the sqrt) and the paper's SGD step.
``phi``: the Train-Attention model φ (a port with a scalar sigmoid head) and pure θ/φ apply functions.
``meta``: the meta-gradient through the inner update (``adamw2_ref`` | ``sgd1_paper``), meta-batch averaging, the
persistent outer AdamW step.
``metatrain``: the outer loop, TA validation, the checkpoint rule.
``weights``: φ checkpoints, φ's token weights for any batch (``phi_token_weights``) or document set.

The benchmarks (LAMA-CKL, TemporalWiki) and the baselines live in ``continual.ckl``, ``continual.ckl_methods``,
``continual.rho1``, ``continual.recadam``, ``continual.kadapter``.
"""

from cfka_jax.continual.taalm.adamw import AdamWConfig, adamw_step, sgd_step
from cfka_jax.continual.taalm.meta import MetaConfig, ModelFns, Operands, make_meta_step, outer_loss
from cfka_jax.continual.taalm.metatrain import MetaTrainConfig, PairSet, meta_train
from cfka_jax.continual.taalm.phi import PhiConfig, TrainAttention, build_phi
from cfka_jax.continual.taalm.twppl import object_nll, target_mask, twppl_loss
from cfka_jax.continual.taalm.weights import doc_weights, load_phi, phi_token_weights, save_phi

__all__ = ["AdamWConfig", "MetaConfig", "MetaTrainConfig", "ModelFns", "Operands", "PairSet", "PhiConfig",
           "TrainAttention", "adamw_step", "build_phi", "doc_weights", "load_phi", "make_meta_step", "meta_train",
           "object_nll", "outer_loss", "phi_token_weights", "save_phi", "sgd_step", "target_mask", "twppl_loss"]
