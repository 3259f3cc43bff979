"""Where the installed package's modules come from (everything else is in pyproject.toml).

The studies (``experiments/``) and the lemma checks (``proofs_check/``) sit beside ``cfka_jax/`` in the checkout
and are installed inside the package as ``cfka_jax.experiments`` and ``cfka_jax.proofs_check``: an install puts no
top-level ``experiments`` or ``proofs_check`` package into site-packages, and ``cfka`` reaches them by the same
import names in an editable install and in a wheel.
"""

from setuptools import find_packages, setup

ON_TOP = {"cfka_jax.experiments": "experiments", "cfka_jax.proofs_check": "proofs_check"}
"""Installed name → folder beside ``cfka_jax/``."""

setup(
    packages=find_packages(include=["cfka_jax", "cfka_jax.*"]) + list(ON_TOP),
    package_dir=ON_TOP,
)
