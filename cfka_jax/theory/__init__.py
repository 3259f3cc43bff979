"""The single-layer linear-attention theory model: pure functions only (the public API re-exported here).

Worlds (``world``), the raw ⇄ (Y, Z) model (``model``), per-block SGD and gradient flow (``train``), the optimum U
(``optimum``), closed-form dynamics as factories returning a ``Predictor`` (``dynamics``, ``predictor``),
conservation (``conservation``) and the Diversity Index (``diversity``). The continual PT → CPT theory stays in
its modules (``cpt``, ``cpt_predictions``, ``cpt_sweep``), imported by name.
"""

from cfka_jax.theory import dynamics
from cfka_jax.theory.conservation import derived_quantity, quoted_quantity, relative_drift
from cfka_jax.theory.diversity import diversity_index, predicted_attention
from cfka_jax.theory.dynamics import error_covariance, error_evolution, error_hessian, null_projection, spectrum
from cfka_jax.theory.model import (RawParams, YZParams, init_raw, init_yz, raw_logits, raw_loss, raw_to_yz,
                                   yz_logits, yz_loss)
from cfka_jax.theory.optimum import bayes_posterior, logit_gap, posterior_kl, query_attention, reference_optimum
from cfka_jax.theory.predictor import Predictor
from cfka_jax.theory.train import (Rates, SGDConfig, flow_field, gradient_flow, population_grad, rk4_step,
                                   train_sgd)
from cfka_jax.theory.world import FactWorld, SlotSpec, WorldConfig, full_batch, make_world

__all__ = [
    "FactWorld", "Predictor", "Rates", "RawParams", "SGDConfig", "SlotSpec", "WorldConfig", "YZParams",
    "bayes_posterior", "derived_quantity", "diversity_index", "dynamics", "error_covariance", "error_evolution",
    "error_hessian", "flow_field", "full_batch", "gradient_flow", "init_raw", "init_yz", "logit_gap", "make_world",
    "null_projection", "population_grad", "posterior_kl", "predicted_attention", "query_attention",
    "quoted_quantity", "raw_logits", "raw_loss", "raw_to_yz", "reference_optimum", "relative_drift", "rk4_step",
    "spectrum", "train_sgd", "yz_logits", "yz_loss",
]
