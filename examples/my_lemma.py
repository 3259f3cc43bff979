"""A new claim from scratch: under gradient flow the population loss never rises, and Taylor's decay rate holds.

    cfka proofs --only my-lemma --extra examples/my_lemma.py --out runs/my-lemma
"""

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt

from cfka_jax.claims import check, closed_form_vs_simulation, holds, save_figure
from cfka_jax.theory import (Rates, SGDConfig, SlotSpec, WorldConfig, dynamics, full_batch, gradient_flow, init_yz,
                             make_world, reference_optimum, yz_loss)

WORLD = WorldConfig(num_objects=3, slots=(SlotSpec("name", 3, (0.3, 1.0)), SlotSpec("query", 1)), seed=1)


@check(name="my-lemma")
def my_lemma(out_dir):
    world = make_world(WORLD)
    loss = lambda p: yz_loss(p, *full_batch(world), world.objects)
    cfg = SGDConfig(steps=200, log_every=10)
    p0 = init_yz(jax.random.key(0), world.vocab_size, scale=0.5)
    _, losses = gradient_flow(p0, world, Rates(1.0, 0.5), 0.05, cfg=cfg, observe=loss)  # RK4, τ = 10
    # Taylor (Z fixed): Y − U decays as exp(−η K τ) e0 near the optimum U
    Z = p0.Z.at[:, world.query_token].set(1.0)
    U = reference_optimum(world, Z[:, world.query_token])
    Y0 = U + 1e-4 * jax.random.normal(jax.random.key(1), U.shape)
    obs = lambda p: dynamics.flatten_error(p.Y, U, world)
    _, errs = gradient_flow(p0._replace(Y=Y0, Z=Z), world, Rates(1.0, 0.0), 0.05, cfg=cfg, observe=obs)
    predict = dynamics.error_evolution(dynamics.error_hessian(world, U, Z), errs[0], 1.0, mode="flow")
    fig, ax = plt.subplots()
    ax.plot(jnp.linspace(0.0, 10.0, 21), losses, "o-")
    ax.set(xlabel="τ", ylabel="population loss", title="my lemma: loss along the flow")
    save_figure(fig, out_dir, "my_lemma")
    return [
        holds("my-lemma", "population loss never rises along the flow (max increase)", jnp.max(jnp.diff(losses)), 0.0),
        closed_form_vs_simulation("my-lemma", "Y − U follows exp(−ηKτ) e0 (rel.)", predict, jnp.linspace(0.0, 10.0, 21),
                                  errs, 1e-3, scale=jnp.linalg.norm(errs[0])),
    ]
