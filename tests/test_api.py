"""The public API: every documented example in ``cfka_jax/api.py`` runs (doctest), and ``import cfka_jax`` stays
light: the names load on first use."""

import doctest
import pathlib
import subprocess
import sys

import cfka_jax
from cfka_jax import api

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_documented_examples_run(monkeypatch):
    monkeypatch.chdir(ROOT)  # the verdict example reads the checkout's results/
    failures, tried = doctest.testmod(api, optionflags=doctest.ELLIPSIS, raise_on_error=False, verbose=False)
    assert tried >= 12 and failures == 0


def test_the_names_are_reachable_from_the_package():
    assert tuple(sorted(api.__all__)) == tuple(sorted(cfka_jax.API))
    for name in api.__all__:
        assert getattr(cfka_jax, name) is getattr(api, name)
    assert set(api.__all__) <= set(dir(cfka_jax))


def test_import_cfka_jax_loads_no_layer():
    code = ("import sys, cfka_jax; heavy = [m for m in sys.modules if m.startswith('cfka_jax.')]; "
            "assert not heavy, heavy; assert 'jax' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
