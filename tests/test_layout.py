"""The checkout's layout: studies and lemma checks beside the package, installed inside it, imported only from the top.

``experiments/`` and ``proofs_check/`` live beside ``cfka_jax/`` and install as ``cfka_jax.experiments`` and
``cfka_jax.proofs_check`` (``setup.py``). ``lint-imports`` walks ``cfka_jax/`` only, so the arrows into and out of
the two folders are checked here: nothing in the package but ``cfka_jax/cli.py`` imports them, and they never import
the command line.
"""

import ast
import importlib.metadata
import pathlib

import pytest

import cfka_jax.experiments
import cfka_jax.proofs_check

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOP = ("cfka_jax.experiments", "cfka_jax.proofs_check")


def imported_modules(path: pathlib.Path) -> set[str]:
    """Every module name a file imports (absolute imports; ``from a import b`` counts as ``a`` and ``a.b``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _reaches(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


def test_the_folders_sit_beside_the_package():
    assert pathlib.Path(cfka_jax.experiments.__file__).resolve().parent == ROOT / "experiments"
    assert pathlib.Path(cfka_jax.proofs_check.__file__).resolve().parent == ROOT / "proofs_check"
    assert not (ROOT / "cfka_jax" / "experiments").exists() and not (ROOT / "cfka_jax" / "proofs_check").exists()


def test_nothing_named_experiments_is_installed_at_the_top():
    top_level = importlib.metadata.distribution("cfka_jax").read_text("top_level.txt")
    assert top_level is None or top_level.split() == ["cfka_jax"], top_level


@pytest.mark.parametrize("path", sorted((ROOT / "cfka_jax").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_command_line_imports_the_top(path):
    if path == ROOT / "cfka_jax" / "cli.py":
        return
    assert not _reaches(imported_modules(path), TOP), f"{path.relative_to(ROOT)} imports a study or a lemma check"


def test_studies_and_checks_never_import_the_command_line():
    files = sorted((ROOT / "experiments").rglob("*.py")) + sorted((ROOT / "proofs_check").rglob("*.py"))
    bad = {str(p.relative_to(ROOT)): _reaches(imported_modules(p), ("cfka_jax.cli",)) for p in files}
    assert not {k: v for k, v in bad.items() if v}


def test_the_scan_sees_an_upward_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from cfka_jax.experiments import stoc_regime\nimport cfka_jax.proofs_check.run_all\n")
    assert _reaches(imported_modules(f), TOP) == ["cfka_jax.experiments", "cfka_jax.experiments.stoc_regime",
                                                   "cfka_jax.proofs_check.run_all"]
