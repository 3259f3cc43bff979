"""Fixtures of the experiment-command tests."""

import pytest


@pytest.fixture
def cli_inputs(tmp_path, monkeypatch):
    """Run in ``tmp_path`` where the input options of ``corpus-cpt`` / ``knowedit`` name files and folders that
    exist (``corpus/``, ``model/``, ``test.json``: ``cli_gen.Flags.inputs`` checks them as it parses)."""
    monkeypatch.chdir(tmp_path)
    for name in ("corpus", "model"):
        (tmp_path / name).mkdir()
    (tmp_path / "test.json").write_text("[]")
