"""The names a user starts from, one import away: ``from cfka_jax import api`` (or ``cfka_jax.<name>``).

Each entry is the library's own function or class, re-exported; the examples below run as they are (a test
doctests this module).

**A model** — load a local HF folder (never a Hub lookup), save one that ``transformers`` loads::

    model = api.load_model("path/to/Qwen2.5-0.5B")          # also Pythia, Qwen3, Llama, OLMo folders
    api.save_model(model, "path/to/out")

**A world of facts and the theory** — the single-layer linear-attention model's world and its reference optimum
U (spec §2.3: U[o, s] = v_{o,s} / z_s, here with every attention weight z_s = 1):

>>> import jax.numpy as jnp
>>> from cfka_jax import api
>>> world = api.make_world(api.WorldConfig(num_objects=5))
>>> api.reference_optimum(world, jnp.ones(world.vocab_size)).shape == (world.vocab_size, world.vocab_size)
True

**A PT and a CPT run** — Biography pre-training, then continual pre-training with a method; results in memory
(and the run folders on disk); the smoke preset runs in seconds:

>>> import tempfile, pathlib
>>> tmp = pathlib.Path(tempfile.mkdtemp())
>>> data = api.build_data(api.BIOGRAPHY["smoke"].data_config(), str(tmp / "cache"))
>>> pt = api.pretrain(api.PTSpec(preset="smoke", out=str(tmp / "pt"), progress=False), data)
>>> spec = api.CPTSpec(preset="smoke", method="replay-all", out=str(tmp / "cpt"), progress=False)
>>> cpt = api.continual_pretrain(spec, pt, data)
>>> 0.0 <= cpt.final["Original/sFTA"] <= 1.0
True
>>> api.save_model(cpt.model(), tmp / "hf")
>>> type(api.load_model(tmp / "hf")).__name__
'QwenModel'

**A grid of CPT runs in one program** — members differing in seed, learning-rate schedule, replay share α or EWC λ
(``cfka cpt --grid``), each equal to its lone run, each written to its own run folder, ``grid.json`` beside them:

>>> grid = api.GridSpec(api.CPTSpec(preset="smoke", method="replay-all", out=str(tmp / "grid"), progress=False),
...                     api.grid_axes("alpha=0.5,0.8;seeds=0"))
>>> grid.names
['alpha0.5_seed0', 'alpha0.8_seed0']
>>> runs = api.run_grid(grid, pt, data, log=lambda line: None)
>>> [r.final["step"] for r in runs]
[6, 6]

**A method** — a name such as ``stoc + ewc`` resolved once against a recipe (its hooks: replay, penalty, token
loss, update, optimiser):

>>> m = api.method("stoc + ewc", "biography")
>>> (m.replay, m.penalty)
('stoc', 'ewc')

**A claim check** — a measured number against a bound fixed in advance (``cfka proofs --extra FILE.py`` runs your
``@api.check`` functions beside the project's), and the verdict table of the papers' claims from the records:

>>> api.holds("my-lemma", "closed form = simulation", 3e-9, 1e-6).status
'PASS'
>>> rows = api.verdicts(api.load_records("results"))   # from the checkout's root
>>> sum(r.claim.kind == "empirical" for r in rows) >= 45
True

**A mesh** — devices arranged along named axes (``data``, ``fsdp``, ``tensor``); ``--mesh`` on the command line:

>>> mesh = api.make_mesh(api.parse_mesh("auto"))   # every device along the data axis
>>> mesh.axis_names
('data', 'fsdp', 'tensor')
"""

from __future__ import annotations

from cfka_jax.claims import Claim, check, holds, refuted
from cfka_jax.claims.results import load_records, write_record
from cfka_jax.claims.table import derive as verdicts
from cfka_jax.data import build_data
from cfka_jax.models import from_pretrained as load_model
from cfka_jax.models import load_tokenizer
from cfka_jax.models import save_pretrained as save_model
from cfka_jax.parallel.mesh import MeshConfig, make_mesh, parse_mesh
from cfka_jax.runs.biography import continual as continual_pretrain
from cfka_jax.runs.biography import pretrain
from cfka_jax.runs.grid import run_grid
from cfka_jax.runs.grid_spec import GridSpec, grid_axes
from cfka_jax.runs.method import resolve as method
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import CPTSpec, PTSpec
from cfka_jax.theory import WorldConfig, make_world, reference_optimum

__all__ = [
    "BIOGRAPHY", "CPTSpec", "Claim", "GridSpec", "MeshConfig", "PTSpec", "WorldConfig", "build_data", "check",
    "continual_pretrain", "grid_axes", "holds", "load_model", "load_records", "load_tokenizer", "make_mesh",
    "make_world", "method", "parse_mesh", "pretrain", "reference_optimum", "refuted", "run_grid", "save_model",
    "verdicts", "write_record",
]
