"""The benchmark scripts (``bench/*.py``) follow the library's interfaces: each imports (its ``main`` not run) and
every ``cfka_jax`` name it imports, at the top or inside a function, exists, so an interface change fails here
instead of in the next benchmark run."""

import ast
import importlib
import importlib.util
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def cfka_imports(path: pathlib.Path) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of every absolute ``cfka_jax`` import in a file (``name`` None for ``import m``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "cfka_jax":
            out.extend((node.lineno, node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name, None) for alias in node.names
                       if alias.name.split(".")[0] == "cfka_jax")
    return out


def test_bench_scripts_found():
    assert len(SCRIPTS) >= 10, f"expected the benchmark scripts in {BENCH}, found {[p.name for p in SCRIPTS]}"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_bench_cfka_names_exist(path):
    """Every ``from cfka_jax.x import y`` of the script (function-level ones too) names an existing module or
    attribute."""
    missing = []
    for line, module, name in cfka_imports(path):
        mod = importlib.import_module(module)
        if name is not None and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{path.name}:{line}: {module}.{name}")
    assert not missing, f"names the library no longer has: {missing}"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_bench_module_imports(path, monkeypatch):
    """The script's module body runs (as an import, not ``__main__``; no command-line flags)."""
    monkeypatch.setattr(sys, "argv", [str(path)])
    monkeypatch.setattr(sys, "path", list(sys.path))  # scripts that put bench/ on the path get it undone
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:  # sibling scripts imported by bare name (``import memory``) are dropped again
        for name in set(sys.modules) - before:
            if str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(BENCH)):
                del sys.modules[name]
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"
