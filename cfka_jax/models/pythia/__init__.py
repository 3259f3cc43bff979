"""GPT-NeoX (Pythia) port: config, NNX model and strict HF conversion."""

from cfka_jax.models.pythia.config import PythiaConfig
from cfka_jax.models.pythia.convert import export, load
from cfka_jax.models.pythia.model import PythiaModel

__all__ = ["PythiaConfig", "PythiaModel", "export", "load"]
